# Generated from book/trainer.md by tools/export.py: edit the chapter.
"""The Trainer: exact resumption, devices, precision, several processes."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from transformer.batches import Batch, TokenizedSplit
from transformer.checkpoints import (
    check_output_folder,
    checkpoint_path,
    folder_lock,
    keep_newest_checkpoints,
    save_checkpoint,
    training_checkpoint,
)
from transformer.devices import (
    all_gather,
    autocast,
    autocast_dtype,
    check_precision,
    data_parallel,
    default_compile,
    default_pad_multiple,
    default_pin_memory,
    init_distributed,
    pick_device,
    sum_over_ranks,
)
from transformer.fast import Dropout, FastPaths, keep_freed_memory, output_loss
from transformer.model import Transformer, TransformerConfig
from transformer.prepared import PreparedData, prepare_data
from transformer.runs import (
    FEW_UPDATES,
    Clock,
    LossWindow,
    Planner,
    deferred_signals,
    fitted_dropout,
    fitted_max_tokens,
    forget_metrics_after,
    run_log,
    scaled_rates,
)
from transformer.samplers import BatchStream, PackedBatchSampler, TokenBatchSampler
from transformer.tokenizer import PAD
from transformer.training import label_smoothed_loss, learning_rate, make_optimizer


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
    fit_batch, dropout_by_passes (fitted_dropout's lines): Trainer.fit_to_budget.
    """

    data: str = "numbers"
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_size: int = 8000
    max_tokens: int = 25000
    accumulate: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    warmup_steps: int = 4000
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
    checkpoint_minutes: float = 10.0
    checkpoint_every: int | None = None
    keep_checkpoints: int = 5
    cache_dir: str | None = None
    split_punctuation: bool = False
    lowercase: bool = False
    fit_batch: bool = False
    dropout_by_passes: tuple[tuple[float, float], ...] | None = None

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
        if self.pack_length is not None and self.pack_length % 8:
            raise ValueError(
                "pack_length must be a multiple of 8 (whole tiles for the matrix "
                f"kernels); got {self.pack_length}"
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
        if not isinstance(self.fit_batch, bool):
            raise ValueError(f"fit_batch must be True or False; got {self.fit_batch!r}")
        if self.dropout_by_passes is not None:
            check_dropout_lines(self.dropout_by_passes)

    @classmethod
    def preset(
        cls, name: str, text: bool, cuda: bool = False, **given
    ) -> TrainingConfig:
        """The settings of preset `name` for real text (or the number corpus) on a CUDA
        GPU (or not), under the settings `given`."""
        settings = {**TRAINING_PRESETS[name], "split_punctuation": text}
        if name == "small":
            settings |= SMALL_DATA["text" if text else "numbers"]
        if "max_tokens" in given:  # a batch given by name is the run's batch
            settings.pop("fit_batch", None)
        if given.get("max_steps") is None and given.get("max_minutes") is None:
            if not (text and name == "tiny" and cuda):
                raise ValueError(
                    "say when to stop: max_steps and/or max_minutes (--max-steps N, "
                    "--max-minutes M); only the tiny preset on real text on a CUDA "
                    f"GPU has a default: {GPU_TEXT_STEPS:,} steps"
                )
            given = {**given, "max_steps": GPU_TEXT_STEPS}
        told = ("checkpoint_minutes", "checkpoint_every")
        if all(given.get(name) is None for name in told):
            budget = given.get("max_steps"), given.get("max_minutes")
            settings |= checkpoint_spacing(*budget)
        return cls(**{**settings, **given})


def check_dropout_lines(lines) -> None:
    """dropout_by_passes: a tuple of (passes, P_drop) pairs, passes positive and
    rising, each P_drop in [0, 1)."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    def line(pair) -> bool:
        return (isinstance(pair, tuple) and len(pair) == 2 and all(map(number, pair))
                and pair[0] > 0 and 0.0 <= pair[1] < 1.0)

    lines_ok = isinstance(lines, tuple) and lines and all(map(line, lines))
    if not (lines_ok and all(a[0] < b[0] for a, b in zip(lines, lines[1:]))):
        raise ValueError(
            "dropout_by_passes must be None or a tuple of (passes, P_drop) pairs, "
            f"passes positive and rising, P_drop in [0, 1); got {lines!r}"
        )


SCHEDULES = ("paper", "planned")


def default_schedule(config: TrainingConfig) -> str:
    """The schedule of a run that names none: "planned" for a budget of minutes alone
    (no max_steps, no cooldown), else "paper"."""
    minutes_alone = config.max_minutes is not None and config.max_steps is None
    return "planned" if minutes_alone and not config.cooldown else "paper"


TRAINING_PRESETS: dict[str, dict] = {
    "small": {"warmup_steps": 400, "lr_scale": 0.5},
    "tiny": {
        "vocab_size": 8000,
        "max_tokens": 4096,
        "warmup_steps": 800,  # Wu et al.: 2000; the rate after step 2000 is theirs
        "lr_scale": 2.53,  # their peak 0.005 = 2.53 * 128^-0.5 * 2000^-0.5
        "keep_checkpoints": 10,
        "fit_batch": True,  # max_tokens halved for a budget of few updates (Runs)
        "dropout_by_passes": ((10, 0.0), (30, 0.1)),  # P_drop of a short budget (Runs)
    },
    "base": {"vocab_size": 37000, "max_tokens": 25000, "warmup_steps": 4000},
    "big": {
        "vocab_size": 37000,
        "max_tokens": 25000,
        "warmup_steps": 4000,
        "keep_checkpoints": 20,  # the paper averages the last 20 of the big model
    },
}
SMALL_DATA = {  # the small preset's vocabulary and batch: numbers, or real text
    "numbers": {"vocab_size": 200, "max_tokens": 2000, "eval_every": 200},
    "text": {"vocab_size": 8000, "max_tokens": 4000, "eval_every": 400},
}
GPU_TEXT_STEPS = 16_000  # the tiny preset's budget on real text on a CUDA GPU


def rank_sampler(
    lengths: np.ndarray,
    config: TrainingConfig,
    rank: int,
    world_size: int,
    pad_multiple: int,
) -> TokenBatchSampler | PackedBatchSampler:
    """The batches of process `rank`: max_tokens per update, over ranks and accumulated
    batches; packed rows if config.pack_length is set."""
    parts = world_size * config.accumulate
    shared = dict(seed=config.seed, rank=rank, world_size=world_size)
    try:
        if config.pack_length is not None:
            return PackedBatchSampler(lengths, config.max_tokens // parts,
                                      config.pack_length, **shared)
        return TokenBatchSampler(lengths, config.max_tokens // parts,
                                 pad_multiple=pad_multiple, **shared)
    except ValueError as error:
        raise ValueError(
            f"max_tokens={config.max_tokens} per update, over {world_size} process(es) "
            f"x {config.accumulate} accumulated batch(es), leaves "
            f"{config.max_tokens // parts} per batch: {error}"
        ) from error


class TrainBatches:
    """The training batches of one process, in its sampler's order from (epoch, index)
    on, prepared ahead in a background thread and moved to `device`."""

    def __init__(self, split: TokenizedSplit,
                 sampler: TokenBatchSampler | PackedBatchSampler, prefetch: int,
                 device: torch.device):
        self.split, self.sampler, self.prefetch = split, sampler, prefetch
        self.device = device
        self.epoch, self.index = 0, 0  # the position of the next batch
        self._stream: Iterator[tuple[Batch, int, int]] | None = None

    def next(self) -> Batch:
        if self._stream is None:
            self._stream = iter(BatchStream(
                self.split, self.sampler, self.epoch, self.index, self.prefetch,
                pin_memory=default_pin_memory(self.device),
            ))
        batch, self.epoch, self.index = next(self._stream)
        return batch.to(self.device)

    def seek(self, epoch: int, index: int) -> None:
        """Continue from batch `index` of epoch `epoch` (a checkpoint's position)."""
        self.close()
        self.epoch, self.index = epoch, index

    def close(self) -> None:
        """Stop the background thread; a later `next` starts another."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def training_state(trainer: Trainer) -> dict:
    """What a resumed run needs (gathered from every process: call it on all)."""
    rng = all_gather(torch.get_rng_state().to(trainer.device), trainer.world_size)
    cuda_rng = []
    if trainer.device.type == "cuda":
        cuda_rng = torch.cuda.get_rng_state(trainer.device).to(trainer.device)
        cuda_rng = all_gather(cuda_rng, trainer.world_size)
    return {
        "model_config": trainer.model.config.to_dict(),
        "training_config": asdict(trainer.config),
        "tokenizer": trainer.data.tokenizer.to_str(),
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "schedule": trainer.schedule.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "step": trainer.step,
        "epoch": trainer.batches.epoch,
        "batch_index": trainer.batches.index,
        "rng": [r.cpu() for r in rng],
        "cuda_rng": [r.cpu() for r in cuda_rng],
    }


def restore_training_state(trainer: Trainer, state: dict) -> None:
    """Put a checkpoint's state back into a trainer built from its configurations."""
    if len(state["rng"]) != trainer.world_size:
        raise ValueError(
            f"the checkpoint was written by {len(state['rng'])} process(es); resume it "
            f"with as many, not {trainer.world_size} (the data shards and random "
            "streams depend on it)"
        )
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.schedule.load_state_dict(state["schedule"])
    trainer.scaler.load_state_dict(state["scaler"])
    trainer.step = state["step"]
    trainer.batches.seek(state["epoch"], state["batch_index"])
    torch.set_rng_state(state["rng"][trainer.rank])
    if trainer.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"][trainer.rank], trainer.device)


@torch.no_grad()
def validation_loss(
    model: Transformer, split: TokenizedSplit | None, max_tokens: int,
    dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Loss per target token of a split (no label smoothing), and its perplexity; {}
    without one."""
    if split is None or not len(split):
        return {}
    model.eval()
    device = next(model.parameters()).device
    budget = max(max_tokens, int(split.lengths().max()))
    loss_sum, n_tokens = torch.zeros((), device=device), 0
    for indices in TokenBatchSampler(split.lengths(), budget, shuffle=False).epoch(0):
        batch = split.batch(indices).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(batch.src, batch.tgt_in, check_ids=False)
        loss_sum += label_smoothed_loss(logits, batch.tgt_out, 0.0)
        n_tokens += batch.n_tokens
    loss = loss_sum.item() / n_tokens
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}


def check_vocabulary(model: Transformer, tokenizer: Tokenizer) -> None:
    """Refuse a model whose embeddings cannot hold every id of the tokenizer."""
    vocab = tokenizer.get_vocab_size()
    sizes = model.config.src_vocab_size, model.config.tgt_vocab_size
    if min(sizes) < vocab:
        raise ValueError(
            f"the model's vocabularies {sizes} must hold the tokenizer's {vocab} ids"
        )


class Trainer:
    """Trains `model` on `data` (see prepare_data) as `config` says, writing to `out`.

    optimizer and schedule default to make_optimizer's Adam and the paper's schedule.
    overwrite: delete another run's files in `out` first (see check_output_folder).
    """

    def __init__(
        self, model: Transformer, data: PreparedData, config: TrainingConfig,
        out: str | Path, optimizer: torch.optim.Optimizer | None = None,
        schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
        overwrite: bool = False,
    ):
        self.config, self.out, self.data = config, Path(out), data
        self.overwrite, self.owns_out = overwrite, False  # owns_out: out holds this run
        self.device = pick_device(config.device)
        self.rank, self.world_size = init_distributed(self.device)
        check_vocabulary(model, data.tokenizer)
        self.model = model.to(self.device)
        if self.device.type == "cpu" and FastPaths.enabled:
            keep_freed_memory()
        torch.manual_seed(config.seed + self.rank)  # other dropout masks on each rank
        if optimizer is None:
            optimizer, schedule = make_optimizer(model, model.config.d_model,
                                                 config.warmup_steps, config.lr_scale)
        self.optimizer, self.schedule = optimizer, schedule
        self.step, self.rate_factor = 0, 1.0  # rate_factor: set by fit (Planner)
        self.dtype = autocast_dtype(config.precision, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=self.dtype == torch.float16)
        self.compile = (default_compile(self.device) if config.compile is None
                        else config.compile)
        self.batches = self.train_batches(config)
        self.network = data_parallel(self.model, self.device, self.world_size)
        self.forward_loss = self._loss if not self.compile else torch.compile(
            self._loss, options=compile_options(config, self.device, self.world_size))

    def train_batches(self, config: TrainingConfig) -> TrainBatches:
        """This process's training batches under `config` (its max_tokens)."""
        pad = config.pad_multiple or default_pad_multiple(self.compile)
        sampler = rank_sampler(self.data.train.lengths(), config, self.rank,
                               self.world_size, pad)
        return TrainBatches(self.data.train, sampler, config.prefetch, self.device)

    def fit(self, progress: bool = True) -> dict[str, float]:
        """Train until max_steps, max_minutes or a signal; returns the last metrics.
        After SIGINT or SIGTERM it stops after the current step with a checkpoint, and
        the result has "interrupted": the signal's number."""
        config = self.config
        metrics: dict[str, float] = {}
        clock = Clock(config, self.world_size, self.device)
        d_model, warmup = self.model.config.d_model, config.warmup_steps
        # the peak of the paper's curve (a planned schedule holds PEAK_SHARE of it)
        peak = learning_rate(warmup, d_model, warmup, config.lr_scale)
        planner = Planner(config, clock, peak, self.step)
        window = LossWindow(self.device)
        with holding_folder(self):
            log_to = run_log(self.out, config.max_steps, self.step, self.rank, progress)
            with log_to as log, deferred_signals(self.world_size == 1) as received:
                if batch := self.fit_to_budget(clock):
                    log({"step": self.step, "batch": batch})
                while not received:
                    stop, checkpoint_due = clock.decide(self.step)
                    if stop:
                        break
                    if checkpoint_due:
                        self.save()
                        clock.checkpointed()
                    paper = self.schedule.get_last_lr()[0]
                    rate = planner.rate(self.step + 1, clock.done(self.step), paper)
                    self.rate_factor = rate / paper
                    window.add(*self.train_step())
                    log(None)
                    if plan := planner.measure(self.step, rate):
                        text = plan.describe(config.max_minutes)
                        log({"step": self.step, "plan": {**asdict(plan), "text": text}})
                    last = self.step == config.max_steps
                    if self.step % config.log_every == 0 or last:
                        metrics = {"step": self.step, **window.read(self.world_size),
                                   "lr": rate, "minutes": clock.minutes()}
                        log(metrics)
                    if self.step % config.eval_every == 0:
                        evaluation = {"step": self.step, **self.validate()}
                        log(evaluation)
                        metrics = {**metrics, **evaluation}
            self.rate_factor = 1.0  # a train_step called after fit: the schedule's rate
            if received:
                return stopped_by_signal(self, metrics, received[0])
            self.save()
            final = {"step": self.step, "minutes": clock.minutes(), **self.validate()}
            log(final)  # the bar is closed; the record still goes to metrics.jsonl
        return {**metrics, **final}

    def time_update(self, repeats: int = 3) -> float:
        """Seconds of one update's forward and backward passes on the run's next
        batches: the median of `repeats`, after one untimed. The weights, the optimizer,
        the random state and the batches' position are left as they were."""
        position = self.batches.epoch, self.batches.index
        batches = [self.batches.next() for _ in range(self.config.accumulate)]
        self.batches.seek(*position)
        self.network.train()
        seconds, accelerator = [], self.device.type != "cpu"
        devices = [self.device] if accelerator else []  # the CPU's generator: always
        with torch.random.fork_rng(devices, device_type=self.device.type):
            for _ in range(repeats + 1):
                start = time.perf_counter()
                for batch in batches:
                    loss = self.forward_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                             batch.segments)
                    loss.backward()
                if accelerator:
                    torch.accelerator.synchronize(self.device)
                seconds.append(time.perf_counter() - start)
        self.optimizer.zero_grad(set_to_none=True)
        return statistics.median(seconds[1:])

    def fit_to_budget(self, clock: Clock) -> dict | None:
        """Before the first update of a planned run of minutes alone (not compiled),
        from one update timed: max_tokens halved (if fit_batch) when the budget holds
        fewer than FEW_UPDATES updates, P_drop set by dropout_by_passes (if given) from
        the passes over the training data it holds (fitted_dropout). Returns the
        decision for the log (None: nothing to decide)."""
        config = self.config
        alone = config.planned and config.max_steps is None and config.max_minutes
        lines = config.dropout_by_passes
        fits = config.fit_batch or lines is not None
        if not (fits and alone and self.step == 0) or self.compile:
            return None
        seconds = clock.rank0(self.time_update())  # one decision for every replica
        minutes = config.max_minutes
        tokens, updates = fitted_max_tokens(config.max_tokens, seconds, minutes)
        per_pass = len(self.batches.sampler) / config.accumulate  # updates a pass
        epochs = updates / per_pass
        tokens, batch = (self.fit_batch(tokens) if config.fit_batch
                         else (config.max_tokens, "as given"))
        rate = fitted_dropout(epochs, lines) if lines is not None else None
        if rate is not None:
            set_dropout(self.model, rate)
        dropout = self.model.config.dropout
        # decided once: a run resumed, even from its checkpoint of step 0, keeps it
        self.config = replace(config, max_tokens=tokens, fit_batch=False,
                              dropout_by_passes=None)
        under = [passes for passes, _ in lines or () if epochs < passes]
        why = (f"under {under[0]:g} passes" if under
               else f"{lines[-1][0]:g} passes or more" if lines else "the model's")
        text = (f"batch {batch}, {tokens:,} tokens an update, P_drop {dropout:g} "
                f"({why}): one of {config.max_tokens:,} took {seconds:.2f} s, about "
                f"{updates:,} in {minutes:g} min, {epochs:.1f} passes over the data, "
                f"of {per_pass:,.0f} updates each")
        return {"max_tokens": tokens, "dropout": dropout, "seconds": seconds,
                "updates": updates, "epochs": epochs, "text": text}

    def fit_batch(self, tokens: int) -> tuple[int, str]:
        """The run's batches made of `tokens` (fitted_max_tokens's choice), unless half
        the batch is too small for the data: the tokens an update, and what was done."""
        kept = self.config.max_tokens
        if tokens == kept:
            return kept, f"kept ({FEW_UPDATES:,} updates or more)"
        try:
            batches = self.train_batches(replace(self.config, max_tokens=tokens))
        except ValueError:  # the half holds not the longest pair, or no packed row
            return kept, (f"kept (under {FEW_UPDATES:,} updates, but half the batch is "
                          "too small for this data)")
        self.batches.close()
        self.batches = batches
        return tokens, f"halved (under {FEW_UPDATES:,} updates)"

    @classmethod
    def from_config(
        cls, model_config: TransformerConfig, config: TrainingConfig, out: str | Path,
        state: dict | None = None, overwrite: bool = False,
        resumed_from: Path | None = None,
    ) -> Trainer:
        """Check the output folder, prepare the data, build the model (its vocabulary
        the tokenizer's) and a Trainer. resumed_from: the folder of `state`."""
        own = resumed_from is not None and resumed_from.resolve() == Path(out).resolve()
        if init_distributed(pick_device(config.device))[0] == 0:  # rank 0 writes
            check_output_folder(Path(out), own, overwrite)
        tokenizer = None if state is None else Tokenizer.from_str(state["tokenizer"])
        model, data = model_and_data(model_config, config, tokenizer)
        trainer = cls(model, data, config, out, overwrite=overwrite)
        trainer.owns_out = own
        if state is not None:
            restore_training_state(trainer, state)
        return trainer

    @classmethod
    def resume(
        cls, path: str | Path, out: str | Path | None = None, overwrite: bool = False,
        **overrides,
    ) -> Trainer:
        """Continue the run of a checkpoint (or of the newest checkpoint in a folder),
        in its folder or in `out`."""
        state, path = training_checkpoint(path)
        settings = dict(state["training_config"])
        if "few_epochs_dropout" in settings:  # its name from 0fc0402 to c287e4b: a
            rate = settings.pop("few_epochs_dropout")  # P_drop under 30 passes
            settings["dropout_by_passes"] = None if rate is None else ((30, rate),)
        config = replace(TrainingConfig(**settings), **overrides)
        return cls.from_config(TransformerConfig(**state["model_config"]), config,
                               out or path.parent, state, overwrite, path.parent)

    def _loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor,
              segments: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """The summed label-smoothed loss of a batch (segments: of its packed rows):
        from the logits if compiled or under reference_paths, else by output_loss."""
        epsilon = self.config.label_smoothing
        logits = self.compile or not FastPaths.enabled
        with autocast(self.device, self.dtype):
            out = self.network(src, tgt_in, check_ids=False, segments=segments,
                               project=logits)
            if logits:
                return label_smoothed_loss(out, tgt_out, epsilon)
            return output_loss(out, self.model.output.linear.weight, tgt_out, epsilon)

    def train_step(self) -> tuple[Tensor, int]:
        """One update. Returns this process's summed loss, a tensor left on the device
        (reading it would make the host wait), and its number of target tokens."""
        self.network.train()
        batches = [self.batches.next() for _ in range(self.config.accumulate)]
        n_tokens = sum(batch.n_tokens for batch in batches)
        # the target tokens of the whole update, over every process
        total = sum_over_ranks(n_tokens, self.world_size, self.device)
        loss_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(batches):
            no_sync = self.world_size > 1 and i < len(batches) - 1
            with self.network.no_sync() if no_sync else contextlib.nullcontext():
                loss = self.forward_loss(
                    batch.src, batch.tgt_in, batch.tgt_out, batch.segments
                )
                # DDP averages gradients over ranks; times world_size: a sum over tokens
                self.scaler.scale(loss * (self.world_size / total)).backward()
            loss_sum += loss.detach()
        with scaled_rates(self.optimizer, self.rate_factor):  # fit's Planner's
            self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.step += 1
        return loss_sum, n_tokens

    def save(self) -> Path:
        """Write checkpoint-STEP.pt in `out`; keep the newest keep_checkpoints."""
        state = training_state(self)  # gathered from every process
        path = checkpoint_path(self.out, self.step)
        if self.rank == 0:
            save_checkpoint(state, path)
            keep_newest_checkpoints(self.out, self.config.keep_checkpoints)
        return path

    def validate(self) -> dict[str, float]:
        """Validation loss per target token (no label smoothing) and perplexity."""
        return validation_loss(self.model, self.data.valid,
                               self.batches.sampler.max_tokens, self.dtype)


@contextlib.contextmanager
def holding_folder(trainer: Trainer) -> Iterator[None]:
    """Rank 0 holds out/.lock while the run trains; the batch stream ends with the
    run."""
    try:
        if trainer.rank != 0:
            yield
            return
        out, own, overwrite = trainer.out, trainer.owns_out, trainer.overwrite
        check_output_folder(out, own, overwrite)
        out.mkdir(parents=True, exist_ok=True)
        with folder_lock(out):
            check_output_folder(out, own, overwrite, remove=True)
            trainer.owns_out = True
            forget_metrics_after(out, trainer.step)
            yield
    finally:
        trainer.batches.close()


def stopped_by_signal(trainer: Trainer, metrics: dict, signum: int) -> dict:
    """The checkpoint of a run stopped by SIGINT/SIGTERM, and its last metrics."""
    saved = checkpoint_path(trainer.out, trainer.step)
    saved = saved if saved.exists() else trainer.save()
    print(f"interrupted at step {trainer.step}; saved {saved}; "
          f"continue with --resume {trainer.out}")
    return {**metrics, "step": trainer.step, "interrupted": signum}


def set_dropout(model: Transformer, p: float) -> None:
    """P_drop of a built model: in its configuration (which the checkpoints keep) and
    in its Dropout modules, those of the sub-layers and the embeddings (attention and
    the FFN have rates of their own)."""
    model.config = replace(model.config, dropout=p)
    for module in model.modules():
        if isinstance(module, Dropout):
            module.p = p


def compile_options(
    config: TrainingConfig, device: torch.device, world_size: int
) -> dict[str, bool]:
    """Inductor's options for the step: only what is on, its own settings hold for the
    rest. Fixed shapes (packed rows) on a GPU: tune the kernels' block sizes, once; and
    CUDA graphs with one process and no accumulation (a replay would overwrite the
    gradients an accumulated batch left in the graph's memory)."""
    options = {}
    if device.type == "cuda" and config.pack_length is not None:
        options["coordinate_descent_tuning"] = True
        if world_size == 1 and config.accumulate == 1:
            options["triton.cudagraphs"] = True
    return options


def model_and_data(
    model_config: TransformerConfig, config: TrainingConfig,
    tokenizer: Tokenizer | None = None,
) -> tuple[Transformer, PreparedData]:
    """The data `config` names (its tokenizer trained, or `tokenizer`) and a new
    model with the tokenizer's vocabulary, initialized alike on every process."""
    data = prepare_data(config.data, config.src_lang, config.tgt_lang,
                        config.vocab_size, tokenizer, config.cache_dir,
                        config.lowercase, config.split_punctuation)
    vocab = data.tokenizer.get_vocab_size()
    model_config = replace(model_config, src_vocab_size=vocab, tgt_vocab_size=vocab,
                           pad_id=PAD)
    torch.manual_seed(config.seed)  # the same initial model on every rank
    return Transformer(model_config), data


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
        spacing["checkpoint_minutes"] = min(10.0, max_minutes / 15)
    if max_steps is not None:
        spacing["checkpoint_every"] = max(1, max_steps // 15)
    return spacing


def final_average(config: TrainingConfig, average_last: int | None = None) -> int:
    """How many of the newest checkpoints the final model averages: average_last if
    given, else the paper's 5, or 1 after a run whose rate fell to 0 at its end (a
    cool-down or a planned schedule), whose last checkpoint is already the end of a
    decay."""
    return average_last or (1 if config.cooldown or config.planned else 5)


__all__ = [
    'TrainingConfig',
    'check_dropout_lines',
    'default_schedule',
    'rank_sampler',
    'TrainBatches',
    'training_state',
    'restore_training_state',
    'validation_loss',
    'check_vocabulary',
    'Trainer',
    'holding_folder',
    'stopped_by_signal',
    'set_dropout',
    'compile_options',
    'model_and_data',
    'default_preset',
    'checkpoint_spacing',
    'final_average',
]
