"""Tests of transformer/runs.py (book/runs.md)."""

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


def test_the_clock_says_how_much_of_the_run_is_done():
    cpu = torch.device("cpu")
    assert Clock(TrainingConfig(max_steps=10), 1, cpu).done(4) == 0.4
    assert Clock(TrainingConfig(max_steps=10, max_minutes=1e9), 1, cpu).done(5) == 0.5
    timed = Clock(TrainingConfig(max_steps=10, max_minutes=1e-9), 1, cpu)
    time.sleep(0.01)
    assert timed.done(1) == 1.0, "past max_minutes: all done, whatever the steps say"


def test_the_cooldown_factor_is_the_written_out_line():
    """Oracle: 1 until the last `cooldown` of the run, then (1 - done) / cooldown."""
    for done in (0.0, 0.5, 0.75, 0.8, 0.9, 0.95, 1.0):
        assert cooldown_factor(done, 0.25) == pytest.approx(min(1.0, (1 - done) / 0.25))
        assert cooldown_factor(done, 0.0) == 1.0


def test_a_plan_continues_the_ramp_to_the_peak_then_falls_to_zero_as_written_out():
    """Oracle, by hand: 1,000 updates, planned after update 30 (made at 0.3e-3); warm-up a
    tenth of them (100, under the 800 allowed), the peak held, then a line to 0 over the last
    fifth of the run's time."""
    plan = plan_schedule(1000, warmup_steps=800, peak=1e-3, start=30, rate=0.3e-3)
    assert (plan.updates, plan.warmup) == (1000, 100)
    assert plan.rate(31, 0.031) == pytest.approx(0.3e-3 + 0.7e-3 / 70)
    assert plan.rate(65, 0.065) == pytest.approx(0.65e-3)
    assert plan.rate(100, 0.1) == pytest.approx(1e-3)
    assert plan.rate(550, 0.55) == pytest.approx(1e-3), "the peak held"
    assert plan.rate(850, 0.85) == pytest.approx(0.75e-3)
    assert plan.rate(550, 0.9) == pytest.approx(0.5e-3), "the fall follows the run's time"
    assert plan.rate(90, 0.9) == pytest.approx(0.5e-3), "a run slower than planned falls by its time"
    assert plan.rate(1000, 1.0) == 0.0
    assert plan_schedule(100_000, 800, 1e-3).warmup == 800, "at most the preset's warm-up"
    late = plan_schedule(20, 800, 1e-3, start=30)
    assert (late.updates, late.warmup) == (32, 31), "a budget already spent: one update up, one down"


def test_a_run_resumed_at_update_3200_plans_from_there():
    """Oracle, by hand: resumed at update 3,200, planned after its 30th update (3,230) to
    end at 6,420: a warm-up of a tenth of the 3,220 updates of this process (322, to
    3,522; not twice the 3,230 updates since the run began), the peak held, and the fall
    over the last fifth of this process's budget."""
    plan = plan_schedule(6420, 800, 1e-3, start=3230, rate=0.4e-3, first=3200)
    assert plan.warmup == 3522
    assert plan.rate(3376, 0.05) == pytest.approx(0.4e-3 + 0.6e-3 * 146 / 292)
    assert plan.rate(4000, 0.5) == pytest.approx(1e-3), "the peak held"
    assert plan.rate(6000, 0.9) == pytest.approx(0.5e-3), "half-way down the fall"
    assert plan.rate(6420, 1.0) == 0.0


def test_one_function_gives_the_rate_of_every_update_of_either_schedule():
    """Oracle: the paper's formula written out, times the cool-down's line; the plan of a step budget:
    a ramp over a tenth of it to 0.7 of the curve's peak, held, and a line to 0 over the last fifth."""
    planner = Planner(TrainingConfig(max_steps=100, warmup_steps=10, lr_scale=2.0, cooldown=0.2), d_model=64)
    for update in (1, 5, 10, 50, 81, 90, 100):
        done = (update - 1) / 100
        paper = 2.0 * 64**-0.5 * min(update**-0.5, update * 10**-1.5)
        assert planner.rate(update, done) == pytest.approx(paper * min(1.0, (1 - done) / 0.2), rel=1e-12)
    planned = Planner(TrainingConfig(max_steps=100, warmup_steps=10, schedule="planned"), d_model=64)
    peak = 0.7 * 64**-0.5 * 10**-0.5
    rates = [planned.rate(u, (u - 1) / 100) for u in range(1, 101)]
    assert rates == pytest.approx([min(u / 10, 1.0, (1 - (u - 1) / 100) / 0.2) * peak for u in range(1, 101)],
                                  rel=1e-12)


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
