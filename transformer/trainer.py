# Generated from book/trainer.md by tools/export.py: edit the chapter, not this file.
"""The Trainer: checkpoints, exact resumption, devices, precision, several processes."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import math
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm import tqdm

import transformer
from transformer.data import (
    PAD,
    Batch,
    BatchStream,
    PreparedData,
    TokenBatchSampler,
    TokenizedSplit,
    default_cache_dir,
    prepare_data,
)
from transformer.decoding import translate
from transformer.model import Transformer, TransformerConfig
from transformer.training import label_smoothed_loss, make_optimizer


CHECKPOINT_FORMAT = "transformer-checkpoint-v1"


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` atomically: to PATH.tmp first, then renamed to PATH."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    try:
        torch.save({"format": CHECKPOINT_FORMAT, **state}, temporary)
        os.replace(temporary, path)
    except (
        OSError,
        RuntimeError,
    ) as error:  # torch reports a full disk as RuntimeError
        raise OSError(
            f"could not write {path} ({error}); the checkpoints written before it are intact"
        ) from error
    finally:
        temporary.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by save_checkpoint, without unpickling arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # a truncated zip, a foreign pickle, ...: all unreadable
        raise ValueError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {error}"
        ) from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = sorted(state)[:5] if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{path} is not a transformer checkpoint (expected format {CHECKPOINT_FORMAT!r}); found {found}"
        )
    return state


def load_model(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[Transformer, Tokenizer]:
    """The model (in eval mode) and tokenizer of a checkpoint."""
    state = load_checkpoint(path, device)
    model = Transformer(TransformerConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    return model.to(device).eval(), Tokenizer.from_str(state["tokenizer"])


def check_output_folder(
    out: Path, own: bool = False, overwrite: bool = False, remove: bool = False
) -> None:
    """Raise unless `out` can hold this run's files: not a file, writable, and without
    another run's checkpoints or metrics (own: this run resumes from `out`). With overwrite
    and remove, another run's files are deleted."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"the output folder {out} is a file")
    existing = next(p for p in [out, *out.parents] if p.exists())  # made later if new
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"the output folder {out} cannot be written ({existing})")
    found = sorted(out.glob("checkpoint-*.pt*")) + sorted(out.glob("metrics.jsonl"))
    if found and not own and not overwrite:
        raise FileExistsError(
            f"{out} holds another run's files ({', '.join(p.name for p in found[-2:])}, "
            f"{len(found)} in all): continue it with --resume {out}, choose another --out, "
            "or give --overwrite to delete them first"
        )
    if found and not own and remove:
        for path in found:
            path.unlink()


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on out/.lock (POSIX flock), or raise BlockingIOError naming
    the process that holds it."""
    import fcntl  # POSIX only: the lock is where the run is, on Linux and macOS

    with open(out / ".lock", "a+") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            raise BlockingIOError(
                f"another run (process {file.read().strip() or '?'}) is training in {out}"
            ) from None
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def pick_device(device: str = "auto") -> torch.device:
    """ "auto": CUDA, then MPS, then CPU; otherwise the named device, which must be here."""
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"unknown device {device!r}: expected auto, cpu, cuda, cuda:N or mps"
            ) from None
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if chosen.type == "cuda" and (chosen.index or 0) >= count:
            raise ValueError(
                f"device {device!r} asked for; this machine has {count} CUDA GPU(s)"
            )
        if chosen.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r} asked for; MPS is not available here")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@functools.cache
def cpu_bf16_speedup(size: int = 1024, repeats: int = 5) -> float:
    """Measured speed of a bf16 over an fp32 matrix product on this CPU."""
    seconds = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(
            size, size, dtype=dtype
        )
        a @ b  # warm-up
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        seconds[dtype] = time.perf_counter() - start
    return seconds[torch.float32] / seconds[torch.bfloat16]


def check_precision(precision: str) -> None:
    """Raise unless `precision` is "auto", "fp32", "bf16" or "fp16"."""
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(
            f"precision must be 'auto', 'fp32', 'bf16' or 'fp16'; got {precision!r}"
        )


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for "auto", "fp32", "bf16" or "fp16" on `device` (None = fp32)."""
    check_precision(precision)
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "cpu" and cpu_bf16_speedup() >= 1.5:
            return torch.bfloat16
        return None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the large blocks a training step frees, for the next step.
    Returns False, changing nothing, where the C library is not glibc (macOS, musl)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
    return bool(libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**30))


