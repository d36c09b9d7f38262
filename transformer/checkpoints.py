# Generated from book/checkpoints.md by tools/export.py: edit the chapter.
"""Checkpoints: written atomically, read back with checks, one run per folder, and
averaged (§6.1)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from transformer.files import write_atomically
from transformer.model import Transformer, TransformerConfig


CHECKPOINT_FORMAT = "transformer-checkpoint-v1"


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` atomically and durably (write_atomically)."""
    try:
        return write_atomically(
            path, lambda file: torch.save({"format": CHECKPOINT_FORMAT, **state}, file)
        )
    except (OSError, RuntimeError) as error:  # torch: a full disk is a RuntimeError
        raise OSError(
            f"could not write {path} ({error}); "
            "the checkpoints written before it are intact"
        ) from error


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False
) -> dict:
    """Read a checkpoint written by save_checkpoint, unpickling no arbitrary objects.
    mmap: map its tensors from the file instead of reading them (cheap when only its
    settings are wanted)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(
            path, map_location=map_location, weights_only=True, mmap=mmap
        )
    except Exception as error:  # a truncated zip, a foreign pickle, ...: all unreadable
        # torch's first sentence, or the error's name where it says nothing (EOFError)
        reason = (str(error).splitlines() or [type(error).__name__])[0].split(". ")[0]
        raise ValueError(
            f"{path} is not a readable checkpoint (truncated or corrupt?): {reason}"
        ) from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = sorted(state)[:5] if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{path} is not a transformer checkpoint "
            f"(expected format {CHECKPOINT_FORMAT!r}); found {found}"
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


def newest_checkpoints(folder: str | Path, n: int | None = None) -> list[Path]:
    """The newest `n` (default: all) checkpoint-STEP.pt of a run's folder, oldest
    first."""
    found = sorted(Path(folder).glob("checkpoint-*.pt"))
    return found if n is None else found[max(len(found) - n, 0):]


def checkpoint_path(folder: str | Path, step: int) -> Path:
    """The checkpoint of step `step` in a run's folder: checkpoint-STEP.pt."""
    return Path(folder) / f"checkpoint-{step:08d}.pt"


def keep_newest_checkpoints(folder: str | Path, n: int) -> None:
    """Delete all but the newest `n` checkpoint-STEP.pt of a run's folder."""
    if n < 0:
        raise ValueError(f"the checkpoints to keep must be 0 or more, not {n}")
    found = newest_checkpoints(folder)
    for old in found[: max(len(found) - n, 0)]:
        old.unlink()


def training_checkpoint(path: str | Path) -> tuple[dict, Path]:
    """The state of a checkpoint to resume (`path`, or the newest one in the folder
    `path`) and its path."""
    path = Path(path)
    if path.is_dir():
        found = newest_checkpoints(path, 1)
        if not found:
            raise FileNotFoundError(f"no checkpoint-*.pt in {path}")
        path = found[0]
    state = load_checkpoint(path)
    if "optimizer" not in state:
        raise ValueError(
            f"{path} holds model weights only (an average of checkpoints?); it can "
            "translate and be evaluated, but a run resumes from a checkpoint of "
            "training"
        )
    return state, path


