# Generated from book/runs.md by tools/export.py: edit the chapter.
"""The run around the training loop: when to stop and checkpoint, the cool-down, the
log, and deferred signals."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from transformer.files import write_atomically
from transformer.presets import FEW_UPDATES
from transformer.training import learning_rate
from transformer.utils import add_to_class


class RunSettings(Protocol):
    """What the clock and the schedule read of a run's settings (the plan's
    TrainingConfig has them all)."""

    max_steps: int | None
    max_minutes: float | None
    checkpoint_every: int | None
    checkpoint_minutes: float
    log_every: int
    warmup_steps: int
    lr_scale: float
    cooldown: float
    planned: bool


class Clock:
    """Decides, after each step, whether to stop and whether a checkpoint is due."""

    def __init__(self, config: RunSettings, world_size: int, device: torch.device):
        self.config, self.world_size, self.device = config, world_size, device
        self.started = self.last_checkpoint = time.perf_counter()

    def minutes(self) -> float:
        return (time.perf_counter() - self.started) / 60

    def checkpointed(self) -> None:
        self.last_checkpoint = time.perf_counter()

    def rank0(self, value: float) -> float:
        """Rank 0's `value`, on every process."""
        if self.world_size == 1:
            return value
        value = torch.tensor(value, device=self.device, dtype=torch.float64)
        dist.broadcast(value, 0)
        return value.item()

    def decide(self, step: int, last: int | None = None) -> tuple[bool, bool]:
        """(stop now, checkpoint now) after `step` steps; last: the schedule's last
        update (Schedule.updates), a stop too."""
        config = self.config
        stop = config.max_steps is not None and step >= config.max_steps
        stop = stop or (last is not None and step >= last)
        due = bool(config.checkpoint_every) and step > 0
        due = due and step % config.checkpoint_every == 0
        if self.world_size == 1 or step % config.log_every == 0:
            over = config.max_minutes is not None
            over = over and self.minutes() >= config.max_minutes
            late = time.perf_counter() - self.last_checkpoint
            late = late >= 60 * config.checkpoint_minutes
            if self.world_size > 1:
                flags = [float(over), float(late)]
                flags = torch.tensor(flags, device=self.device, dtype=torch.float64)
                dist.broadcast(flags, 0)
                over, late = bool(flags[0]), bool(flags[1])
            stop, due = stop or over, due or late
        return stop, due


def cooldown_factor(done: float, cooldown: float) -> float:
    """The multiplier of the rate once `done` (0 to 1) of the run is done: 1, then
    falling linearly to 0 over the last `cooldown` of the run."""
    if cooldown == 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - done) / cooldown))


WARMUP_SHARE = 0.1  # a planned warm-up: this share of the projected updates, at most
PEAK_SHARE = 0.7  # a planned peak: this share of the paper's, which it holds
FALL_SHARE = 0.2  # a planned fall to 0: over this last share of the budget


@dataclass(frozen=True)
class Schedule:
    """The rate of every update of a run, as its plan decided it (scheduled_rate).

    "paper": the paper's curve of d_model, warm-up `warmup` and `scale`, times the
    cool-down's line over the last `cooldown` of the updates to `updates`. "planned":
    after update `start` (made at `start_rate`) a linear rise to `peak` at update
    `warmup`, held, then a linear fall that reaches 0 at `updates`, over its last
    `fall` of the updates from `first` (0, or where a resumed run's budget began).
    updates: the run's last update, where it stops (None: not known yet, no fall).
    measure: projected from a budget of minutes, measured again after the first updates
    (Planner)."""

    kind: str
    warmup: int
    peak: float
    updates: int | None = None
    d_model: int = 512
    scale: float = 1.0
    cooldown: float = 0.0
    start: int = 0
    start_rate: float = 0.0
    fall: float = FALL_SHARE
    first: int = 0
    measure: bool = False
    why: str = ""

    def describe(self) -> str:
        """Its shape in a few words: the peak, where it is reached, where it ends."""
        said = f"{self.kind}: peak {self.peak:.2e} at update {self.warmup:,}"
        ends = self.updates and (self.kind == "planned" or self.cooldown)
        return said + (f", 0 after update {self.updates:,}" if ends else "")


