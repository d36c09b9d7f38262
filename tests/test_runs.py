"""Tests of transformer/runs.py (book/runs.md)."""

from types import SimpleNamespace
import json
import os
import signal
import time

import pytest
import torch

from transformer.runs import (
    FEW_UPDATES,
    Clock,
    LossWindow,
    Planner,
    append_metrics,
    cooldown_factor,
    deferred_signals,
    fitted_dropout,
    fitted_max_tokens,
    forget_metrics_after,
    plan_schedule,
    run_log,
    schedule_for,
    scheduled_rate,
)
from transformer.plan import TrainingConfig


def test_the_clock_stops_at_max_steps_and_checkpoints_every_n_steps():
    config = TrainingConfig(max_steps=10, checkpoint_every=4, checkpoint_minutes=1e9)
    clock = Clock(config, world_size=1, device=torch.device("cpu"))
    decisions = [clock.decide(step) for step in range(11)]
    assert [step for step, (_, due) in enumerate(decisions) if due] == [4, 8]
    assert [step for step, (stop, _) in enumerate(decisions) if stop] == [10]
    timed = Clock(TrainingConfig(max_minutes=1e-9, checkpoint_minutes=1e-9), 1, torch.device("cpu"))
    time.sleep(0.01)
    assert timed.decide(1) == (True, True), "past max_minutes and past checkpoint_minutes"


def test_the_clock_also_stops_at_the_schedules_last_update():
    clock = Clock(TrainingConfig(max_minutes=1e9), 1, torch.device("cpu"))
    assert [clock.decide(step, last=5)[0] for step in (4, 5)] == [False, True]
    assert not clock.decide(10**6)[0], "no last update: the minutes decide"


def test_the_cooldown_factor_is_the_written_out_line():
    """Oracle: 1 until the last `cooldown` of the run, then (1 - done) / cooldown."""
    for done in (0.0, 0.5, 0.75, 0.8, 0.9, 0.95, 1.0):
        assert cooldown_factor(done, 0.25) == pytest.approx(min(1.0, (1 - done) / 0.25))
        assert cooldown_factor(done, 0.0) == 1.0


def test_a_plan_continues_the_ramp_to_the_peak_then_falls_to_zero_as_written_out():
    """Oracle, by hand: 1,000 updates, planned after update 30 (made at 0.3e-3); warm-up a
    tenth of them (100, under the 800 allowed), the peak held, then a line to 0 over the last
    fifth of the updates (update u is made with (u - 1) / 1000 of them done)."""
    plan = plan_schedule(1000, warmup_steps=800, peak=1e-3, start=30, rate=0.3e-3)
    assert (plan.updates, plan.warmup) == (1000, 100)
    assert scheduled_rate(31, plan) == pytest.approx(0.3e-3 + 0.7e-3 / 70)
    assert scheduled_rate(65, plan) == pytest.approx(0.65e-3)
    assert scheduled_rate(100, plan) == pytest.approx(1e-3)
    assert scheduled_rate(550, plan) == pytest.approx(1e-3), "the peak held"
    assert scheduled_rate(851, plan) == pytest.approx(0.75e-3)
    assert scheduled_rate(901, plan) == pytest.approx(0.5e-3), "the fall is counted in updates"
    assert scheduled_rate(1001, plan) == 0.0
    assert plan_schedule(100_000, 800, 1e-3).warmup == 800, "at most the preset's warm-up"
    late = plan_schedule(20, 800, 1e-3, start=30)
    assert (late.updates, late.warmup) == (32, 31), "a budget already spent: one update up, one down"


