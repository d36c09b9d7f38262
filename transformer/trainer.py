# Generated from book/trainer.md by tools/export.py: edit the chapter.
"""The Trainer: exact resumption, devices, precision, several processes."""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor

from transformer.batches import TokenizedSplit
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
    data_parallel,
    init_distributed,
    sum_over_ranks,
)
from transformer.fast import FastPaths, keep_freed_memory, output_loss
from transformer.model import Transformer, TransformerConfig
from transformer.plan import (
    RunPlan,
    Timing,
    TrainingConfig,
    data_check,
    given_plan,
    make_plan,
    resolved,
    resumed_plan,
)
from transformer.prepared import PreparedData, prepare_data
from transformer.runs import (Clock, LossWindow, Planner, Schedule, deferred_signals,
                              forget_metrics_after, run_log, scheduled_rate)
from transformer.samplers import TokenBatchSampler, TrainBatches, rank_sampler
from transformer.tokenizer import PAD
from transformer.training import adam, label_smoothed_loss


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
        "plan": trainer.plan.to_dict(),
        "tokenizer": trainer.data.tokenizer.to_str(),
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
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


def placed(model: Transformer, tokenizer: Tokenizer,
           device: torch.device) -> Transformer:
    """The model on `device`, its vocabulary checked against the tokenizer's (on a CPU
    with the fast paths, freed memory kept for the next step: keep_freed_memory)."""
    check_vocabulary(model, tokenizer)
    model = model.to(device)
    if device.type == "cpu" and FastPaths.enabled:
        keep_freed_memory()
    return model


def precision(config: TrainingConfig, device: torch.device
              ) -> tuple[torch.dtype | None, torch.amp.GradScaler]:
    """The autocast dtype of the plan's precision, and the loss scaler (on for fp16)."""
    dtype = autocast_dtype(config.precision, device)
    return dtype, torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def train_batches(split: TokenizedSplit, config: TrainingConfig, rank: int,
                  world_size: int, device: torch.device) -> TrainBatches:
    """This process's batches of `split`: its share of each update (rank_sampler),
    prepared ahead (config.prefetch) onto `device`."""
    sampler = rank_sampler(split.lengths(), config, rank, world_size,
                           config.pad_multiple)
    return TrainBatches(split, sampler, config.prefetch, device)


def compiled(loss: Callable, config: TrainingConfig, device: torch.device,
             world_size: int) -> Callable:
    """The step's `loss`, through torch.compile where the plan compiles it."""
    if not config.compile:
        return loss
    return torch.compile(loss, options=compile_options(config, device, world_size))