def scheduled_rate(update: int, schedule: Schedule) -> float:
    """The rate of update number `update` (from 1): one pure function of the update
    and the plan's schedule, as nanoGPT's get_lr(it)."""
    s = schedule
    budget = s.updates - s.first if s.updates else 0
    done = (update - 1 - s.first) / budget if budget else 0.0  # before this update
    if s.kind == "paper":
        rate = learning_rate(update, s.d_model, s.warmup, s.scale)
        return rate * cooldown_factor(done, s.cooldown)
    rise = min(1.0, (update - s.start) / (s.warmup - s.start))
    rise = s.start_rate + (s.peak - s.start_rate) * rise
    if not budget:  # no end known yet: no fall
        return min(rise, s.peak)
    return max(0.0, min(rise, s.peak, s.peak * (1.0 - done) / s.fall))


def plan_schedule(updates: int, warmup_steps: int, peak: float, start: int = 0,
                  rate: float = 0.0, first: int = 0, **how) -> Schedule:
    """The planned schedule, after update `start` (made at `rate`), of a run from
    update `first` projected to end at update `updates`; its warm-up: WARMUP_SHARE of
    its updates, at most warmup_steps, and at least twice those before `start`. how:
    Schedule's other fields (why, measure, d_model, scale)."""
    updates = max(updates, start + 2)  # one update of warm-up at least, one of fall
    ramp = min(warmup_steps, round(WARMUP_SHARE * (updates - first)))
    ramp = max(ramp, 2 * (start - first))  # a ramp on from where it is, never a jump
    warmup = min(max(first + ramp, first + 1), updates - 1)
    fall = min(FALL_SHARE, (updates - warmup) / (updates - first))  # after the warm-up
    return Schedule("planned", warmup, peak, updates, start=start, start_rate=rate,
                    fall=fall, first=first, **how)


def schedule_for(config: RunSettings, d_model: int, updates: int | None, why: str,
                 measure: bool = False, start: int = 0, rate: float = 0.0,
                 first: int = 0) -> Schedule:
    """The schedule `config` names (the paper's, or planned at PEAK_SHARE of the
    paper's peak) for a run of width d_model that ends at update `updates` (None: not
    known yet: a planned one rises to its peak at warmup_steps and holds it)."""
    warmup, scale = config.warmup_steps, config.lr_scale
    peak = learning_rate(warmup, d_model, warmup, scale)  # the paper's curve's
    how = {"d_model": d_model, "scale": scale, "measure": measure, "why": why}
    if not config.planned:
        return Schedule("paper", warmup, peak, updates, cooldown=config.cooldown,
                        first=first, **how)
    if updates is None:
        return Schedule("planned", max(warmup, start + 1), PEAK_SHARE * peak,
                        start=start, start_rate=rate, first=first, **how)
    return plan_schedule(updates, warmup, PEAK_SHARE * peak, start, rate, first, **how)


PLAN_UPDATES = (10, 30)  # a run of minutes measures its rate between these updates
REPLAN_EVERY = 50  # then measures again every so many updates,
REPLAN_MOVE = 0.05  # and plans again when its end moves by more than this of those left