def test_a_run_resumed_at_update_3200_plans_from_there():
    """Oracle, by hand: resumed at update 3,200, planned after its 30th update (3,230) to
    end at 6,420: a warm-up of a tenth of the 3,220 updates of this process (322, to
    3,522; not twice the 3,230 updates since the run began), the peak held, and the fall
    over the last fifth of this process's updates."""
    plan = plan_schedule(6420, 800, 1e-3, start=3230, rate=0.4e-3, first=3200)
    assert plan.warmup == 3522
    assert scheduled_rate(3376, plan) == pytest.approx(0.4e-3 + 0.6e-3 * 146 / 292)
    assert scheduled_rate(4000, plan) == pytest.approx(1e-3), "the peak held"
    half = 3200 + round(0.9 * 3220) + 1  # made with 0.9 of this process's updates done
    assert scheduled_rate(half, plan) == pytest.approx(0.5e-3, rel=1e-3), "half-way down the fall"
    assert scheduled_rate(6421, plan) == 0.0


def test_one_function_gives_the_rate_of_every_update_of_either_schedule():
    """Oracle: the paper's formula written out, times the cool-down's line; the plan of a step budget:
    a ramp over a tenth of it to 0.7 of the curve's peak, held, and a line to 0 over the last fifth."""
    config = TrainingConfig(max_steps=100, warmup_steps=10, lr_scale=2.0, cooldown=0.2)
    paper = schedule_for(config, 64, 100, "by hand")
    for update in (1, 5, 10, 50, 81, 90, 100):
        done = (update - 1) / 100
        rate = 2.0 * 64**-0.5 * min(update**-0.5, update * 10**-1.5)
        assert scheduled_rate(update, paper) == pytest.approx(rate * min(1.0, (1 - done) / 0.2), rel=1e-12)
    planned = schedule_for(TrainingConfig(max_steps=100, warmup_steps=10, schedule="planned"), 64, 100, "")
    peak = 0.7 * 64**-0.5 * 10**-0.5
    rates = [scheduled_rate(u, planned) for u in range(1, 101)]
    assert rates == pytest.approx([min(u / 10, 1.0, (1 - (u - 1) / 100) / 0.2) * peak for u in range(1, 101)],
                                  rel=1e-12)
    unknown = schedule_for(TrainingConfig(max_minutes=1.0, warmup_steps=10), 64, None, "", measure=True)
    assert [scheduled_rate(u, unknown) for u in (5, 10, 10**6)] == pytest.approx([peak / 2, peak, peak]), \
        "no end known yet: a rise to the peak, held"


class _Clock:
    """A clock whose minutes are given, one process."""

    def __init__(self):
        self.now = 0.0

    def minutes(self):
        return self.now

    def rank0(self, value):
        return value


def test_the_planner_measures_once_after_update_30_and_plans_the_rest_from_there():
    """Oracle, by hand: 20 updates between minute 0.1 (update 10) and 0.3 (update 30): 100 a minute,
    so 30 + 100 x 0.7 = 100 updates in the budget of 1 minute; the ramp goes on from update 30."""
    config = TrainingConfig(max_minutes=1.0, warmup_steps=800)
    first = schedule_for(config, 64, 500, "timed", measure=True)
    planner, clock, made = Planner(config, first, 0), _Clock(), []
    for step in range(1, 60):
        clock.now = step / 100
        made.append((step, planner.measure(step, 0.25e-3, clock)))
    made = [(step, schedule) for step, schedule in made if schedule is not None]
    assert [step for step, _ in made] == [30], "once, after update 30"
    schedule = made[0][1]
    assert (schedule.updates, schedule.start, schedule.start_rate, schedule.measure) == (100, 30, 0.25e-3, False)
    assert schedule.why == "measured at update 30: 100 updates a minute, about 100 in 1 min"
    assert scheduled_rate(31, schedule) > 0.25e-3 and scheduled_rate(101, schedule) == 0.0
    said = Planner(config, schedule, 0)
    assert all(said.measure(step, 1e-3, clock) is None for step in range(1, 60)), "measured: not again"


def test_the_loss_window_sums_loss_and_tokens_between_reads():
    window = LossWindow(torch.device("cpu"))
    for loss, tokens in ((6.0, 3), (2.0, 1)):
        window.add(torch.tensor(loss), tokens)
    first = window.read(world_size=1)
    assert first["loss"] == 8.0 / 4 and first["tokens_per_s"] > 0
    window.add(torch.tensor(1.0), 2)
    assert window.read(world_size=1)["loss"] == 0.5, "a read starts a new window"


