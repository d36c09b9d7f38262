"""The README's commands on a fresh clone, timed: what a new user waits for.

Clones the repository's committed HEAD into a new folder beside it, with ../shared linked
beside the clone as CI has it, no virtual environment, an empty cache of tokenized corpora and
trained runs (TRANSFORMER_CACHE) and of compiled kernels (TORCHINDUCTOR_CACHE_DIR: CI compiles
from nothing), runs the commands in order, and records each one's wall time,
exit status and last lines of output. pip's own download cache is the user's, as on any machine
that installed these packages before.

    T=".venv/bin/python -m transformer train --preset small --max-steps 1000 --out runs/numbers --overwrite"
    python benchmarks/fresh_clone.py --commands "make install" "make test" "make book" \\
        "make train" "$T --seed 1" "$T --seed 2" --out benchmarks/results/fresh_clone.json

After `make train`, its command runs with two other seeds: the same run repeats exactly on
one machine, and a seed changes the initial weights and the dropout masks as another
machine's rounding changes the run in effect. The summary line of each ("done: ... exact
match on the test split ...") is recorded.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from report import write_report

REPO = Path(__file__).resolve().parent.parent


def run(command: str, cwd: Path, env: dict[str, str], log: Path | None) -> dict:
    print(f"$ {command}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    # the clone's temporary folder is no path of the repository's: CLONE stands for it
    output = done.stdout.replace(str(cwd), "CLONE").splitlines()
    errors = done.stderr.replace(str(cwd), "CLONE").splitlines()
    if log is not None:  # the whole output, for what the record's last lines leave out
        with log.open("a") as file:
            file.write("\n".join([f"$ {command}", *output, *errors, ""]))
    result = {"command": command, "seconds": round(seconds, 1), "returncode": done.returncode,
              "tail": output[-5:] + (errors[-5:] if done.returncode else [])}
    exact = [m for line in output if (m := re.search(r"exact match on the test split ([\d.]+)%", line))]
    if exact:
        result["exact_match"] = round(float(exact[-1].group(1)) / 100, 4)
    print(f"  exit {done.returncode} after {seconds / 60:.1f} min", *result["tail"], sep="\n  ", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", nargs="+", required=True, help="shell commands run in order in the clone")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    parser.add_argument("--log", type=Path, help="a file to append every command's whole output to")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix=".fresh-clone-", dir=REPO.parent))
    try:
        clone = work / "repo"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        shared = REPO.parent / "shared"  # as CI has it: ../shared beside the clone
        if shared.is_dir():
            (work / "shared").symlink_to(shared.resolve())
        env = {**os.environ, "TRANSFORMER_CACHE": str(work / "cache"),
               "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")}
        env.pop("VIRTUAL_ENV", None)
        results = [run(command, clone, env, args.log) for command in args.commands]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_report(args.out, {"cloned_commit": commit, "cpu_count": os.cpu_count(), "runs": results})
    if any(r["returncode"] for r in results):
        raise SystemExit("a command failed: see the record")


if __name__ == "__main__":
    main()