@dataclass
class TrainingConfig:
    """Settings of a training run.

    max_tokens: tokens per side (source, target) of one update, over all processes and
    accumulation steps (the paper: 25000); a batch of one process holds
    max_tokens // (processes * accumulate). compile=None compiles on CUDA only;
    pad_multiple=None pads lengths to a multiple of 8 when compiling, else not at all.
    prefetch: batches prepared ahead by a background thread. cache_dir: where prepared
    corpora are kept (None: see default_cache_dir).
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
    label_smoothing: float = 0.1
    precision: str = "auto"
    compile: bool | None = None
    pad_multiple: int | None = None
    prefetch: int = 4
    device: str = "auto"
    seed: int = 0
    log_every: int = 50
    eval_every: int = 500
    checkpoint_minutes: float = 10.0
    checkpoint_every: int | None = None
    keep_checkpoints: int = 5
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Every setting in its range, and a way to stop."""
        if self.max_steps is None and self.max_minutes is None:
            raise ValueError(
                "set max_steps or max_minutes (or both): a run must know when to stop"
            )
        counts = ["vocab_size", "max_tokens", "accumulate", "warmup_steps", "log_every"]
        counts += ["eval_every", "keep_checkpoints", "max_steps", "checkpoint_every"]
        optional = ["max_steps", "checkpoint_every", "pad_multiple", "max_minutes"]
        for name in [
            *counts,
            "pad_multiple",
            "max_minutes",
            "lr_scale",
            "checkpoint_minutes",
        ]:
            value, integer = (
                getattr(self, name),
                name in counts or name == "pad_multiple",
            )
            if value is None and name in optional:
                continue
            kind = int if integer else (int, float)
            if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
                what = "a positive integer" if integer else "a positive finite number"
                raise ValueError(f"{name} must be {what}; got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a positive finite number; got {value!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 batches; got {self.prefetch}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(
                f"label_smoothing must be in [0, 1); got {self.label_smoothing}"
            )
        check_precision(self.precision)


def init_distributed(device: torch.device) -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment; joins the process group once."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(
        os.environ.get("WORLD_SIZE", 1)
    )
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world_size