def test_metrics_are_appended_one_json_line_a_record(tmp_path):
    append_metrics(tmp_path / "run", {"step": 1, "loss": 2.5})
    append_metrics(tmp_path / "run", {"step": 2, "loss": 2.0})
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_the_run_log_writes_on_rank_0_and_shows_training_records(tmp_path, capsys):
    record = {"step": 50, "loss": 2.25, "lr": 1e-3, "tokens_per_s": 12345.6, "minutes": 1.5}
    with run_log(tmp_path / "rank0", 100, 0, rank=0) as log:
        log(None)
        log(record)
        log({"step": 50, "val_loss": 2.0})  # a validation: written, not shown
    log({"step": 50, "minutes": 1.6})  # after the block (the final record): written
    lines = (tmp_path / "rank0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [50, 50, 50]
    assert json.loads(lines[0]) == record and "val_loss" in lines[1]
    # pytest captures stderr, which is no terminal: plain lines, not a bar
    shown = capsys.readouterr().out
    assert shown == "step 50: loss 2.250, lr 1.00e-03, 12,346 tokens/s, 1.5 min\n"
    with run_log(tmp_path / "rank1", 100, 0, rank=1) as log:
        log(record)
    with run_log(tmp_path / "quiet", 100, 0, rank=0, progress=False) as log:
        log(record)
    assert not (tmp_path / "rank1").exists(), "only rank 0 writes the metrics"
    assert (tmp_path / "quiet" / "metrics.jsonl").exists()
    assert capsys.readouterr().out == "", "shown by rank 0 only, and only with progress"


def test_forgetting_metrics_keeps_complete_lines_up_to_the_step(tmp_path):
    lines = [json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (2, 4, 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(lines) + '{"step": 8, "lo')
    forget_metrics_after(tmp_path, 4)
    assert (tmp_path / "metrics.jsonl").read_text() == "".join(lines[:2])
    forget_metrics_after(tmp_path / "absent", 4)  # no metrics yet: nothing to do


def test_a_signal_in_the_block_is_recorded_and_a_second_interrupts():
    with deferred_signals() as received:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert received == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_deferred_signals_can_be_off():
    with deferred_signals(enabled=False) as received:
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert received == []


def test_a_budget_of_few_updates_halves_the_batch_as_worked_by_hand():
    """600 s / 0.9 s = 666 updates of 4,096 tokens: under the line, 2,048. 3,600 s / 0.4 s =
    9,000: kept. 600 s / 0.5 s = 1,200, exactly FEW_UPDATES: not under it."""
    assert FEW_UPDATES == 1200
    assert fitted_max_tokens(4096, 0.9, 10) == (2048, 666)
    assert fitted_max_tokens(4096, 0.4, 60) == (4096, 9000)
    assert fitted_max_tokens(4096, 0.5, 10) == (4096, 1200)
    assert fitted_max_tokens(4096, 0.5001, 10) == (2048, 1199)
    assert fitted_max_tokens(4097, 10.0, 1) == (2048, 6), "the floor of an odd batch's half"


def test_the_dropout_of_a_budget_is_that_of_the_first_line_it_is_under_as_worked_by_hand():
    """Lines at 10 and 30 passes: 3 and 9.9 passes are under the first (0, not None: no dropout
    is a rate); 10 and 29 under the second; 30 and 1,000 under none (the model's own)."""
    lines = ((10, 0.0), (30, 0.1))
    assert [fitted_dropout(e, lines) for e in (3, 9.9, 10, 29, 30, 1000)] == [0.0, 0.0, 0.1, 0.1, None, None]
    assert fitted_dropout(0.5, ((1, 0.2),)) == 0.2 and fitted_dropout(1, ((1, 0.2),)) is None


def _run_on(config, minutes_of_update):
    """A run of minutes on a fake clock, update by update: the schedules its Planner made
    (update, schedule), where it stopped, the minutes it used, the rate of each update, and
    the schedule planned at update 30."""
    schedule = schedule_for(config, 64, 2000, "timed", measure=True)
    planner, clock, made, step, rates = Planner(config, schedule, 0), _Clock(), [], 0, []
    while clock.now < config.max_minutes and (schedule.updates is None or step < schedule.updates):
        step += 1
        clock.now += minutes_of_update(step)
        rates.append(scheduled_rate(step, schedule))
        if new := planner.measure(step, rates[-1], clock):
            schedule = new
            made.append((step, new))
        if step == 30:
            at_30 = new
    return SimpleNamespace(made=made, stopped=step, minutes=clock.now, rates=rates, at_30=at_30)


def _falls_without_a_jump(rates, peak, steepest):
    """The rates after the peak never rise, and no update's fall exceeds `steepest`."""
    after = rates[rates.index(peak):]
    drops = [a - b for a, b in zip(after, after[1:])]
    return min(drops) >= -1e-12 * peak and max(drops) <= steepest


def test_a_machine_that_slows_down_moves_the_schedules_end_so_the_rate_still_falls_to_zero():
    """Oracle, by hand: 100 updates a minute to update 200 (minute 2), then 50 a minute: the
    ten minutes hold 200 + 50 x 8 = 600 updates, not the 999 measured at update 30. Measured once,
    the run would stop on its clock at the peak rate; measured every REPLAN_EVERY updates, its end
    moves to about 600 and the rate falls to about zero there."""
    config = TrainingConfig(max_minutes=10.0, warmup_steps=800)
    run = _run_on(config, lambda step: 0.01 if step <= 200 else 0.02)
    at_30 = run.at_30
    assert at_30.updates == 999 and scheduled_rate(600, at_30) == at_30.peak, "once: at the peak"
    assert all("measured again at update" in s.why for _, s in run.made[1:]) and len(run.made) > 1
    assert abs(run.made[-1][1].updates - 600) <= 6 and abs(run.stopped - 600) <= 6
    assert run.rates[-1] < 0.05 * at_30.peak, "the fall reached about zero"


def test_a_machine_that_speeds_up_in_the_fall_moves_the_end_later_and_the_rate_never_rises():
    """Oracle, by hand: 100 updates a minute to update 850, inside the fall of the 999 planned
    at update 30, then 200 a minute: the ten minutes hold 850 + 200 x 1.5 = 1,150 updates. The
    end moves later, the fall goes on from the rate it had reached, and the run uses its
    minutes."""
    config = TrainingConfig(max_minutes=10.0, warmup_steps=800)
    run = _run_on(config, lambda step: 0.01 if step <= 850 else 0.005)
    peak = run.at_30.peak
    assert any(step > 850 and s.updates > 1100 for step, s in run.made), "the end moved later"
    assert abs(run.stopped - 1150) <= 12 and run.minutes >= 9.9
    assert _falls_without_a_jump(run.rates, peak, steepest=peak / 100)
    assert run.rates[-1] < 0.05 * peak, "the fall reached about zero"


def test_a_slow_window_in_the_fall_moves_the_end_earlier_then_back_without_a_jump():
    """Oracle, by hand: 100 updates a minute, but updates 801 to 850, early in the fall of the
    999 planned at update 30, take twice as long: the ten minutes hold 1,000 - 50 = 950 updates.
    The slow window projects an end near 917; the next window, 20 of its 50 updates slow, moves
    it back to about 930 (within 3% of 950). The rate never rises and never jumps."""
    config = TrainingConfig(max_minutes=10.0, warmup_steps=800)
    run = _run_on(config, lambda step: 0.02 if 800 < step <= 850 else 0.01)
    peak = run.at_30.peak
    ends = [s.updates for step, s in run.made if step > 800]
    assert min(ends) < 920 and ends[-1] > min(ends), f"earlier, then later: {ends}"
    assert 0.97 * 950 <= run.stopped <= 950 and run.minutes >= 0.97 * 10
    assert _falls_without_a_jump(run.rates, peak, steepest=peak / 50)
    assert run.rates[-1] < 0.05 * peak, "the fall reached about zero"