class Planner:
    """The closed loop of a run whose schedule was projected from its minutes
    (schedule.measure): after update `step` + PLAN_UPDATES[1] (step: where this process
    began), a schedule planned again from the updates a minute measured since
    PLAN_UPDATES[0]. Then every REPLAN_EVERY updates it measures the updates a minute
    of the last REPLAN_EVERY and, where the projected end moved by more than
    REPLAN_MOVE of the updates left, moves the schedule's end there. The rate stays
    continuous and never rises again: once the fall has begun, it falls on a line from
    where it is."""

    def __init__(self, config: RunSettings, schedule: Schedule, step: int = 0):
        self.config, self.d_model, self.first = config, schedule.d_model, step
        self.pending, self.mark = schedule.measure, 0.0  # mark: minutes at `marked`
        self.schedule, self.marked = None, 0  # once planned here: the schedule

    def _projected(self, step: int, counted: int, clock: Clock) -> tuple[float, int]:
        """Updates a minute since the mark, and the update the budget ends at."""
        minutes, done = clock.minutes(), counted - self.marked
        per_minute = clock.rank0(done / max(minutes - self.mark, 1e-9))
        left = self.config.max_minutes - minutes
        updates = int(clock.rank0(step + per_minute * left))
        if self.config.max_steps is not None:
            updates = min(updates, self.config.max_steps)
        return per_minute, updates

    def measure(self, step: int, rate: float, clock: Clock) -> Schedule | None:
        """After update `step` (made at `rate`), on the run's `clock`: the schedule
        planned again now, or None."""
        counted = step - self.first
        if self.schedule is not None:
            return self._again(step, counted, clock)
        if not self.pending or counted < PLAN_UPDATES[0]:
            return None
        if counted == PLAN_UPDATES[0]:
            self.mark, self.marked = clock.minutes(), counted
        if counted < PLAN_UPDATES[1]:
            return None
        self.pending = False
        per_minute, updates = self._projected(step, counted, clock)
        self.mark, self.marked = clock.minutes(), counted  # the pace after this plan
        why = (f"measured at update {step:,}: {per_minute:,.0f} updates a minute, "
               f"about {updates:,} in {self.config.max_minutes:g} min")
        self.schedule = schedule_for(self.config, self.d_model, updates, why,
                                     start=step, rate=rate, first=self.first)
        return self.schedule

    def _again(self, step: int, counted: int, clock: Clock) -> Schedule | None:
        """Every REPLAN_EVERY updates: the schedule with its end moved, or None."""
        if (counted - PLAN_UPDATES[1]) % REPLAN_EVERY:
            return None
        per_minute, updates = self._projected(step, counted, clock)
        since, self.mark, self.marked = self.marked, clock.minutes(), counted
        s, now = self.schedule, scheduled_rate(step + 1, self.schedule)
        updates = max(updates, step + 1)
        if abs(updates - s.updates) <= REPLAN_MOVE * (s.updates - step) or now == 0.0:
            return None
        why = (f"measured again at update {step:,}: {per_minute:,.0f} updates a minute "
               f"since update {since + self.first:,}, about {updates:,} in "
               f"{self.config.max_minutes:g} min")
        moved = replace(s, updates=updates, why=why)
        if scheduled_rate(step + 1, moved) != now:  # in the fall: go on from here
            done = (step - s.first) / (updates - s.first)
            moved = replace(moved, fall=s.peak * (1.0 - done) / now)
        self.schedule = moved
        return moved


