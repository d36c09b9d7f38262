# Generated from book/training.md by tools/export.py: edit the chapter, not this file.
"""Adam with warm-up, label smoothing, checkpoints and the training loop (§5.2-5.4 of the paper)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor, nn
from tqdm import tqdm

from transformer.data import (
    PAD,
    Batch,
    TokenBatchSampler,
    collate,
    encode_pairs,
    load_corpus,
    pair_lengths,
    train_tokenizer,
)
from transformer.decoding import translate
from transformer.model import Transformer, TransformerConfig


def learning_rate(
    step: int, d_model: int, warmup_steps: int = 4000, scale: float = 1.0
) -> float:
    """scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), the rate of training step `step` >= 1."""
    if step < 1:
        raise ValueError(f"steps are counted from 1; got step={step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def make_optimizer(
    model: nn.Module, d_model: int, warmup_steps: int = 4000, scale: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(0.9, 0.98, 1e-9) and the schedule above; call scheduler.step() after each update."""
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: learning_rate(done + 1, d_model, warmup_steps, scale)
    )
    return optimizer, schedule


def label_smoothed_loss(
    logits: Tensor, target: Tensor, epsilon: float, pad_id: int = PAD
) -> Tensor:
    """Summed cross-entropy against (1 - eps) one-hot + eps / K; logits (batch, m, K), target (batch, m)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ignore_index=pad_id,
        label_smoothing=epsilon,
        reduction="sum",
    )


CHECKPOINT_FORMAT = "transformer-checkpoint-v1"


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` atomically: to PATH.tmp first, then renamed to PATH."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    try:
        torch.save({"format": CHECKPOINT_FORMAT, **state}, temporary)
        os.replace(temporary, path)
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


def pick_device(device: str = "auto") -> torch.device:
    """ "auto": CUDA, then MPS, then CPU; otherwise the named device."""
    if device != "auto":
        return torch.device(device)
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


@dataclass
class TrainingConfig:
    """Settings of a training run. max_tokens is per batch and per side (source, target), per process."""

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
    compile: bool = False
    device: str = "auto"
    seed: int = 0
    log_every: int = 50
    eval_every: int = 500
    checkpoint_minutes: float = 10.0
    checkpoint_every: int | None = None
    keep_checkpoints: int = 5

    def __post_init__(self) -> None:
        if self.max_steps is None and self.max_minutes is None:
            raise ValueError(
                "set max_steps or max_minutes (or both): a run must know when to stop"
            )
        for name in (
            "vocab_size",
            "max_tokens",
            "accumulate",
            "warmup_steps",
            "log_every",
            "eval_every",
            "keep_checkpoints",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive; got {getattr(self, name)}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(
                f"label_smoothing must be in [0, 1); got {self.label_smoothing}"
            )
        check_precision(self.precision)


class Trainer:
    """Trains a Transformer on a corpus; see TrainingConfig. Outputs go to `out`."""

    def __init__(
        self,
        model_config: TransformerConfig,
        config: TrainingConfig,
        out: str | Path,
        state: dict | None = None,
    ):
        self.config, self.out = config, Path(out)
        self.rank = int(os.environ.get("RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        self.device = pick_device(config.device)
        if self.world_size > 1 and not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        self.corpus = load_corpus(config.data, config.src_lang, config.tgt_lang)
        if state is not None:
            tokenizer = [state["tokenizer"]]
        else:  # rank 0 trains the vocabulary, the other ranks receive it
            tokenizer = [
                (
                    train_tokenizer(self.corpus.texts(), config.vocab_size).to_str()
                    if self.rank == 0
                    else None
                )
            ]
            if self.world_size > 1:
                dist.broadcast_object_list(tokenizer, 0)
        self.tokenizer = Tokenizer.from_str(tokenizer[0])
        vocab = self.tokenizer.get_vocab_size()
        self.model_config = replace(
            model_config, src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=PAD
        )
        torch.manual_seed(config.seed)  # the same initial model on every rank
        self.model = Transformer(self.model_config).to(self.device)
        torch.manual_seed(
            config.seed + self.rank
        )  # different dropout masks on every rank
        self.optimizer, self.schedule = make_optimizer(
            self.model, self.model_config.d_model, config.warmup_steps, config.lr_scale
        )
        self.dtype = autocast_dtype(config.precision, self.device)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.dtype == torch.float16
        )
        self.train_pairs = encode_pairs(self.tokenizer, self.corpus.splits["train"])
        self.val_pairs = encode_pairs(
            self.tokenizer, self.corpus.splits.get("val", [])[:5000]
        )
        self.sampler = TokenBatchSampler(
            pair_lengths(self.train_pairs),
            config.max_tokens,
            seed=config.seed,
            rank=self.rank,
            world_size=self.world_size,
        )
        self.step, self.epoch, self.batch_index = 0, 0, 0
        if state is not None:
            self._load_state(state)
        self.network: nn.Module = self.model
        if self.world_size > 1:
            self.network = nn.parallel.DistributedDataParallel(
                self.model,
                device_ids=[self.device] if self.device.type == "cuda" else None,
            )
        if config.compile:
            self.network = torch.compile(self.network)

    @classmethod
    def resume(
        cls, path: str | Path, out: str | Path | None = None, **overrides
    ) -> Trainer:
        """Continue the run of a checkpoint (or of the newest checkpoint in a folder)."""
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
        return cls(
            TransformerConfig(**state["model_config"]),
            config,
            out or path.parent,
            state,
        )

    def _load_state(self, state: dict) -> None:
        if len(state["rng"]) != self.world_size:
            raise ValueError(
                f"the checkpoint was written by {len(state['rng'])} process(es); resume it with as many, "
                f"not {self.world_size} (the data shards and random streams depend on it)"
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

    def _all_ranks(self, value: Tensor) -> list[Tensor]:
        if self.world_size == 1:
            return [value]
        gathered = [torch.empty_like(value) for _ in range(self.world_size)]
        dist.all_gather(gathered, value)
        return gathered

    def state(self) -> dict:
        """Everything a resumed run needs (gathered from every rank: call it on all of them)."""
        rng = self._all_ranks(torch.get_rng_state())
        cuda_rng = (
            self._all_ranks(torch.cuda.get_rng_state(self.device).to(self.device))
            if self.device.type == "cuda"
            else []
        )
        return {
            "model_config": self.model_config.to_dict(),
            "training_config": asdict(self.config),
            "tokenizer": self.tokenizer.to_str(),
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

    def _next_batches(self) -> list[Batch]:
        batches = []
        while len(batches) < self.config.accumulate:
            epoch = self.sampler.epoch(self.epoch)
            if self.batch_index >= len(epoch):
                self.epoch, self.batch_index = self.epoch + 1, 0
                continue
            batches.append(
                collate([self.train_pairs[i] for i in epoch[self.batch_index]]).to(
                    self.device
                )
            )
            self.batch_index += 1
        return batches

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def train_step(self) -> tuple[float, int]:
        """One update; returns (label-smoothed loss per target token, target tokens) over all ranks."""
        self.network.train()
        batches = self._next_batches()
        totals = torch.tensor(
            [sum(b.n_tokens for b in batches), 0.0],
            dtype=torch.float64,
            device=self.device,
        )
        if self.world_size > 1:
            dist.all_reduce(totals[:1])
        n_tokens = totals[0].item()
        loss_sum = 0.0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            sync = (
                contextlib.nullcontext()
                if last or self.world_size == 1
                else self.network.no_sync()
            )
            with sync:
                with self._autocast():
                    logits = self.network(batch.src, batch.tgt_in)
                loss = label_smoothed_loss(
                    logits, batch.tgt_out, self.config.label_smoothing
                )
                # DDP averages gradients over ranks; scaling by world_size makes it a sum over all tokens
                self.scaler.scale(loss * self.world_size / n_tokens).backward()
            loss_sum += loss.item()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.step += 1
        totals[1] = loss_sum
        if self.world_size > 1:
            dist.all_reduce(totals[1:])
        return totals[1].item() / n_tokens, int(n_tokens)

    @torch.no_grad()
    def validate(self, max_tokens: int | None = None) -> dict[str, float]:
        """Validation loss per target token (no label smoothing) and perplexity."""
        if not self.val_pairs:
            return {}
        self.model.eval()
        loss_sum, n_tokens = 0.0, 0
        sampler = TokenBatchSampler(
            pair_lengths(self.val_pairs),
            max_tokens or self.config.max_tokens,
            shuffle=False,
        )
        for indices in sampler.epoch(0):
            batch = collate([self.val_pairs[i] for i in indices]).to(self.device)
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            loss_sum += label_smoothed_loss(logits, batch.tgt_out, 0.0).item()
            n_tokens += batch.n_tokens
        loss = loss_sum / n_tokens
        return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}

    def exact_match(
        self, split: str = "test", limit: int | None = None, beam_size: int = 1
    ) -> float:
        """Fraction of a split's sentences translated exactly as the reference (greedy by default)."""
        pairs = self.corpus.splits[split][:limit]
        sources = [src for src, _ in pairs]
        hypotheses = translate(self.model, self.tokenizer, sources, beam_size=beam_size)
        return sum(h == ref for h, (_, ref) in zip(hypotheses, pairs)) / len(pairs)

    def _log(self, record: dict) -> None:
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / "metrics.jsonl", "a") as file:
                file.write(json.dumps(record) + "\n")

    def _decide(self, started: float, last_checkpoint: float) -> tuple[bool, bool]:
        """(stop now, checkpoint now): rank 0's clock decides for every rank."""
        now = time.perf_counter()
        stop = self.config.max_steps is not None and self.step >= self.config.max_steps
        stop |= (
            self.config.max_minutes is not None
            and (now - started) / 60 >= self.config.max_minutes
        )
        due = (
            bool(self.config.checkpoint_every)
            and self.step > 0
            and self.step % self.config.checkpoint_every == 0
        )
        due |= now - last_checkpoint >= 60 * self.config.checkpoint_minutes
        if self.world_size > 1:
            flags = torch.tensor([float(stop), float(due)], device=self.device)
            dist.broadcast(flags, 0)
            stop, due = bool(flags[0]), bool(flags[1])
        return stop, due

    def fit(self, progress: bool = True) -> dict[str, float]:
        """Train until max_steps or max_minutes; returns the last metrics. Ctrl-C saves a checkpoint first."""
        started = last_checkpoint = time.perf_counter()
        window_tokens, window_start, metrics = 0, time.perf_counter(), {}
        bar = tqdm(
            total=self.config.max_steps,
            initial=self.step,
            disable=not progress or self.rank != 0,
            unit="step",
        )
        try:
            while True:
                stop, checkpoint_due = self._decide(started, last_checkpoint)
                if checkpoint_due and not stop:
                    self.save()
                    last_checkpoint = time.perf_counter()
                if stop:
                    break
                loss, n_tokens = self.train_step()
                window_tokens += n_tokens
                bar.update(1)
                if (
                    self.step % self.config.log_every == 0
                    or self.step == self.config.max_steps
                ):
                    elapsed = time.perf_counter() - window_start
                    metrics = {
                        "step": self.step,
                        "loss": loss,
                        "lr": self.schedule.get_last_lr()[0],
                        "tokens_per_s": window_tokens / elapsed,
                        "minutes": (time.perf_counter() - started) / 60,
                    }
                    bar.set_postfix(
                        loss=f"{loss:.3f}",
                        lr=f"{metrics['lr']:.2e}",
                        tok_s=f"{metrics['tokens_per_s']:,.0f}",
                    )
                    self._log(metrics)
                    window_tokens, window_start = 0, time.perf_counter()
                if self.step % self.config.eval_every == 0:
                    evaluation = {"step": self.step, **self.validate()}
                    self._log(evaluation)
                    metrics = {**metrics, **evaluation}
        except KeyboardInterrupt:
            bar.close()
            if (
                self.world_size == 1
            ):  # under torchrun the other ranks may be gone: keep the last periodic checkpoint
                print(
                    f"interrupted at step {self.step}; saved {self.save()}; continue with --resume {self.out}"
                )
            raise
        bar.close()
        self.save()
        final = {
            "step": self.step,
            "minutes": (time.perf_counter() - started) / 60,
            **self.validate(),
        }
        self._log(final)
        return {**metrics, **final}


__all__ = ['learning_rate', 'make_optimizer', 'label_smoothed_loss', 'save_checkpoint', 'load_checkpoint', 'load_model', 'pick_device', 'cpu_bf16_speedup', 'check_precision', 'autocast_dtype', 'TrainingConfig', 'Trainer']
