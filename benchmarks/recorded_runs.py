"""Short runs and the decisions of a run, recorded bit for bit: the oracle of a change that
must not change what a run does (issue 95: the settings of a run gathered into one plan).

Each run is the command line users type (`python -m transformer train`, in this process),
bounded in steps, fp32, seed 0, logging every update: its losses (as the float's hex, every
bit), its final validation loss and a SHA-256 of its final weights. The decisions are those a
plain command takes on each kind of machine: the precision and the compiled step (the device
faked where it is not here: a CPU with and without native bf16, CUDA cards of compute
capability 6.0 to 9.0), and the tiny preset's batch and P_drop for a budget of minutes alone,
from a timed update faked to given seconds (the run then stops on its clock at once).

    python benchmarks/recorded_runs.py --data ../shared/data/multi30k \\
        --out benchmarks/results/recorded_runs_before.json
    python benchmarks/recorded_runs.py --data ../shared/data/multi30k \\
        --compare benchmarks/results/recorded_runs_before.json \\
        --out benchmarks/results/recorded_runs_after.json

--compare exits 1 and names each difference when a run's bits or a decision differ.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_report  # noqa: E402

from transformer import cli  # noqa: E402
from transformer.checkpoints import training_checkpoint  # noqa: E402

RUNS = {  # name: the options of `train` beyond --out, --precision fp32, --seed 0
    "numbers_small_40": ["--max-steps", "40", "--log-every", "1"],
    "numbers_small_planned_30": ["--max-steps", "30", "--schedule", "planned",
                                 "--log-every", "1"],
    "numbers_small_cooldown_30": ["--max-steps", "30", "--cooldown", "0.3",
                                  "--log-every", "1"],
    "numbers_tiny_accumulate_20": ["--preset", "tiny", "--max-steps", "20",
                                   "--accumulate", "2", "--max-tokens", "2048",
                                   "--log-every", "1"],
}
TEXT_RUNS = {"multi30k_tiny_20": ["--max-steps", "20", "--log-every", "1"]}
SECONDS = (0.0004, 0.001, 0.004, 0.02)  # a faked update of the tiny preset: its budget's
MINUTES = 0.02  # updates 3,000, 1,200, 300 and 60: kept, kept, halved, halved


def run(options: list[str], folder: Path) -> dict:
    """One run of `train`: each update's loss, the final validation loss, the weights."""
    out = folder / "run"
    code = cli.main(["train", *options, "--precision", "fp32", "--seed", "0",
                     "--out", str(out), "--overwrite"])
    assert code == 0, f"train {options} exited {code}"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines if "loss" in x]
    final = [x for x in lines if "val_loss" in x][-1]
    state, _ = training_checkpoint(out)
    digest = hashlib.sha256()
    for name, tensor in sorted(state["model"].items()):
        digest.update(name.encode() + tensor.cpu().contiguous().numpy().tobytes())
    return {"losses": [float(x).hex() for x in losses], "val_loss": final["val_loss"],
            "weights_sha256": digest.hexdigest(), "steps": state["step"]}


def fake_cuda(capability: tuple[int, int]) -> contextlib.ExitStack:
    """torch as it reports a CUDA card of `capability` (bf16 emulated below 8.0, as torch's
    is_bf16_supported says by default)."""
    stack = contextlib.ExitStack()
    native = capability >= (8, 0)
    stack.enter_context(mock.patch("torch.cuda.is_available", return_value=True))
    stack.enter_context(mock.patch("torch.cuda.device_count", return_value=1))
    stack.enter_context(mock.patch("torch.cuda.get_device_capability",
                                   return_value=capability))
    stack.enter_context(mock.patch(
        "torch.cuda.is_bf16_supported",
        side_effect=lambda including_emulation=True: native or including_emulation))
    return stack


def compiled(devices, device: torch.device, dtype: torch.dtype | None) -> bool:
    """default_compile's answer: of the device alone before issue 95, of the device and
    the precision, with a reason, after."""
    name = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    try:
        answer = devices.default_compile(device, name)
    except TypeError:
        answer = devices.default_compile(device)
    return answer[0] if isinstance(answer, tuple) else answer


def device_decisions() -> dict:
    """The precision and compile that `--precision auto` and the default give on each kind
    of device, from the package's own decision (devices.py)."""
    from transformer import devices

    found = {}
    for name, speedup in (("cpu_native_bf16", 3.0), ("cpu_emulated_bf16", 0.05)):
        with mock.patch.object(devices, "cpu_bf16_speedup", return_value=speedup):
            dtype = devices.autocast_dtype("auto", torch.device("cpu"))
        found[name] = {"dtype": str(dtype),
                       "compile": compiled(devices, torch.device("cpu"), dtype)}
    for capability in ((6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0)):
        with fake_cuda(capability):
            dtype = devices.autocast_dtype("auto", torch.device("cuda", 0))
            compile = compiled(devices, torch.device("cuda", 0), dtype)
        found[f"cuda_{capability[0]}.{capability[1]}"] = {"dtype": str(dtype),
                                                          "compile": compile}
    return found


def budget_decisions(folder: Path) -> dict:
    """The tiny preset's batch and P_drop on the number corpus for a budget of MINUTES
    alone, its update faked to each of SECONDS (and with a batch and a P_drop given)."""
    from transformer import trainer

    # the update's timer: a method of the Trainer before issue 110, a function beside it after
    timer = ((trainer.Trainer, "time_update") if hasattr(trainer.Trainer, "time_update")
             else (trainer, "time_update"))
    found = {}
    for seconds in SECONDS:
        for extra in ([], ["--max-tokens", "4096"], ["--dropout", "0.2"]):
            out = folder / "fitted"
            with mock.patch.object(*timer, return_value=seconds):
                code = cli.main(["train", "--preset", "tiny", "--max-minutes",
                                 str(MINUTES), "--precision", "fp32", "--out", str(out),
                                 "--overwrite", *extra])
            assert code == 0
            state, _ = training_checkpoint(out)
            key = f"{seconds}s {' '.join(extra) or 'plain'}"
            found[key] = {"max_tokens": state["training_config"]["max_tokens"],
                          "dropout": state["model_config"]["dropout"],
                          "schedule": state["training_config"]["schedule"]}
    return found


def compare(before: dict, after: dict) -> list[str]:
    """Each difference between two records' runs and decisions, in words."""
    differences = []
    for part in ("runs", "devices", "budgets"):
        for name, old in before[part].items():
            new = after[part].get(name)
            if new != old:
                differences.append(f"{part} {name}: {old} before, {new} after")
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a Multi30k folder (train.en.gz ...); else skipped")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", help="a record of this script to compare with")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the same bits on any machine of the same CPU kind
    runs = dict(RUNS)
    if args.data:
        runs |= {name: ["--data", args.data, *options] for name, options in TEXT_RUNS.items()}
    with tempfile.TemporaryDirectory() as folder:
        results = {"runs": {name: run(options, Path(folder)) for name, options in
                            runs.items()},
                   "devices": device_decisions(),
                   "budgets": budget_decisions(Path(folder))}
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        results["compared_with"] = {"record": args.compare, "commit": before["git"],
                                    "differences": compare(before, results)}
    write_report(Path(args.out), results)
    differences = results.get("compared_with", {}).get("differences", [])
    for line in differences:
        print(line)
    print(f"{len(runs)} runs, {len(differences)} differences" if args.compare
          else f"{len(runs)} runs recorded")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