def check_output_folder(
    out: Path, own: bool = False, overwrite: bool = False, remove: bool = False
) -> None:
    """Raise unless `out` can hold this run's files: not a file, writable, and without
    another run's checkpoints or metrics (own: this run resumes from `out`). With
    overwrite and remove, another run's files are deleted."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"the output folder {out} is a file")
    existing = next(p for p in [out, *out.parents] if p.exists())  # made later if new
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"the output folder {out} cannot be written ({existing})")
    # checkpoint-STEP.pt (and a .tmp left by a crash), the final model
    # checkpoint_average.pt, the metrics
    found = sorted(out.glob("checkpoint[-_]*.pt*")) + sorted(out.glob("metrics.jsonl"))
    if found and not own and not overwrite:
        raise FileExistsError(
            f"{out} holds another run's files "
            f"({', '.join(p.name for p in found[-2:])}, {len(found)} in all): "
            f"continue it with --resume {out}, choose another --out, "
            "or give --overwrite to delete them first"
        )
    if found and not own and remove:
        for path in found:
            path.unlink()


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on out/.lock (POSIX flock), or raise BlockingIOError
    naming the process that holds it."""
    import fcntl  # POSIX only: the lock is where the run is, on Linux and macOS

    with open(out / ".lock", "a+") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            raise BlockingIOError(
                f"another run (process {file.read().strip() or '?'}) "
                f"is training in {out}"
            ) from None
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def last_checkpoints(folder: str | Path, n: int) -> list[Path]:
    """newest_checkpoints(folder, n), which must find n."""
    found = newest_checkpoints(folder, n)
    if n < 1 or len(found) < n:
        held = len(newest_checkpoints(folder))
        raise ValueError(
            f"asked for the last {n} checkpoints of {folder}; it holds {held}"
        )
    return found


def average_checkpoints(paths: Sequence[str | Path]) -> dict:
    """The element-wise mean of the model weights of checkpoints of one run (§6.1)."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    first = load_checkpoint(paths[0])
    total = {name: w.double() for name, w in first["model"].items()}
    last = first
    for path in paths[1:]:
        state = last = load_checkpoint(path)
        if (state["model_config"], state["tokenizer"]) != (
            first["model_config"],
            first["tokenizer"],
        ):
            raise ValueError(
                f"{path} has another model configuration or tokenizer than {paths[0]}: "
                "only checkpoints of one training run can be averaged"
            )
        for name, w in state["model"].items():
            total[name] += w.double()
    return {
        "model_config": first["model_config"],
        "tokenizer": first["tokenizer"],
        "model": {
            name: (w / len(paths)).to(first["model"][name].dtype)
            for name, w in total.items()
        },
        "step": last["step"],
        # the run's settings, as its last checkpoint has them (evaluate reads its data)
        "training_config": last.get("training_config"),
        "averaged_from": [str(p) for p in paths],
    }


AVERAGE = "checkpoint_average.pt"


def write_final_model(folder: str | Path, n: int = 5) -> tuple[Path, str]:
    """Average the newest n checkpoints of the last third of a run into
    folder/AVERAGE. Returns the final model's path and a line saying which checkpoints
    went in, or why the newest checkpoint is the final model."""
    found = newest_checkpoints(folder)
    if not found:
        raise FileNotFoundError(f"no checkpoint-STEP.pt in {folder}")
    step = {path: int(path.stem.removeprefix("checkpoint-")) for path in found}
    late = [path for path in found if 3 * step[path] >= 2 * step[found[-1]]][-n:]
    if n < 2 or len(late) < 2:
        (Path(folder) / AVERAGE).unlink(missing_ok=True)
        why = (
            "averaging is off" if n < 2 else "fewer than 2 in the last third of the run"
        )
        return found[-1], f"final model: {found[-1].name} ({why})"
    path = save_checkpoint(average_checkpoints(late), Path(folder) / AVERAGE)
    steps = ", ".join(str(step[p]) for p in late)
    note = f"final model: {AVERAGE}, the average of the checkpoints of steps {steps}"
    return path, note


def final_model(folder: str | Path) -> Path:
    """The model a run folder stands for: its average, if no checkpoint is newer (or
    none is left: deleted to save space)."""
    average = Path(folder) / AVERAGE
    newest = newest_checkpoints(folder, 1)  # none or one
    if average.is_file() and all(average.stat().st_mtime >= p.stat().st_mtime
                                 for p in newest):
        return average
    return last_checkpoints(folder, 1)[0]  # raises, naming the folder, if it has none


__all__ = [
    'save_checkpoint',
    'load_checkpoint',
    'load_model',
    'newest_checkpoints',
    'checkpoint_path',
    'keep_newest_checkpoints',
    'training_checkpoint',
    'check_output_folder',
    'folder_lock',
    'last_checkpoints',
    'average_checkpoints',
    'write_final_model',
    'final_model',
]