class Trainer:
    """Trains `model` on `data` (see prepare_data) as `config` says, writing to `out`.

    plan: the run's (make_plan); None: given_plan's of `config`. optimizer: by default
    the paper's Adam (training.adam); its rate is set before each update
    (scheduled_rate of the plan's schedule). overwrite: delete another run's files in
    `out` first (see check_output_folder)."""

    def __init__(
        self, model: Transformer, data: PreparedData, config: TrainingConfig,
        out: str | Path, optimizer: torch.optim.Optimizer | None = None,
        overwrite: bool = False, plan: RunPlan | None = None,
    ):
        plan = plan or given_plan(model.config, config)
        # what runs: the model with its vocabulary, the data with its fingerprints
        self.plan = replace(plan, model=model.config, data=data.fingerprints)
        self.config, self.out, self.data = self.plan.training, Path(out), data
        self.device = torch.device(self.config.device)  # decided by the plan
        self.overwrite, self.owns_out = overwrite, False  # owns_out: out holds this run
        self.rank, self.world_size = init_distributed(self.device)
        self.model, self.step = placed(model, data.tokenizer, self.device), 0
        torch.manual_seed(self.config.seed + self.rank)  # other masks on each rank
        self.optimizer = optimizer or adam(model)
        self.dtype, self.scaler = precision(self.config, self.device)
        self.compile = self.config.compile
        self.batches = train_batches(data.train, self.config, self.rank,
                                     self.world_size, self.device)
        self.network = data_parallel(self.model, self.device, self.world_size)
        self.forward_loss = compiled(self._loss, self.config, self.device,
                                     self.world_size)

    def fit(self, progress: bool = True) -> dict[str, float]:
        """Train until max_steps, max_minutes or a signal; returns the last metrics.
        After SIGINT or SIGTERM it stops after the current step with a checkpoint, and
        the result has "interrupted": the signal's number."""
        config, metrics = self.config, {}
        clock = Clock(config, self.world_size, self.device)
        planner = Planner(config, self.plan.schedule, self.step)  # the one, built once
        window = LossWindow(self.device)
        if progress and self.rank == 0:
            print(self.plan.table(), flush=True)
        with holding_folder(self):
            log_to = run_log(self.out, config.max_steps, self.step, self.rank, progress)
            with log_to as log, deferred_signals(self.world_size == 1) as received:
                if "data_changed_ok" in (changed := self.plan.why("data_check") or ""):
                    log({"step": self.step, "data_changed": changed})  # from here on
                while not received:
                    stop, due = clock.decide(self.step, self.plan.schedule.updates)
                    if stop:
                        break
                    if due:
                        self.save()
                        clock.checkpointed()
                    window.add(*self.train_step())
                    log(None)
                    rate = self.optimizer.param_groups[0]["lr"]  # this update's
                    if schedule := planner.measure(self.step, rate, clock):
                        replanned(self, schedule, log)
                    last = self.step == config.max_steps
                    if self.step % config.log_every == 0 or last:
                        metrics = {"step": self.step, **window.read(self.world_size),
                                   "lr": rate, "minutes": clock.minutes()}
                        log(metrics)
                    if self.step % config.eval_every == 0:
                        evaluation = {"step": self.step, **self.validate()}
                        log(evaluation)
                        metrics = {**metrics, **evaluation}
            if received:
                return stopped_by_signal(self, metrics, received[0])
            self.save()
            final = {"step": self.step, "minutes": clock.minutes(), **self.validate()}
            log(final)  # the bar is closed; the record still goes to metrics.jsonl
        return {**metrics, **final}

    @staticmethod
    def from_plan(plan: RunPlan, out: str | Path, overwrite: bool = False) -> Trainer:
        """A new run of `plan` (built_trainer)."""
        return built_trainer(plan, out, overwrite)

    @staticmethod
    def from_config(model_config: TransformerConfig, config: TrainingConfig,
                    out: str | Path, overwrite: bool = False) -> Trainer:
        """A new run of configurations made by hand (given_plan's plan)."""
        return built_trainer(given_plan(model_config, config), out, overwrite)

    @staticmethod
    def resume(path: str | Path, out: str | Path | None = None, overwrite: bool = False,
               data_changed_ok: bool = False, **overrides) -> Trainer:
        """Continue the run of a checkpoint (resumed_trainer)."""
        return resumed_trainer(path, out, overwrite, data_changed_ok, **overrides)

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
        """One update at its rate (scheduled_rate of the plan's schedule). Returns
        this process's summed loss, a tensor left on the device (reading it would make
        the host wait), and its number of target tokens."""
        rate = scheduled_rate(self.step + 1, self.plan.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
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
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
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
            trainer.plan.save(out)
            forget_metrics_after(out, trainer.step)
            yield
    finally:
        trainer.batches.close()


def replanned(trainer: Trainer, schedule: Schedule, log: Callable) -> None:
    """The trainer's plan with the schedule its Planner measured: in plan.json (rank
    0), in every later checkpoint (training_state), and in the log."""
    trainer.plan = trainer.plan.scheduled(schedule)
    if trainer.rank == 0:
        trainer.plan.save(trainer.out)
    text = f"schedule {schedule.describe()}: {schedule.why}"
    log({"step": trainer.step, "plan": {**asdict(schedule), "text": text}})


def stopped_by_signal(trainer: Trainer, metrics: dict, signum: int) -> dict:
    """The checkpoint of a run stopped by SIGINT/SIGTERM, and its last metrics."""
    saved = checkpoint_path(trainer.out, trainer.step)
    saved = saved if saved.exists() else trainer.save()
    print(f"interrupted at step {trainer.step}; saved {saved}; "
          f"continue with --resume {trainer.out}")
    return {**metrics, "step": trainer.step, "interrupted": signum}


def time_update(trainer: Trainer, repeats: int = 3) -> float:
    """Seconds of one update's forward and backward passes on the trainer's next
    batches: the median of `repeats`, after one untimed. The weights, the optimizer,
    the random state and the batches' position are left as they were."""
    position = trainer.batches.epoch, trainer.batches.index
    batches = [trainer.batches.next() for _ in range(trainer.config.accumulate)]
    trainer.batches.seek(*position)
    trainer.network.train()
    device = trainer.device
    seconds, accelerator = [], device.type != "cpu"
    devices = [device] if accelerator else []  # the CPU's generator: always
    with torch.random.fork_rng(devices, device_type=device.type):
        for _ in range(repeats + 1):
            start = time.perf_counter()
            for batch in batches:
                loss = trainer.forward_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                            batch.segments)
                loss.backward()
            if accelerator:
                torch.accelerator.synchronize(device)
            seconds.append(time.perf_counter() - start)
    trainer.optimizer.zero_grad(set_to_none=True)
    return statistics.median(seconds[1:])