@torch.no_grad()
def validation_loss(
    model: Transformer,
    split: TokenizedSplit,
    max_tokens: int,
    dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Loss per target token of a split (no label smoothing), and its perplexity."""
    if not len(split):
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


class Trainer:
    """Trains `model` on `data` (see prepare_data) as `config` says; outputs go to `out`.

    optimizer and schedule default to make_optimizer's Adam and the paper's schedule.
    overwrite: delete another run's files in `out` before training (see check_output_folder).
    """

    def __init__(
        self,
        model: Transformer,
        data: PreparedData,
        config: TrainingConfig,
        out: str | Path,
        optimizer: torch.optim.Optimizer | None = None,
        schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
        overwrite: bool = False,
    ):
        self.config, self.out, self.data = config, Path(out), data
        self.overwrite, self.owns_out = overwrite, False  # owns_out: out holds this run
        self.device = pick_device(config.device)
        self.rank, self.world_size = init_distributed(self.device)
        vocab = data.tokenizer.get_vocab_size()
        if min(model.config.src_vocab_size, model.config.tgt_vocab_size) < vocab:
            raise ValueError(
                f"the model's vocabularies ({model.config.src_vocab_size}, "
                f"{model.config.tgt_vocab_size}) must hold the tokenizer's {vocab} ids"
            )
        self.model = model.to(self.device)
        if self.device.type == "cpu":
            keep_freed_memory()
        torch.manual_seed(
            config.seed + self.rank
        )  # different dropout masks on every rank
        if optimizer is None:
            optimizer, schedule = make_optimizer(
                model, model.config.d_model, config.warmup_steps, config.lr_scale
            )
        self.optimizer, self.schedule = optimizer, schedule
        self.dtype = autocast_dtype(config.precision, self.device)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.dtype == torch.float16
        )
        self.compile = (
            config.compile if config.compile is not None else self.device.type == "cuda"
        )
        self.pad_multiple = config.pad_multiple or (8 if self.compile else 1)
        self.sampler = self._sampler()
        self.step, self.epoch, self.batch_index = 0, 0, 0
        self.network: nn.Module = self.model
        if self.world_size > 1:
            self.network = nn.parallel.DistributedDataParallel(
                self.model,
                device_ids=[self.device] if self.device.type == "cuda" else None,
            )
        self.forward_loss = torch.compile(self._loss) if self.compile else self._loss
        self._stream: Iterator[tuple[Batch, int, int]] | None = None

    def _sampler(self) -> TokenBatchSampler:
        """This rank's batches: max_tokens per update, split over ranks and accumulation."""
        config, parts = self.config, self.world_size * self.config.accumulate
        try:
            return TokenBatchSampler(
                self.data.train.lengths(),
                config.max_tokens // parts,
                seed=config.seed,
                rank=self.rank,
                world_size=self.world_size,
                pad_multiple=self.pad_multiple,
            )
        except ValueError as error:
            raise ValueError(
                f"max_tokens={config.max_tokens} per update, over {self.world_size} process(es) "
                f"x {config.accumulate} accumulated batch(es), leaves "
                f"{config.max_tokens // parts} per batch: {error}"
            ) from error

    @classmethod
    def from_config(
        cls,
        model_config: TransformerConfig,
        config: TrainingConfig,
        out: str | Path,
        state: dict | None = None,
        overwrite: bool = False,
        resumed_from: Path | None = None,
    ) -> Trainer:
        """Check the output folder, prepare the data, build the model (vocabulary from the
        tokenizer), and a Trainer. resumed_from: the folder of the checkpoint `state`.
        """
        own = resumed_from is not None and resumed_from.resolve() == Path(out).resolve()
        if init_distributed(pick_device(config.device))[0] == 0:  # rank 0 writes
            check_output_folder(Path(out), own, overwrite)
        tokenizer = Tokenizer.from_str(state["tokenizer"]) if state is not None else None
        data = prepare_data(
            config.data,
            config.src_lang,
            config.tgt_lang,
            config.vocab_size,
            tokenizer,
            config.cache_dir,
        )
        vocab = data.tokenizer.get_vocab_size()
        model_config = replace(
            model_config, src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=PAD
        )
        torch.manual_seed(config.seed)  # the same initial model on every rank
        trainer = cls(Transformer(model_config), data, config, out, overwrite=overwrite)
        trainer.owns_out = own
        if state is not None:
            trainer._load_state(state)
        return trainer

    @classmethod
    def resume(
        cls,
        path: str | Path,
        out: str | Path | None = None,
        overwrite: bool = False,
        **overrides,
    ) -> Trainer:
        """Continue the run of a checkpoint (or of the newest checkpoint in a folder), in
        its folder or in `out`."""
        path = Path(path)
        if path.is_dir():
            found = sorted(path.glob("checkpoint-*.pt"))
            if not found:
                raise FileNotFoundError(f"no checkpoint-*.pt in {path}")
            path = found[-1]
        state = load_checkpoint(path)
        if "optimizer" not in state:
            raise ValueError(
                f"{path} holds model weights only (an average of checkpoints?); it can "
                "translate and be evaluated, but a run resumes from a checkpoint of training"
            )
        config = replace(TrainingConfig(**state["training_config"]), **overrides)
        model_config = TransformerConfig(**state["model_config"])
        return cls.from_config(
            model_config, config, out or path.parent, state, overwrite, path.parent
        )

    def _all_ranks(self, value: Tensor) -> list[Tensor]:
        if self.world_size == 1:
            return [value]
        gathered = [torch.empty_like(value) for _ in range(self.world_size)]
        dist.all_gather(gathered, value)
        return gathered

    def state(self) -> dict:
        """Everything a resumed run needs (gathered from every rank: call it on all of them)."""
        rng = self._all_ranks(torch.get_rng_state().to(self.device))
        cuda_rng = (
            self._all_ranks(torch.cuda.get_rng_state(self.device).to(self.device))
            if self.device.type == "cuda"
            else []
        )
        return {
            "model_config": self.model.config.to_dict(),
            "training_config": asdict(self.config),
            "tokenizer": self.data.tokenizer.to_str(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "rng": [r.cpu() for r in rng],
            "cuda_rng": [r.cpu() for r in cuda_rng],
        }

    def save(self) -> Path:
        """Write checkpoint-STEP.pt in the output folder and delete all but the newest keep_checkpoints."""
        state = self.state()
        path = self.out / f"checkpoint-{self.step:08d}.pt"
        if self.rank == 0:
            save_checkpoint(state, path)
            for old in sorted(self.out.glob("checkpoint-*.pt"))[
                : -self.config.keep_checkpoints
            ]:
                old.unlink()
        return path

    def _load_state(self, state: dict) -> None:
        if len(state["rng"]) != self.world_size:
            raise ValueError(
                f"the checkpoint was written by {len(state['rng'])} process(es); resume it "
                f"with as many, not {self.world_size} (the data shards and random streams depend on it)"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.batch_index = (
            state["step"],
            state["epoch"],
            state["batch_index"],
        )
        torch.set_rng_state(state["rng"][self.rank])
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"][self.rank], self.device)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _attention_kernel(self) -> contextlib.AbstractContextManager:
        """On a CPU, PyTorch's fused attention kernel is slower in the backward pass than the
        written-out softmax(QK^T / sqrt(d_k)) V for sentence-length inputs (see 'Where a step's
        time goes'), so training there uses the written-out one."""
        if self.device.type != "cpu":
            return contextlib.nullcontext()
        return sdpa_kernel(SDPBackend.MATH)

    def _loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        """The summed label-smoothed loss of one batch (what torch.compile compiles)."""
        with self._autocast(), self._attention_kernel():
            logits = self.network(src, tgt_in, check_ids=False)
        return label_smoothed_loss(logits, tgt_out, self.config.label_smoothing)

    def _next_batch(self) -> Batch:
        if self._stream is None:
            self._stream = iter(
                BatchStream(
                    self.data.train,
                    self.sampler,
                    self.epoch,
                    self.batch_index,
                    self.pad_multiple,
                    self.config.prefetch,
                    self.device.type == "cuda",
                )
            )
        batch, self.epoch, self.batch_index = next(self._stream)
        return batch.to(self.device)

    def train_step(self) -> tuple[Tensor, int]:
        """One update. Returns this process's summed label-smoothed loss, a tensor left on
        the device (reading it would make the host wait), and its number of target tokens.
        """
        self.network.train()
        batches = [self._next_batch() for _ in range(self.config.accumulate)]
        n_tokens = sum(batch.n_tokens for batch in batches)
        total: Tensor | int = n_tokens
        if self.world_size > 1:  # the target tokens of the whole update, on every rank
            total = torch.tensor(float(n_tokens), device=self.device)
            dist.all_reduce(total)
        loss_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            no_sync = self.world_size > 1 and not last
            with self.network.no_sync() if no_sync else contextlib.nullcontext():
                loss = self.forward_loss(batch.src, batch.tgt_in, batch.tgt_out)
                # DDP averages gradients over ranks; times world_size they sum over all tokens
                self.scaler.scale(loss * (self.world_size / total)).backward()
            loss_sum += loss.detach()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.step += 1
        return loss_sum, n_tokens

    def validate(self) -> dict[str, float]:
        """Validation loss per target token (no label smoothing) and perplexity."""
        if self.data.valid is None:
            return {}
        return validation_loss(
            self.model, self.data.valid, self.sampler.max_tokens, self.dtype
        )

    def exact_match(
        self, pairs: list[tuple[str, str]] | None = None, beam_size: int = 1
    ) -> float:
        """Fraction of pairs (default: the test split) translated exactly as the reference."""
        pairs = self.data.test if pairs is None else pairs
        sources = [src for src, _ in pairs]
        hypotheses = translate(
            self.model, self.data.tokenizer, sources, beam_size=beam_size
        )
        return sum(h == ref for h, (_, ref) in zip(hypotheses, pairs)) / len(pairs)

    def fit(self, progress: bool = True) -> dict[str, float]:
        """Train until max_steps or max_minutes; returns the last metrics. Ctrl-C stops after
        the current step with a checkpoint. The loop is train_loop, below; rank 0 holds the
        folder's lock, and forgets the metrics of steps a resumed run repeats."""
        if self.rank != 0:
            return train_loop(self, progress)
        check_output_folder(self.out, self.owns_out, self.overwrite)
        self.out.mkdir(parents=True, exist_ok=True)
        with folder_lock(self.out):
            check_output_folder(self.out, self.owns_out, self.overwrite, remove=True)
            self.owns_out = True
            metrics = self.out / "metrics.jsonl"
            if metrics.exists():  # complete lines of the steps up to this one
                lines = metrics.read_text(encoding="utf-8").splitlines(keepends=True)
                kept = [
                    x
                    for x in lines
                    if x.endswith("\n") and json.loads(x)["step"] <= self.step
                ]
                if kept != lines:
                    metrics.with_name("metrics.jsonl.tmp").write_text("".join(kept))
                    metrics.with_name("metrics.jsonl.tmp").replace(metrics)
            return train_loop(self, progress)

    def _log(self, record: dict) -> None:
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / "metrics.jsonl", "a") as file:
                file.write(json.dumps(record) + "\n")

    def _decide(self, started: float, last_checkpoint: float) -> tuple[bool, bool]:
        """(stop now, checkpoint now). Several processes compare rank 0's clock at logging
        intervals only, since agreeing on it is a collective operation."""
        config, now = self.config, time.perf_counter()
        stop = config.max_steps is not None and self.step >= config.max_steps
        due = bool(config.checkpoint_every) and self.step > 0
        due = due and self.step % config.checkpoint_every == 0
        if self.world_size == 1 or self.step % config.log_every == 0:
            minutes = (now - started) / 60
            over = config.max_minutes is not None and minutes >= config.max_minutes
            late = now - last_checkpoint >= 60 * config.checkpoint_minutes
            if self.world_size > 1:
                flags = torch.tensor([float(over), float(late)], device=self.device)
                dist.broadcast(flags, 0)
                over, late = bool(flags[0]), bool(flags[1])
            stop, due = stop or over, due or late
        return stop, due


@contextlib.contextmanager
def deferred_signals(enabled: bool = True) -> Iterator[list[int]]:
    """Within the block, SIGINT and SIGTERM append their number to the yielded list instead
    of interrupting; a second one raises KeyboardInterrupt. Off when not enabled, or off the
    main thread (where Python cannot set handlers)."""
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


def train_loop(trainer: Trainer, progress: bool = True) -> dict[str, float]:
    """Train until max_steps, max_minutes or a signal; returns the last metrics (Trainer.fit
    calls it). After SIGINT or SIGTERM the result has "interrupted": the signal's number.
    """
    started = time.perf_counter()
    show = progress and trainer.rank == 0
    plain = show and not sys.stderr.isatty()  # a log file: lines, not a redrawn bar
    bar = tqdm(
        total=trainer.config.max_steps,
        initial=trainer.step,
        unit="step",
        disable=not show or plain,
    )
    try:
        with deferred_signals(trainer.world_size == 1) as received:
            metrics = _run_steps(trainer, bar, started, received, plain)
    finally:
        bar.close()
        if trainer._stream is not None:
            trainer._stream.close()
            trainer._stream = None
    if received:
        saved = trainer.out / f"checkpoint-{trainer.step:08d}.pt"
        if not saved.exists():
            saved = trainer.save()
        print(
            f"interrupted at step {trainer.step}; saved {saved}; "
            f"continue with --resume {trainer.out}"
        )
        return {**metrics, "step": trainer.step, "interrupted": received[0]}
    trainer.save()
    final = {
        "step": trainer.step,
        "minutes": (time.perf_counter() - started) / 60,
        **trainer.validate(),
    }
    trainer._log(final)
    return {**metrics, **final}


def _run_steps(
    trainer: Trainer, bar: tqdm, started: float, received: list[int], plain: bool
) -> dict[str, float]:
    """Decide, checkpoint if due, step; at intervals read the loss back, log, validate."""
    last_checkpoint = window_start = time.perf_counter()
    window = torch.zeros(2, dtype=torch.float64, device=trainer.device)  # loss, tokens
    metrics: dict[str, float] = {}
    while not received:
        stop, checkpoint_due = trainer._decide(started, last_checkpoint)
        if checkpoint_due and not stop:
            trainer.save()
            last_checkpoint = time.perf_counter()
        if stop:
            break
        loss_sum, n_tokens = trainer.train_step()
        window[0] += loss_sum
        window[1] += n_tokens
        bar.update(1)
        step, config = trainer.step, trainer.config
        if step % config.log_every == 0 or step == config.max_steps:
            if trainer.world_size > 1:
                dist.all_reduce(window)
            loss, tokens = window.tolist()  # the only read-back of the loss
            metrics = {
                "step": step,
                "loss": loss / tokens,
                "lr": trainer.schedule.get_last_lr()[0],
                "tokens_per_s": tokens / (time.perf_counter() - window_start),
                "minutes": (time.perf_counter() - started) / 60,
            }
            bar.set_postfix(
                loss=f"{metrics['loss']:.3f}",
                lr=f"{metrics['lr']:.2e}",
                tok_s=f"{metrics['tokens_per_s']:,.0f}",
            )
            trainer._log(metrics)
            if plain:
                print(
                    f"step {step}: loss {metrics['loss']:.3f}, lr {metrics['lr']:.2e}, "
                    f"{metrics['tokens_per_s']:,.0f} tokens/s, {metrics['minutes']:.1f} min",
                    flush=True,
                )
            window.zero_()
            window_start = time.perf_counter()
        if step % config.eval_every == 0:
            evaluation = {"step": step, **trainer.validate()}
            trainer._log(evaluation)
            metrics = {**metrics, **evaluation}
    return metrics


def train_once(
    model_config: TransformerConfig,
    config: TrainingConfig,
    cache_dir: str | Path | None = None,
    progress: bool = False,
) -> tuple[Trainer, dict[str, float]]:
    """Train a run, or reload it if this code trained the same configurations before.

    The run lives in cache_dir (default: default_cache_dir()) / "runs" / a fingerprint of both
    configurations and the package's source. Returns the trainer at the end of the run and
    what its fit returned.
    """
    source = "".join(
        p.read_text() for p in sorted(Path(transformer.__file__).parent.glob("*.py"))
    )
    settings = json.dumps([model_config.to_dict(), asdict(config)], sort_keys=True)
    key = hashlib.sha256(f"{settings}\0{source}".encode()).hexdigest()[:16]
    out = Path(cache_dir or default_cache_dir()) / "runs" / key
    record = out / "result.json"
    if record.is_file():
        return Trainer.resume(out), json.loads(record.read_text())
    trainer = Trainer.from_config(model_config, config, out, overwrite=True)
    result = trainer.fit(progress)
    if "interrupted" not in result:  # written last: a run cut short is trained again
        record.with_suffix(".tmp").write_text(json.dumps(result))
        record.with_suffix(".tmp").replace(record)
    return trainer, result


def small_number_run() -> tuple[TransformerConfig, TrainingConfig]:
    """The book's small model of the number corpus and its run (the Training chapter)."""
    model_config = TransformerConfig(
        d_model=128, n_heads=4, d_ff=512, n_layers=3, dropout=0.1
    )
    training_config = TrainingConfig(
        data="numbers",
        vocab_size=200,
        max_tokens=2000,
        max_steps=600,
        warmup_steps=200,
        lr_scale=0.5,
        eval_every=100,
        log_every=20,
        precision="fp32",
        checkpoint_every=50,
        checkpoint_minutes=1e9,
    )
    return model_config, training_config


__all__ = ['save_checkpoint', 'load_checkpoint', 'load_model', 'check_output_folder', 'folder_lock', 'pick_device', 'cpu_bf16_speedup', 'check_precision', 'autocast_dtype', 'keep_freed_memory', 'TrainingConfig', 'init_distributed', 'validation_loss', 'Trainer', 'deferred_signals', 'train_loop', 'train_once', 'small_number_run']
