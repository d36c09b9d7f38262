# Generated from book/trainer.md, book/results.md by tools/export.py:
# the book's, not the API.
"""The book's cached runs, each trained once then loaded by every chapter that studies
it, and how its records were measured. Not part of the API."""

import fcntl  # POSIX, as the run folder's own lock
import hashlib
import inspect
import json
from dataclasses import asdict
from pathlib import Path

import torch

from transformer.files import write_atomically
from transformer.model import Transformer, TransformerConfig
from transformer.prepared import default_cache_dir
from transformer.plan import TrainingConfig
from transformer.trainer import Trainer


def train_once(
    model_config: TransformerConfig,
    config: TrainingConfig,
    cache_dir: str | Path | None = None,
    progress: bool = False,
) -> tuple[Trainer, dict[str, float]]:
    """Train a run, or reload it if this code trained the same configurations before.

    The run lives in cache_dir (default: default_cache_dir()) / "runs" / a fingerprint
    of both configurations, the package's source and torch's CPU threads (their count
    changes a run's last bits). Returns the trainer at the end of the run and what its
    fit returned.
    """
    source = "".join(
        p.read_text()
        for p in sorted(Path(inspect.getfile(Transformer)).parent.glob("*.py"))
    )
    threads = torch.get_num_threads()
    settings = json.dumps(
        [model_config.to_dict(), asdict(config), threads], sort_keys=True
    )
    key = hashlib.sha256(f"{settings}\0{source}".encode()).hexdigest()[:16]
    out = Path(cache_dir or default_cache_dir()) / "runs" / key
    record = out / "result.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{key}.lock", "a") as lock:
        # two chapters (or tests) opened at once: the second waits for the first's run
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            return Trainer.resume(out), json.loads(record.read_text())
        trainer = Trainer.from_config(model_config, config, out, overwrite=True)
        result = trainer.fit(progress)
        if "interrupted" not in result:  # written last: a run cut short trains again
            write_atomically(record, lambda f: f.write(json.dumps(result).encode()))
    return trainer, result


def small_number_run() -> tuple[TransformerConfig, TrainingConfig]:
    """The book's small model of the number corpus and its run (the Trainer
    chapter)."""
    model_config = TransformerConfig(
        d_model=128, n_heads=4, d_ff=512, n_layers=3, dropout=0.1
    )
    training_config = TrainingConfig(
        data="numbers",
        vocab_size=200,
        max_tokens=1000,
        max_steps=400,
        warmup_steps=200,
        lr_scale=0.5,
        eval_every=100,
        log_every=20,
        precision="fp32",
        checkpoint_every=50,
        checkpoint_minutes=1e9,
    )
    return model_config, training_config


def measured(results: Path, names: list[str]) -> list[dict]:
    """How records were measured, for a chapter's folded note: each record's commit
    (or that it has none: history), machine, PyTorch and the command that wrote it (of
    a record merged from records of one seed each: theirs, then the merge). The
    Multi30k folder of this repository's runs is written as a reader's, data/multi30k,
    where `python -m transformer data multi30k` puts it."""
    rows = []
    for name in names:
        record = json.loads((results / name).read_text())
        git = record.get("git") or record.get("trained", {}).get("git") or {}
        commit = git.get("commit")
        commands = [part["command"] for part in record.get("parts", [])]
        commands.append(record["command"])
        rows.append({
            "record": name,
            "commit": commit[:7] if commit else "none recorded (history)",
            "machine": record["machine"],
            "PyTorch": record.get("torch", "not recorded"),
            "command": "; ".join(commands).replace("../shared/data/", "data/"),
        })
    return rows