def time_first_update(model_config: TransformerConfig,
                      config: TrainingConfig) -> Timing:
    """One update of the run of these configurations timed before it starts (rank 0's
    seconds), the updates of a pass over its data, and whether half its batch fits.
    config: the plan's, its device decided (else decided here: made by hand)."""
    if None in (config.compile, config.pad_multiple) or "auto" in (config.device,
                                                                    config.precision):
        config = resolved(config)[0]
    init_distributed(torch.device(config.device))  # the data: rank 0's first
    with tempfile.TemporaryDirectory() as folder:
        model, data = model_and_data(model_config, config)
        probe = Trainer(model, data, config, folder, plan=RunPlan(model_config, config))
        try:
            clock = Clock(config, probe.world_size, probe.device)
            seconds = clock.rank0(time_update(probe))
            per_pass = len(probe.batches.sampler) / config.accumulate
            half = replace(config, max_tokens=config.max_tokens // 2)
            try:  # the half may hold not the longest pair, or no packed row
                rank_sampler(data.train.lengths(), half, probe.rank, probe.world_size,
                             config.pad_multiple)
            except ValueError:
                return Timing(seconds, per_pass, half_fits=False)
            return Timing(seconds, per_pass)
        finally:  # the probe's memory back before the run's model is built
            probe.batches.close()
            del probe, model
            gc.collect()


def plan_run(preset: str | None = None, model: dict | None = None,
             **given) -> RunPlan:
    """make_plan, timing an update where a decision needs one (time_first_update)."""
    return make_plan(preset, model, time_first_update, **given)


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


def built_trainer(
    plan: RunPlan, out: str | Path, overwrite: bool = False,
    state: dict | None = None, resumed_from: Path | None = None,
) -> Trainer:
    """Check the output folder, prepare the data, build the model (its vocabulary
    the tokenizer's) and a Trainer that runs `plan`. resumed_from: the folder of
    `state`, a checkpoint's."""
    own = resumed_from is not None and resumed_from.resolve() == Path(out).resolve()
    if init_distributed(torch.device(plan.training.device))[0] == 0:  # rank 0 writes
        check_output_folder(Path(out), own, overwrite)
    tokenizer = None if state is None else Tokenizer.from_str(state["tokenizer"])
    model, data = model_and_data(plan.model, plan.training, tokenizer)
    trainer = Trainer(model, data, plan.training, out, overwrite=overwrite, plan=plan)
    trainer.owns_out = own
    if state is not None:
        restore_training_state(trainer, state)
    return trainer


def resumed_trainer(
    path: str | Path, out: str | Path | None = None, overwrite: bool = False,
    data_changed_ok: bool = False, **overrides,
) -> Trainer:
    """Continue the run of a checkpoint (or of the newest checkpoint in a folder),
    in its folder or in `out`, under its plan (resumed_plan: its schedule too) and
    `overrides`, on the data it trained on (data_check; data changed since:
    data_changed_ok)."""
    state, path = training_checkpoint(path)
    plan = resumed_plan(state, **overrides)
    trainer = built_trainer(plan, out or path.parent, overwrite, state, path.parent)
    saved = state.get("plan", {}).get("data") or None  # None: not kept then
    trainer.plan = trainer.plan.checked(data_check(
        saved, trainer.data.fingerprints, path.name, trainer.step, data_changed_ok))
    return trainer


__all__ = [
    'training_state',
    'restore_training_state',
    'validation_loss',
    'check_vocabulary',
    'placed',
    'precision',
    'train_batches',
    'compiled',
    'Trainer',
    'holding_folder',
    'replanned',
    'stopped_by_signal',
    'time_update',
    'time_first_update',
    'plan_run',
    'compile_options',
    'model_and_data',
    'built_trainer',
    'resumed_trainer',
]
