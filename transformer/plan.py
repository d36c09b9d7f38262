# Generated from book/plan.md by tools/export.py: edit the chapter.
"""The plan of a run: its settings, its presets, and every decision with its reason,
made once before the first update."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

from transformer.devices import (
    PAD_MULTIPLE,
    check_precision,
    default_compile,
    default_pad_multiple,
    default_precision,
    pick_device,
)
from transformer.files import write_atomically
from transformer.model import TransformerConfig
from transformer.presets import PAPER, PRESETS, TEXT_VOCAB
from transformer.runs import (
    FEW_UPDATES,
    PLAN_UPDATES,
    Schedule,
    fitted_dropout,
    fitted_layers,
    fitted_max_tokens,
    schedule_for,
)


@dataclass
class TrainingConfig:
    """Settings of a training run.

    max_tokens: tokens per side (source, target) of one update, over all processes and
    accumulation steps (the paper: 25000); a batch of one process holds
    max_tokens // (processes * accumulate). compile=None compiles on CUDA only;
    pad_multiple=None pads lengths to a multiple of 8 when compiling, else not at all.
    pack_length: pack whole pairs into rows of this many tokens a side, max_tokens //
    pack_length rows a batch (Data chapter, Packing); None: batches by length, padded.
    prefetch: batches prepared ahead by a background thread. cache_dir: where prepared
    corpora are kept (None: see default_cache_dir). split_punctuation: the tokenizer
    isolates punctuation (Data chapter; the command line's choice for real text).
    lowercase: the tokenizer lowercases all text, and so do translate and evaluate.
    cooldown: the last fraction of the run (of max_steps or max_minutes, whichever
    ends it), over which the rate's multiplier falls linearly from 1 to 0; 0: none.
    schedule: "paper" or "planned" (Runs chapter); None: default_schedule's choice.
    """

    data: str = "numbers"
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_size: int = TEXT_VOCAB
    max_tokens: int = PAPER.max_tokens
    accumulate: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    warmup_steps: int = PAPER.warmup_steps
    lr_scale: float = 1.0
    cooldown: float = 0.0
    schedule: str | None = None
    label_smoothing: float = 0.1
    precision: str = "auto"
    compile: bool | None = None
    pad_multiple: int | None = None
    pack_length: int | None = None
    prefetch: int = 4
    device: str = "auto"
    seed: int = 0
    log_every: int = 50
    eval_every: int = 500
    checkpoint_minutes: float = PAPER.checkpoint_minutes
    checkpoint_every: int | None = None
    keep_checkpoints: int = 5
    cache_dir: str | None = None
    split_punctuation: bool = False
    lowercase: bool = False

    def __post_init__(self) -> None:
        if self.schedule is None:
            self.schedule = default_schedule(self)
        self._check()

    @property
    def planned(self) -> bool:
        """Whether the schedule is planned for the budget (else: the paper's)."""
        return self.schedule == "planned"

    def _check(self) -> None:
        """Every setting in its range, and a way to stop."""
        if self.max_steps is None and self.max_minutes is None:
            raise ValueError(
                "set max_steps or max_minutes (or both): a run must know when to stop"
            )
        counts = ["vocab_size", "max_tokens", "accumulate", "warmup_steps", "log_every"]
        counts += ["eval_every", "keep_checkpoints", "max_steps", "checkpoint_every"]
        optional = ["max_steps", "checkpoint_every", "pad_multiple", "max_minutes"]
        optional += ["pack_length"]
        counts += ["pad_multiple", "pack_length"]
        for name in [*counts, "max_minutes", "lr_scale", "checkpoint_minutes"]:
            value, integer = getattr(self, name), name in counts
            if value is None and name in optional:
                continue
            kind = int if integer else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
                what = "a positive integer" if integer else "a positive finite number"
                raise ValueError(f"{name} must be {what}; got {value!r}")
            if not math.isfinite(value):
                raise ValueError(
                    f"{name} must be a positive finite number; got {value!r}"
                )
        if self.pack_length is not None and self.pack_length % PAD_MULTIPLE:
            raise ValueError(
                f"pack_length must be a multiple of {PAD_MULTIPLE} (whole tiles for "
                f"the matrix kernels); got {self.pack_length}"
            )
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 batches; got {self.prefetch}")
        for name in ["label_smoothing", "cooldown"]:
            if not 0.0 <= (value := getattr(self, name)) < 1.0:
                raise ValueError(f"{name} must be in [0, 1); got {value!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"schedule must be one of {SCHEDULES}; got {self.schedule!r}"
            )
        if self.schedule == "planned" and self.cooldown:
            raise ValueError(
                "a planned schedule (a run of max_minutes alone has one by "
                "default) falls to 0 at the end by itself: give schedule="
                f"'planned' or a cooldown, not both (got cooldown={self.cooldown})"
            )
        check_precision(self.precision)


SCHEDULES = ("paper", "planned")


def default_schedule(config: TrainingConfig) -> str:
    """The schedule of a run that names none: "planned" for a budget of minutes alone
    (no max_steps, no cooldown), else "paper"."""
    minutes_alone = config.max_minutes is not None and config.max_steps is None
    return "planned" if minutes_alone and not config.cooldown else "paper"


TRAINING_PRESETS = {name: preset.training for name, preset in PRESETS.items()}
SMALL_DATA = PRESETS["small"].by_data  # the small preset's vocabulary and batch
GPU_TEXT_STEPS = PRESETS["tiny"].gpu_text_steps  # its budget on real text on a CUDA GPU


@dataclass(frozen=True)
class BudgetFit:
    """How a planned run of minutes alone fits itself to its budget, from one update
    timed: halve_batch (max_tokens halved under FEW_UPDATES updates),
    dropout_by_passes, (passes, P_drop) lines in rising passes (fitted_dropout), and
    layers_by_updates, (updates, N) lines in rising updates (fitted_layers)."""

    halve_batch: bool = True
    dropout_by_passes: tuple[tuple[float, float], ...] = ()
    layers_by_updates: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        def number(x, kind) -> bool:
            return isinstance(x, kind) and not isinstance(x, bool)

        rules = (("dropout_by_passes", "(passes, P_drop)", "passes", (int, float),
                  lambda p: 0 <= p < 1, "P_drop in [0, 1)"),
                 ("layers_by_updates", "(updates, N)", "updates", int,
                  lambda n: n > 0, "N a positive integer"))
        for name, pair, over, kind, allowed, said in rules:
            lines = getattr(self, name)
            if not (isinstance(lines, tuple)
                    and all(isinstance(x, tuple) and len(x) == 2 and number(x[0], kind)
                            and number(x[1], kind) and x[0] > 0 and allowed(x[1])
                            for x in lines)
                    and all(a[0] < b[0] for a, b in zip(lines, lines[1:]))):
                raise ValueError(f"{name} must be a tuple of {pair} pairs, {over} "
                                 f"positive and rising, {said}; got {lines!r}")


BUDGET_FITS = {name: BudgetFit(**preset.budget_fit)  # (Runs chapter)
               for name, preset in PRESETS.items() if preset.budget_fit is not None}


def default_preset(text: bool) -> str:
    """tiny on real text (a width that trains in minutes on a CPU and in one GPU run
    matches the published Multi30k figures); small on the number corpus."""
    return "tiny" if text else "small"


def checkpoint_spacing(max_steps: int | None, max_minutes: float | None) -> dict:
    """About 15 checkpoints over the budget (steps, minutes or both; at most 10 minutes
    apart, the paper's), so that the run's last third holds the 5 its final model
    averages."""
    spacing = {}
    if max_minutes is not None:
        spacing["checkpoint_minutes"] = min(PAPER.checkpoint_minutes, max_minutes / 15)
    if max_steps is not None:
        spacing["checkpoint_every"] = max(1, max_steps // 15)
    return spacing


def final_average(config: TrainingConfig, average_last: int | None = None) -> int:
    """How many of the newest checkpoints the final model averages: average_last if
    given, else the paper's 5, or 1 after a run whose rate fell to 0 at its end (a
    cool-down or a planned schedule), whose last checkpoint is already the end of a
    decay."""
    return average_last or (1 if config.cooldown or config.planned
                            else PAPER.average_last)


@dataclass(frozen=True)
class Decision:
    """One setting of a run: its value, and where it came from."""

    setting: str
    value: object
    why: str


@dataclass
class RunPlan:
    """The resolved configurations of a run, the decisions behind them, the
    fingerprint of each split of the data it trains on (the Trainer's, once built), and
    the schedule of its rate (the Runs chapter's Schedule)."""

    model: TransformerConfig
    training: TrainingConfig
    decisions: list[Decision] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)
    schedule: Schedule | None = None

    def decided(self, decisions: list[Decision]) -> RunPlan:
        """The plan with `decisions` in place of those of the same settings."""
        settings = {d.setting for d in decisions}
        kept = [d for d in self.decisions if d.setting not in settings]
        return replace(self, decisions=kept + decisions)

    def why(self, setting: str) -> str | None:
        """Where `setting` came from (None: the dataclass's default)."""
        return next((d.why for d in self.decisions if d.setting == setting), None)

    def table(self) -> str:
        """The decisions, one a line: setting, value, where it came from."""
        width = max([len(d.setting) for d in self.decisions] + [7])
        values = [shown(d.value) for d in self.decisions]
        column = max([len(v) for v in values] + [5])
        lines = [f"{'setting':<{width}}  {'value':<{column}}  why"]
        lines += [f"{d.setting:<{width}}  {v:<{column}}  {d.why}"
                  for d, v in zip(self.decisions, values)]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The plan as JSON holds it (plan.json, a checkpoint's "plan")."""
        return {"model": self.model.to_dict(), "training": asdict(self.training),
                "decisions": [asdict(d) for d in self.decisions], "data": self.data,
                "schedule": self.schedule and asdict(self.schedule)}

    @classmethod
    def from_dict(cls, saved: dict) -> RunPlan:
        schedule = saved.get("schedule")  # None: a plan saved before it held one
        return cls(TransformerConfig(**saved["model"]),
                   TrainingConfig(**saved["training"]),
                   [Decision(**d) for d in saved["decisions"]], saved.get("data", {}),
                   schedule and Schedule(**schedule))

    def save(self, out: Path) -> Path:
        """out/plan.json, whole or not at all."""
        text = json.dumps(self.to_dict(), indent=1) + "\n"
        write_atomically(out / "plan.json", lambda file: file.write(text.encode()))
        return out / "plan.json"

    def scheduled(self, schedule: Schedule) -> RunPlan:
        """The plan with `schedule`, and its line in the table ("rate")."""
        decision = Decision("rate", schedule.describe(), schedule.why)
        return replace(self.decided([decision]), schedule=schedule)

    def checked(self, data: Decision) -> RunPlan:
        """The plan with the data decision `data` (data_check's); an earlier one that
        said the data changed is kept, under its own name."""
        earlier = [replace(d, setting=f"{d.setting} {d.value}")
                   if d.setting == data.setting else d for d in self.decisions
                   if d.setting != data.setting or d.value.startswith("changed")]
        return replace(self, decisions=[*earlier, data])


def shown(value: object) -> str:
    """A setting's value as the plan's table shows it: 4,096; 0.667; True."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.3g}"


def given_plan(model_config: TransformerConfig, config: TrainingConfig,
               device: torch.device | None = None) -> RunPlan:
    """The plan of configurations made by hand: each setting not at its default is
    "given" (the schedule: its reason), the device and its settings are decided
    (resolved), and the rate's schedule too, untimed (first_schedule)."""
    decisions = [Decision(f.name, getattr(config, f.name), "given")
                 for f in fields(config) if f.name != "schedule"
                 and getattr(config, f.name) != f.default]
    decisions.append(Decision("schedule", config.schedule, schedule_reason(config)))
    config, decided = resolved(config, device)
    decisions = [d for d in decisions if d.setting not in {x.setting for x in decided}]
    plan = RunPlan(model_config, config, decisions + decided)
    return plan.scheduled(first_schedule(config, model_config.d_model))


def device_settings(device: torch.device, precision: str = "auto",
                    compile: bool | None = None,
                    pad_multiple: int | None = None) -> list[Decision]:
    """The precision, compile and pad_multiple of a run on `device`: those given, the
    device's defaults for the rest (precision "auto", compile or pad_multiple None)."""
    check_precision(precision)
    if precision == "auto":
        decided = [Decision("precision", *default_precision(device))]
    else:
        decided = [Decision("precision", precision, "given")]
    if compile is None:
        decided.append(Decision("compile", *default_compile(device, decided[0].value)))
    else:
        decided.append(Decision("compile", compile, "given"))
    if pad_multiple is None:
        pad = default_pad_multiple(decided[1].value)
        why = "compiled: few shapes" if pad > 1 else "not compiled: no padding"
        decided.append(Decision("pad_multiple", pad, why))
    else:
        decided.append(Decision("pad_multiple", pad_multiple, "given"))
    return decided


def resolved(config: TrainingConfig, device: torch.device | None = None
             ) -> tuple[TrainingConfig, list[Decision]]:
    """`config` with its device (by default the one config.device names: pick_device,
    the one call of a run) and its device settings decided (device_settings), and
    those decisions."""
    device = device or pick_device(config.device)
    why = "auto: CUDA, then MPS, then CPU" if config.device == "auto" else "given"
    decided = [Decision("device", str(device), why)]
    decided += device_settings(device, config.precision, config.compile,
                               config.pad_multiple)
    return replace(config, **{d.setting: d.value for d in decided}), decided


@dataclass(frozen=True)
class Timing:
    """One update timed before a run: its seconds, the updates of one pass over the
    training data, and whether half the batch makes batches of that data."""

    seconds: float
    updates_a_pass: float
    half_fits: bool = True


Timer = Callable[[TransformerConfig, TrainingConfig], Timing]


def by_lines(setting: str, value: object, model_value: object, count: float,
             lines: tuple, spec: str, said: str) -> Decision:
    """The decision of `setting` for a budget of `count` (passes or updates), whose
    line gave `value` (None: over every line, so the model's own), with the line it
    fell under as its reason."""
    under = next((n for n, _ in lines if count < n), None)
    where = f"under {under:{spec}}" if under else f"{lines[-1][0]:{spec}} or more"
    if value is None:
        return Decision(setting, model_value, f"{said}, {where}: the model's")
    return Decision(setting, value, f"{said}, {where}")


# N is drawn in updates of the preset's model at the preset's batch: a run given its N,
# its batch or its vocabulary keeps the preset's N
SIZED_BY = frozenset({"n_layers", "max_tokens", "vocab_size"})


def fit_budget(config: TrainingConfig, model: TransformerConfig, fit: BudgetFit,
               timing: Timing, given: set[str]) -> list[Decision]:
    """The batch, P_drop and N of a planned run of config.max_minutes alone of `model`
    whose update of config.max_tokens takes timing.seconds (fitted_max_tokens,
    fitted_dropout, fitted_layers), but for the settings `given` by name (and N also
    for a batch or a vocabulary given: SIZED_BY)."""
    minutes, tokens = config.max_minutes, config.max_tokens
    half, updates = fitted_max_tokens(tokens, timing.seconds, minutes)
    passes = updates / timing.updates_a_pass
    seen = (f"one update of {tokens:,} took {timing.seconds:.2f} s: about "
            f"{updates:,} in {minutes:g} min")
    decided = []
    if fit.halve_batch and "max_tokens" not in given:
        if half == tokens:
            why = f"{seen}, {FEW_UPDATES:,} or more: kept"
        elif not timing.half_fits:
            half, why = tokens, f"{seen}, but half is too small for this data: kept"
        else:
            why = f"{seen}, under {FEW_UPDATES:,}: halved"
        decided.append(Decision("max_tokens", half, why))
    if (lines := fit.dropout_by_passes) and "dropout" not in given:
        said = (f"{passes:.1f} passes over the data ({timing.updates_a_pass:,.0f} "
                "updates each)")
        p = fitted_dropout(passes, lines)
        decided.append(by_lines("dropout", p, model.dropout, passes, lines, "g", said))
    if (lines := fit.layers_by_updates) and not given & SIZED_BY:
        n, said = fitted_layers(updates, lines), f"{seen} at N={model.n_layers}"
        decided.append(by_lines("n_layers", n, model.n_layers, updates, lines, ",",
                                said))
    return decided


def make_plan(preset: str | None = None, model: dict | None = None,
              timer: Timer | None = None, fit: BudgetFit | None | str = "preset",
              **given) -> RunPlan:
    """The plan of a new run: the settings `given` (TrainingConfig's fields) and
    `model` (TransformerConfig's), the preset's for the rest (default_preset's for
    the data), the device's, and what one update timed decides (timed_decisions;
    fit: the preset's BudgetFit, or one given, or None)."""
    model = dict(model or {})
    text = given.get("data", "numbers") != "numbers"
    why = "given" if preset else ("real text" if text else "the number corpus")
    preset = check_preset(preset or default_preset(text))
    device = pick_device(given.get("device", "auto"))
    settings = preset_settings(preset, text, device, given)  # {name: (value, why)}
    config = TrainingConfig(**{k: v for k, (v, _) in settings.items()}, **given)
    config, decided = resolved(config, device)
    model_config = TransformerConfig.preset(preset, **model)
    decisions = [Decision("preset", preset, why)]
    decisions += [Decision(k, v, "given") for k, v in {**given, **model}.items()]
    decisions += [Decision(k, v, why) for k, (v, why) in settings.items()]
    if "schedule" not in given:
        decisions.append(Decision("schedule", config.schedule, schedule_reason(config)))
    if "dropout" not in model:
        decisions.append(Decision("dropout", model_config.dropout, f"preset {preset}"))
    plan = RunPlan(model_config, config, decisions)
    plan = plan.decided([d for d in decided if d.why != "given"])  # "auto" too
    fit = BUDGET_FITS.get(preset) if fit == "preset" else fit
    return timed_decisions(plan, fit, timer, {*given, *model})


def check_preset(name: str) -> str:
    if name not in TRAINING_PRESETS:
        raise ValueError(f"preset must be one of {', '.join(TRAINING_PRESETS)}; "
                         f"got {name!r}")
    return name


def stop_rule(preset: str, text: bool, device: torch.device, given: dict) -> dict:
    """{"max_steps": (steps, why)} where the run has a default budget (the tiny preset
    on real text on a CUDA GPU); {} where it was given; else a refusal."""
    if given.get("max_steps") is not None or given.get("max_minutes") is not None:
        return {}
    if text and preset == "tiny" and device.type == "cuda":
        return {"max_steps": (GPU_TEXT_STEPS, "tiny on real text on a CUDA GPU")}
    raise ValueError(
        "say when to stop: max_steps and/or max_minutes (--max-steps N, --max-minutes "
        "M); only the tiny preset on real text on a CUDA GPU has a default: "
        f"{GPU_TEXT_STEPS:,} steps"
    )


def preset_settings(preset: str, text: bool, device: torch.device,
                    given: dict) -> dict[str, tuple[object, str]]:
    """The settings the preset, the data and the budget give a run, each with its
    reason, but for those `given`."""
    corpus = "real text" if text else "the number corpus"
    settings = {k: (v, f"preset {preset}") for k, v in TRAINING_PRESETS[preset].items()}
    settings["split_punctuation"] = text, corpus
    if preset == "small":
        settings |= {k: (v, f"preset small on {corpus}")
                     for k, v in SMALL_DATA["text" if text else "numbers"].items()}
    settings |= stop_rule(preset, text, device, given)
    if all(given.get(n) is None for n in ("checkpoint_minutes", "checkpoint_every")):
        budget = settings.get("max_steps", (given.get("max_steps"),))[0]
        spacing = checkpoint_spacing(budget, given.get("max_minutes"))
        settings |= {k: (v, "about 15 over the budget") for k, v in spacing.items()}
    return {k: v for k, v in settings.items() if k not in given}


def projected_cost(steps: int, seconds: float, why: str) -> Decision:
    """max_steps of a budget the run did not give, with what it will cost here from one
    update timed without compiling (the compiled step is faster: an upper bound)."""
    minutes = steps * seconds / 60
    return Decision("max_steps", steps, f"{why}: about {minutes:,.0f} min here at "
                    f"{seconds:.3f} s an update uncompiled, less compiled; "
                    "--max-minutes bounds it")


def schedule_reason(config: TrainingConfig) -> str:
    if config.planned:
        return "a budget of minutes alone: planned for it (Runs chapter)"
    return "a budget of updates: the paper's" + (", cooled down" if config.cooldown
                                                 else "")


def projected(config: TrainingConfig) -> bool:
    """Whether the schedule's end is projected from a budget of minutes: a planned
    schedule or a cool-down, under max_minutes."""
    return config.max_minutes is not None and (config.planned or bool(config.cooldown))


def first_schedule(config: TrainingConfig, d_model: int,
                   timing: Timing | None = None) -> Schedule:
    """The schedule of the rate before the first update (schedule_for): its end at
    max_steps, or projected from `timing` for a budget of minutes and measured again
    after the first updates (Planner; untimed: by that measurement alone)."""
    if not projected(config):
        why = "planned for max_steps" if config.planned else "the paper's curve"
        if config.cooldown:
            why += f", cooled down over the last {config.cooldown:.0%} of max_steps"
        return schedule_for(config, d_model, config.max_steps, why)
    again = f"measured again after update {PLAN_UPDATES[1]}"
    if timing is None:
        return schedule_for(config, d_model, config.max_steps, f"untimed: {again}",
                            measure=True)
    minutes = config.max_minutes
    updates = int(60 * minutes / timing.seconds)
    if config.max_steps is not None:
        updates = min(updates, config.max_steps)
    why = (f"one update took {timing.seconds:.3f} s: about {updates:,} in {minutes:g} "
           f"min; {again}")
    return schedule_for(config, d_model, updates, why, measure=True)


def timed_decisions(plan: RunPlan, fit: BudgetFit | None, timer: Timer | None,
                    given: set[str]) -> RunPlan:
    """`plan` with what one update timed decides, where anything does, but for the
    settings `given` by name; and its schedule (first_schedule)."""
    config, model_config = plan.training, plan.model
    cost = plan.why("max_steps") not in (None, "given")
    wanted = fit and (fit.halve_batch and "max_tokens" not in given
                      or fit.dropout_by_passes and "dropout" not in given
                      or fit.layers_by_updates and not given & SIZED_BY)
    wanted = wanted and config.planned and config.max_steps is None
    if wanted and not config.compile and timer is None:
        raise ValueError("this plan times one update (a planned run of minutes alone "
                         "that fits its batch, P_drop or N): give make_plan a timer")
    timing = None
    if timer is not None and (cost or wanted or projected(config)):
        timing = timer(model_config, replace(config, compile=False))
    if cost and timing is not None:
        why = plan.why("max_steps")  # a budget the run did not give: its cost here
        plan = plan.decided([projected_cost(config.max_steps, timing.seconds, why)])
    elif wanted and not config.compile:
        fitted = fit_budget(config, model_config, fit, timing, given)
        value = {d.setting: d.value for d in fitted}
        tokens = value.pop("max_tokens", config.max_tokens)
        plan = replace(plan.decided(fitted), model=replace(model_config, **value),
                       training=replace(config, max_tokens=tokens))
    return plan.scheduled(first_schedule(plan.training, plan.model.d_model, timing))


OLD_FITTING = ("fit_batch", "dropout_by_passes", "few_epochs_dropout")  # before plans
DEVICE_AUTO = {"device": "auto", "precision": "auto", "compile": None,
               "pad_multiple": None}
SCHEDULE_SETTINGS = {"max_steps", "max_minutes", "warmup_steps", "lr_scale", "cooldown",
                     "schedule"}


def resumed_plan(state: dict, **given) -> RunPlan:
    """The plan a checkpoint's run was made with, under the settings `given`."""
    if "plan" in state:
        plan = RunPlan.from_dict(state["plan"])
    else:
        saved = {k: v for k, v in state["training_config"].items()
                 if k not in OLD_FITTING}
        plan = RunPlan(TransformerConfig(**state["model_config"]),
                       TrainingConfig(**saved),
                       [Decision(k, v, "from the checkpoint (before plans)")
                        for k, v in saved.items()])
    decisions = [d for d in plan.decisions if d.setting not in given]
    decisions += [Decision(k, v, "given at resume") for k, v in given.items()]
    decided_there = {d.setting for d in decisions  # by the machine that wrote it
                     if not d.why.startswith(("given", "from the checkpoint"))}
    again = {k: v for k, v in DEVICE_AUTO.items()  # decided again, on this machine
             if k not in given and k in decided_there}
    training, decided = resolved(replace(plan.training, **given, **again))
    auto = {d.setting for d in decided if d.why != "given"}  # "auto" decided here
    decisions = [d for d in decisions if d.setting not in auto]
    decisions += [d for d in decided if d.setting in auto]
    plan = RunPlan(plan.model, training, decisions, plan.data, plan.schedule)
    if plan.schedule is None or given.keys() & SCHEDULE_SETTINGS:  # decided again
        schedule = first_schedule(training, plan.model.d_model)
        plan = plan.scheduled(replace(schedule, why=f"at resume, {schedule.why}"))
    return plan


def data_check(saved: dict[str, str] | None, now: dict[str, str], source: str,
               step: int, go_on: bool = False) -> Decision:
    """The data decision of a run resumed at `step` from a checkpoint whose data had
    the fingerprints `saved` (None: not kept then), on data that has `now`; refuses
    changed data unless `go_on`."""
    if saved is None:
        why = f"{source} holds no fingerprint of its data (written before they were "
        return Decision("data_check", "not checked", why + "kept)")
    splits = sorted(saved.keys() | now.keys())
    changed = [s for s in splits if saved.get(s) != now.get(s)]
    if not changed:
        same = f"{source}: the same fingerprints"
        return Decision("data_check", "as checkpointed", same)
    said = ", ".join(f"{s} {saved.get(s, 'none')[:12]} then, {now.get(s, 'none')[:12]} "
                     "now" for s in changed)
    if not go_on:
        raise ValueError(
            f"the data changed since {source} was written ({said}): resume on the data "
            "it trained on, or give --data-changed-ok (data_changed_ok=True) to go on"
        )
    return Decision("data_check", f"changed at step {step:,}",
                    f"{said}; data_changed_ok")


__all__ = [
    'TrainingConfig',
    'default_schedule',
    'BudgetFit',
    'default_preset',
    'checkpoint_spacing',
    'final_average',
    'Decision',
    'RunPlan',
    'shown',
    'given_plan',
    'device_settings',
    'resolved',
    'Timing',
    'by_lines',
    'fit_budget',
    'make_plan',
    'check_preset',
    'stop_rule',
    'preset_settings',
    'projected_cost',
    'schedule_reason',
    'projected',
    'first_schedule',
    'timed_decisions',
    'resumed_plan',
    'data_check',
]