def fitted_max_tokens(max_tokens: int, seconds: float,
                      minutes: float) -> tuple[int, int]:
    """The tokens an update of a run of `minutes` whose update of max_tokens takes
    `seconds`: half of max_tokens when the budget holds fewer than FEW_UPDATES of those
    updates (a short run stays where the critical batch is small, so the updates that
    half buys are worth more than its tokens); and how many it holds."""
    updates = int(60 * minutes / seconds)
    return (max_tokens // 2 if updates < FEW_UPDATES else max_tokens), updates


def fitted_dropout(epochs: float,
                   lines: tuple[tuple[float, float], ...]) -> float | None:
    """P_drop for a budget of `epochs` passes over the data: that of the first
    (passes, P_drop) line, in rising passes, the budget holds fewer passes than;
    None (the model's own) when it is under none of them."""
    return next((p for passes, p in lines if epochs < passes), None)


def fitted_layers(updates: int, lines: tuple[tuple[int, int], ...]) -> int | None:
    """N for a budget of `updates` projected at the preset's model and batch: that of
    the first (updates, N) line, in rising updates, the budget holds fewer updates
    than; None (the model's own) when it is under none of them."""
    return next((n for under, n in lines if updates < under), None)


class LossWindow:
    """The summed loss and target tokens of the steps since the last read (on the
    device)."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(2, dtype=torch.float64, device=device)
        self.started = time.perf_counter()

    def add(self, loss_sum: Tensor, n_tokens: int) -> None:
        self.sums[0] += loss_sum
        self.sums[1] += n_tokens

    def read(self, world_size: int) -> dict[str, float]:
        """Loss per target token and tokens/s (over every process), then start again."""
        if world_size > 1:
            dist.all_reduce(self.sums)
        loss, tokens = self.sums.tolist()
        seconds = time.perf_counter() - self.started
        self.sums.zero_()
        self.started = time.perf_counter()
        return {"loss": loss / tokens, "tokens_per_s": tokens / seconds}


def append_metrics(out: Path, record: dict) -> None:
    """Append one JSON line to out/metrics.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "a") as file:
        file.write(json.dumps(record) + "\n")


def forget_metrics_after(out: Path, step: int) -> None:
    """Drop the lines of metrics.jsonl after `step`, and a half-written last line: a
    resumed run repeats those steps and writes them again."""
    metrics = out / "metrics.jsonl"
    if not metrics.exists():
        return
    lines = metrics.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [x for x in lines if x.endswith("\n") and json.loads(x)["step"] <= step]
    if kept != lines:
        write_atomically(metrics, lambda file: file.write("".join(kept).encode()))


@contextlib.contextmanager
def run_log(
    out: Path, total: int | None, initial: int, rank: int, progress: bool = True
) -> Iterator[Callable[[dict | None], None]]:
    """Yields log(record): rank 0 appends the record to out/metrics.jsonl and shows
    it if it has a training loss or a plan; log(None) counts a step. Shown
    (on rank 0, with progress) as a tqdm bar on a terminal, as plain lines in a file.
    After the block the bar is closed, and log only writes."""
    show = progress and rank == 0
    plain = show and not sys.stderr.isatty()
    bar = tqdm(total=total, initial=initial, unit="step", disable=not show or plain)

    def log(record: dict | None) -> None:
        if record is None:
            bar.update(1)
            return
        if rank == 0:
            append_metrics(out, record)
        said = record["plan"]["text"] if "plan" in record else None  # the schedule's
        if said and plain:
            print(said, flush=True)
        elif said and show:
            tqdm.write(said)
        if "loss" not in record:  # a validation, a decision, or the final record
            return
        if plain:
            print(f"step {record['step']}: loss {record['loss']:.3f}, "
                  f"lr {record['lr']:.2e}, {record['tokens_per_s']:,.0f} tokens/s, "
                  f"{record['minutes']:.1f} min", flush=True)
        else:
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                            tok_s=f"{record['tokens_per_s']:,.0f}")

    try:
        yield log
    finally:
        bar.close()


@contextlib.contextmanager
def deferred_signals(enabled: bool = True) -> Iterator[list[int]]:
    """Within the block, SIGINT and SIGTERM append their number to the yielded list
    instead of interrupting; a second one raises KeyboardInterrupt. Off when not
    enabled, or off the main thread (where Python cannot set handlers)."""
    received: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: object) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


__all__ = [
    'RunSettings',
    'Clock',
    'cooldown_factor',
    'Schedule',
    'scheduled_rate',
    'plan_schedule',
    'schedule_for',
    'Planner',
    'fitted_max_tokens',
    'fitted_dropout',
    'fitted_layers',
    'LossWindow',
    'append_metrics',
    'forget_metrics_after',
    'run_log',
    'deferred_signals',
]
