"""The benchmark scripts still run (on tiny inputs; their numbers come from the full runs)."""

import argparse
import ast
import json
import os
import re
import runpy
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_script(script: str, argv: list[str], monkeypatch) -> None:
    """Run benchmarks/SCRIPT as `python SCRIPT ARGV` would, in this process (torch is imported
    already: a new process would spend seconds importing it again); report.py is importable,
    as beside a script."""
    monkeypatch.setattr(sys, "argv", [script, *argv])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / script), run_name="__main__")


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "report.py"))
def test_every_benchmark_has_help(script, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit:
        run_script(script, ["--help"], monkeypatch)
    assert exit.value.code == 0 and "usage:" in capsys.readouterr().out


def test_decoding_speed_compares_every_decoder_with_the_uncached_one(tiny_corpus, tmp_path, monkeypatch):
    """On a run folder of the tiny preset, as a trained model is timed (the script's default, an
    untrained small model, decodes the same way at four times the cost)."""
    from transformer.cli import main

    (tiny_corpus / "test.en").write_text("three\nseven\n")
    (tiny_corpus / "test.de").write_text("drei\nsieben\n")
    run = tmp_path / "run"
    assert main(["train", "--data", str(tiny_corpus), "--max-steps", "1", "--max-tokens", "200", "--vocab-size",
                 "60", "--precision", "fp32", "--out", str(run)]) == 0
    out = tmp_path / "decoding.json"
    run_script("decoding_speed.py", ["--checkpoint", str(run), "--data", str(tiny_corpus), "--sentences", "2",
                                     "--batch-sizes", "2", "--precisions", "fp32", "--repeats", "2",
                                     "--out", str(out)], monkeypatch)
    report = json.loads(out.read_text())
    measured = report["results"]["fp32, batch 2"]
    assert measured["sentences"] == 2 and report["complete"] is True
    decoders = {f"{search}, {cache}" for search in ("greedy", "beam 4")
                for cache in ("no cache", "growing cache", "static cache")} | {"nn.Transformer greedy"}
    assert set(measured) - {"sentences"} == decoders
    assert all(len(r["seconds"]) == 3 and r["seconds"]["min"] <= r["seconds"]["max"]
               for name, r in measured.items() if name != "sentences")
    assert report["differ_from_uncached"]["fp32, batch 2"] == dict.fromkeys(decoders - {"greedy, no cache",
                                                                                        "beam 4, no cache"}, 0)
    assert report["command"].startswith("python ") and "decoding_speed.py" in report["command"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["as shipped", "neither"])
def test_train_throughput_measures_the_trainers_cpu_settings(variant):
    """Measurement 3 of train_throughput.py, one step of the tiny preset in a fresh process
    (it patches the package's own functions: a renamed module broke it once), without warm-up
    steps, on 2,000 generated pairs (the benchmark's: 3 and 20,000)."""
    result = subprocess.run([sys.executable, str(BENCHMARKS / "train_throughput.py"), "--cpu-variant", variant,
                             "--cpu-steps", "1", "--cpu-warmup", "0", "--cpu-pairs", "2000"],
                            capture_output=True, text=True, cwd=BENCHMARKS)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["variant"] == variant and report["tokens"] > 0 and report["trainer_tokens_per_s"] > 0

@pytest.mark.slow
def test_train_scale_runs_the_cli_twice_on_a_generated_corpus(tmp_path, monkeypatch):
    """The script in this process; the two runs of the command it times are processes of their own."""
    out = tmp_path / "scale.json"
    run_script("train_scale.py", ["--pairs", "400", "--steps", "4", "--log-every", "2", "--vocab-size", "300",
                                  "--max-tokens", "300", "--work", str(tmp_path / "work"), "--out", str(out)],
               monkeypatch)
    report = json.loads(out.read_text())["results"]["400"]
    assert report["first_run"]["steps"] == report["cached_run"]["steps"] == 4
    assert len((tmp_path / "work" / "corpus-400" / "train.en").read_text().splitlines()) == 400
    assert len(list((tmp_path / "work" / "cache-400" / "data").iterdir())) == 1, "the second run reused the cache"



@pytest.mark.slow
def test_cli_speed_trains_this_checkout_and_a_commit_in_turn(tiny_corpus, tmp_path, monkeypatch):
    """cli_speed.py against this checkout's own commit: each side trains from its own package,
    every run logs its intervals, the ratio is that of the sides' medians (recomputed here from
    the logged rates, the first interval of each run left out), and the worktree is removed.
    The script runs in this process; the four runs of the command (each side's untimed one and
    one timed) are processes, each importing its side's package."""
    root = BENCHMARKS.parent
    worktrees = ["git", "worktree", "list", "--porcelain"]
    before = subprocess.run(worktrees, cwd=root, capture_output=True, text=True).stdout
    out = tmp_path / "speed.json"
    run_script("cli_speed.py", ["--baseline", "HEAD", "--data", str(tiny_corpus), "--steps", "6", "--log-every",
                                "2", "--repeats", "1", "--out", str(out), "--", "--vocab-size", "60",
                                "--max-tokens", "200"], monkeypatch)
    report = json.loads(out.read_text())
    medians = {}
    for side, r in report["results"].items():
        assert len(r["runs"]) == 1 and all(len(run["rates"]) == 3 for run in r["runs"]), side
        assert all(" on cpu (1 process(es), " in run["says"] for run in r["runs"]), side
        medians[side] = statistics.median(statistics.median(run["rates"][1:]) for run in r["runs"])
    assert report["ratio"] == pytest.approx(medians["this checkout"] / medians["baseline"])
    assert report["baseline_commit"] == subprocess.run(["git", "rev-parse", "HEAD"], cwd=root,
                                                       capture_output=True, text=True).stdout.strip()
    assert subprocess.run(worktrees, cwd=root, capture_output=True, text=True).stdout == before

def test_cli_speed_gives_both_sides_a_folder_as_an_absolute_path_and_a_corpus_name_as_given(
    tiny_corpus, monkeypatch
):
    """The baseline trains from another folder: a corpus folder given relative to here reaches
    it absolute; the number corpus and a hub name are names, not paths (`--data numbers` was
    made /abs/path/numbers and refused by train)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cli_speed

    monkeypatch.chdir(tiny_corpus.parent)
    assert cli_speed.data_option(tiny_corpus.name) == str(tiny_corpus.resolve())
    (tiny_corpus.parent / "numbers").mkdir()  # a folder of that name here changes nothing
    for name in ("numbers", "hub:bentrevett/multi30k"):
        assert cli_speed.data_option(name) == name


@pytest.mark.slow
def test_cli_runs_chooses_alpha_on_validation_and_scores_only_its_own_runs(tiny_corpus, tmp_path, monkeypatch):
    """cli_runs.py trains with the plain command, then scores test with the alpha of highest
    validation BLEU; --score rescores those runs (--newest: their newest checkpoints too), and
    refuses a folder of another run. The script runs in this process, its train command in a
    process of its own."""
    (tiny_corpus / "test.en").write_text("three\nseven\n")
    (tiny_corpus / "test.de").write_text("drei\nsieben\n")
    common = ["--seeds", "0", "--data", str(tiny_corpus), "--runs", str(tmp_path / "runs"),
              "--alphas", "0.0", "0.6", "5.0"]
    first = tmp_path / "first.json"
    train = ["--", "--vocab-size", "60", "--max-tokens", "200", "--max-steps", "6", "--checkpoint-every", "2"]
    run_script("cli_runs.py", common + ["--out", str(first), *train], monkeypatch)
    run = json.loads(first.read_text())["seeds"]["0"]
    by_alpha = {float(a): v["bleu"] for a, v in run["val_by_alpha"].items()}
    assert by_alpha[run["alpha"]] == max(by_alpha.values()) and set(by_alpha) == {0.0, 0.6, 5.0}
    assert run["test_best_alpha"]["evaluate"].endswith(f"--split test --alpha {run['alpha']}")
    assert "--alpha" not in run["evaluate"], "the default alpha's test score beside it"
    assert run["schedule"].startswith("paper: peak "), "a run of updates: the paper's, from its plan"
    again = tmp_path / "again.json"
    run_script("cli_runs.py", common + ["--score", str(first), "--newest", "--out", str(again)], monkeypatch)
    rescored = json.loads(again.read_text())
    assert rescored["seeds"]["0"]["val_by_alpha"] == run["val_by_alpha"], "the same run, scored again"
    assert rescored["trained"]["record"] == str(first)
    assert "checkpoint_average.pt, the average of the checkpoints of steps 4, 6" in run["final_model"]
    for split in ("val", "test"):
        newest = rescored["seeds"]["0"][f"{split}_newest"]
        assert newest["evaluate"].endswith(f"checkpoint-00000006.pt --data {tiny_corpus} --src en --tgt de --split {split}")
        assert rescored["spread"][f"{split}_newest_bleu"]["median"] == newest["bleu"]
    (tmp_path / "runs" / "cli-0" / "checkpoint-00000006.pt").unlink()
    with pytest.raises(SystemExit, match="is not the run of"):
        run_script("cli_runs.py", common + ["--score", str(first), "--out", str(again)], monkeypatch)


def test_cli_runs_merges_the_seeds_of_one_recipe_and_refuses_others(tmp_path, monkeypatch):
    """--merge: records of one seed each become one record of their seeds, with the spread
    worked out here by hand, and the parts' commit, machine and dates; records of other train
    options, of another commit or of a seed already given are refused, and nothing is written."""
    common = {"machine": "CPU M", "torch": "2.x", "git": {"commit": "abc", "dirty": False},
              "versions": {"torch": "2.x"}, "hardware": {"cpu": "CPU M"}}

    def part(seed: int, bleu: float, steps: int, options: str = "--max-minutes 10", **changes) -> str:
        run = {"steps": steps, "val": {"bleu": bleu, "tokenized_bleu": bleu + 1},
               "test": {"bleu": bleu - 1, "tokenized_bleu": bleu}}
        record = common | {"command": f"python benchmarks/cli_runs.py --seeds {seed} --data d "
                                      f"--out p{seed}.json -- {options}",
                           "date": f"2026-11-29T0{seed}:00:00+00:00", "wall_s": 600.0 + seed,
                           "seeds": {str(seed): run}} | changes
        path = tmp_path / f"part-{len(list(tmp_path.glob('part-*')))}.json"
        path.write_text(json.dumps(record))
        return str(path)

    merged = tmp_path / "merged.json"
    parts = [part(2, 30.0, 900), part(0, 34.0, 1000), part(1, 31.0, 1100)]
    run_script("cli_runs.py", ["--merge", *parts, "--out", str(merged)], monkeypatch)
    record = json.loads(merged.read_text())
    assert list(record["seeds"]) == ["0", "1", "2"]
    assert record["spread"]["val_bleu"] == {"min": 30.0, "median": 31.0, "max": 34.0}
    assert record["spread"]["test_bleu"] == {"min": 29.0, "median": 30.0, "max": 33.0}
    assert record["spread"]["steps"] == {"min": 900, "median": 1000, "max": 1100}
    assert (record["git"], record["machine"]) == (common["git"], "CPU M"), "the parts', not this run's"
    assert record["date"] == "2026-11-29T02:00:00+00:00" and record["wall_s"] == 1803.0
    assert [p["command"].split()[3] for p in record["parts"]] == ["2", "0", "1"]
    with pytest.raises(SystemExit):  # --merge with options it would ignore
        run_script("cli_runs.py", ["--merge", *parts, "--newest", "--out", str(tmp_path / "no.json")],
                   monkeypatch)
    refused = {"different options": part(1, 31.0, 1100, "--max-minutes 60"),
               "different git": part(1, 31.0, 1100, git={"commit": "def", "dirty": False}),
               "seed 0 of": part(0, 33.0, 1000)}
    for match, other in refused.items():
        with pytest.raises(SystemExit, match=match):
            run_script("cli_runs.py", ["--merge", parts[1], other, "--out", str(tmp_path / "no.json")],
                       monkeypatch)
    assert not (tmp_path / "no.json").exists()


def test_multi30k_lowercase_writes_the_multi30k_papers_preprocessing(tmp_path):
    import gzip

    source = tmp_path / "raw"
    source.mkdir()
    with gzip.open(source / "train.en.gz", "wt", encoding="utf-8") as f:
        f.write("A dog's ball, \"red\".\nTwo MEN run!\n")
    (source / "train.de").write_text("Ein Hund läuft.\nZwei Männer rennen!\n", encoding="utf-8")
    (source / "README.md").write_text("not a split\n")
    out = tmp_path / "lc"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "multi30k_lowercase.py"), str(source), str(out)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["train.de", "train.en"]
    # lowercased, punctuation split off and nothing escaped; Moses' English normalisation moves
    # a full stop inside the closing quote
    assert (out / "train.en").read_text().splitlines() == ['a dog \'s ball , " red . "', "two men run !"]
    assert (out / "train.de").read_text().splitlines() == ["ein hund läuft .", "zwei männer rennen !"]
    again = subprocess.run([sys.executable, str(BENCHMARKS / "multi30k_lowercase.py"), str(source), str(out)],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr, "an existing folder is not overwritten"


def test_fresh_clone_times_commands_in_a_clone_and_reads_make_trains_summary(tmp_path):
    out = tmp_path / "fresh.json"
    summary = "done: 9 steps in 0.1 min; exact match on the test split 96.2%; checkpoints in runs/x"
    commands = ["test -f Makefile && test ! -e .venv", f"echo '{summary}'", "exit 3"]
    clones = set(BENCHMARKS.parent.parent.glob(".fresh-clone-*"))
    log = tmp_path / "fresh.log"
    result = subprocess.run([sys.executable, str(BENCHMARKS / "fresh_clone.py"), "--commands", *commands,
                             "--out", str(out), "--log", str(log)], capture_output=True, text=True)
    assert result.returncode != 0 and "a command failed" in result.stderr
    assert log.read_text().splitlines()[1:3] == [f"$ echo '{summary}'", summary], "each whole output"
    runs = json.loads(out.read_text())["runs"]
    assert [r["returncode"] for r in runs] == [0, 0, 3], "run in a clean clone, each command's status kept"
    assert runs[1]["exact_match"] == 0.962 and "exact_match" not in runs[0]
    assert set(BENCHMARKS.parent.parent.glob(".fresh-clone-*")) <= clones, "the clone is removed"


CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
  language: python
---
# A chapter

```{code-cell} ipython3
import os, pathlib, time
cache = pathlib.Path(os.environ["TRANSFORMER_CACHE"])
with open("seen.txt", "a") as seen:  # the working directory: the chapter's folder
    seen.write(f"{(cache / 'run').exists()}\\n")
cache.mkdir(parents=True, exist_ok=True)
(cache / "run").touch()
```

```{code-cell} ipython3
time.sleep(0.3)
```
"""


@pytest.mark.slow
def test_chapter_times_runs_each_chapter_first_with_an_empty_cache_then_with_its_own(tmp_path, monkeypatch):
    """chapter_times.py in this process, on a book of generated chapters run in kernels of
    their own (five kernels, no torch in them: about two seconds each, since kernels are what
    the script times): each chapter's first run finds no cache, its
    cached run finds the one its first run left, and no other chapter's; the slowest cell is
    found; the environment is given back; a failing chapter stops the script before any
    record is written; a name that is no chapter is refused."""
    book = tmp_path / "book"
    book.mkdir()
    for name in ("a", "b"):
        (book / f"{name}.md").write_text(CHAPTER.replace("seen.txt", f"seen_{name}.txt"))
    (book / "broken.md").write_text(CHAPTER.replace("time.sleep(0.3)", "raise ValueError('broken')"))
    (book / "prose.md").write_text("# No code\n")
    out, environment = tmp_path / "times.json", dict(os.environ)
    run_script("chapter_times.py", ["--book", str(book), "--chapters", "a", "b", "--repeats", "1",
                                    "--out", str(out)], monkeypatch)
    assert dict(os.environ) == environment
    for name in ("a", "b"):
        assert (book / f"seen_{name}.txt").read_text() == "False\nTrue\n", "an empty cache, then its own"
        timed = json.loads(out.read_text())["chapters"][name]
        for run in (timed["first"], timed["cached"]):
            assert run["slowest_cell"]["code_cell"] == 2 and run["slowest_cell"]["seconds"] >= 0.3, run
        assert timed["first"]["seconds"] > timed["first"]["slowest_cell"]["seconds"], "the whole run"
        assert timed["cached"]["seconds"]["median"] > timed["cached"]["slowest_cell"]["seconds"]
    from nbclient.exceptions import CellExecutionError

    broken = tmp_path / "broken.json"
    with pytest.raises(CellExecutionError, match="broken"):
        run_script("chapter_times.py", ["--book", str(book), "--chapters", "broken", "--out", str(broken)],
                   monkeypatch)
    assert not broken.exists()
    with pytest.raises(SystemExit, match="2"):
        run_script("chapter_times.py", ["--book", str(book), "--chapters", "prose", "--out", str(broken)],
                   monkeypatch)


def test_trainer_step_flops_written_out_agree_with_flop_counter_mode(monkeypatch):
    """trainer_step.py's MFU counts the FLOPs of the real tokens from a formula; on a batch
    without padding it agrees with FlopCounterMode's count of the step to 1% (the formula counts
    half of the causal self-attention square, FlopCounterMode all of it)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from transformer import Transformer, TransformerConfig, label_smoothed_loss

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from trainer_step import useful_flops

    config = TransformerConfig.base()
    with torch.device("meta"):
        model = Transformer(config)
        src, tgt = torch.ones(100, 30, dtype=torch.long), torch.ones(100, 25, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        label_smoothed_loss(model(src, tgt, check_ids=False), tgt, 0.1).backward()
    written = useful_flops(config, torch.full((100,), 30), torch.full((100,), 25))
    assert abs(written / counter.get_total_flops() - 1) < 0.01


RESULTS = BENCHMARKS / "results"
ABSOLUTE = re.compile(r"(?<![\w.:])/(?:tmp|root|home|work|var|private|Users)/")


@pytest.mark.parametrize("record", sorted(p.name for p in RESULTS.glob("*.json")))
def test_no_record_names_a_path_of_the_machine_that_made_it(record):
    """A record's command is re-run from the repository's root: an absolute path of the
    machine that ran it (a temporary folder, a home) could not be."""
    text = (RESULTS / record).read_text()
    found = sorted({m.group(0) for m in ABSOLUTE.finditer(text)})
    assert not found, f"{record} holds absolute paths starting {found}"


@pytest.mark.parametrize("record", sorted(p.name for p in RESULTS.glob("*.json")))
def test_every_record_has_its_provenance_or_says_what_it_lacks(record):
    report = json.loads((RESULTS / record).read_text())
    fields = {"command", "machine", "git", "versions", "hardware", "date", "wall_s"}
    missing = fields - set(report)
    assert not missing or report.get("lacks"), f"{record} lacks {sorted(missing)} unsaid"


def test_report_writes_the_command_from_the_repository_and_the_code_that_ran(
    tmp_path, monkeypatch
):
    """Run from benchmarks/ with relative and absolute paths, the command names them as
    seen from the root; an edit after the start does not change the recorded commit."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import report

    root = BENCHMARKS.parent
    monkeypatch.chdir(BENCHMARKS)
    monkeypatch.setattr(sys, "argv", [
        "trainer_step.py", "--presets", "base", "--out", "results/x.json",
        f"--data={root.parent / 'shared' / 'data'}", str(root / "runs" / "a"),
        "/elsewhere/y.json",  # outside the root's folder: kept absolute
    ])
    assert report.command_line() == (
        "python benchmarks/trainer_step.py --presets base --out benchmarks/results/x.json "
        "--data=../shared/data runs/a /elsewhere/y.json"
    )
    out = tmp_path / "record.json"
    monkeypatch.setattr(report, "GIT", {"commit": "abc", "dirty": False})
    report.write_report(out, {"figure": 1})
    written = json.loads(out.read_text())
    assert written["git"] == {"commit": "abc", "dirty": False} and written["figure"] == 1
    assert {"python", "torch", "tokenizers", "sacrebleu"} <= set(written["versions"])
    assert written["hardware"]["threads"] >= 1 and not list(tmp_path.glob("*.tmp"))


def test_the_cpu_is_named_exactly_from_its_proc_files(tmp_path, monkeypatch):
    """Two processors sold as "AMD EPYC": a Zen 1 (bf16 emulated) and a Zen 4 (AVX-512 BF16).
    Hand-written /proc files; the first processor's block only."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import report

    def files(family: int, model: int, flags: str) -> tuple:
        block = f"processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: {family}\nmodel\t\t: {model}\nflags\t\t: {flags}\n"
        (tmp_path / "cpuinfo").write_text(block + "\n" + block.replace("processor\t: 0", "processor\t: 1") + "flags : amx_tile\n")
        (tmp_path / "meminfo").write_text("MemTotal:       25165824 kB\nMemFree:  1 kB\n")
        return tmp_path / "cpuinfo", tmp_path / "meminfo"

    zen1 = report.cpu(*files(23, 1, "fpu sse2 avx avx2 fma"))
    assert (zen1["model_name"], zen1["family"], zen1["model"]) == ("AMD EPYC", 23, 1)
    assert zen1["flags"] == ["avx2"] and zen1["memory_gib"] == 24.0
    zen4 = report.cpu(*files(25, 17, "avx2 avx512f avx512_bf16 avx512vl"))
    assert zen4["flags"] == ["avx2", "avx512f", "avx512_bf16"]
    assert zen4["capability"] == torch.backends.cpu.get_cpu_capability()
    assert report.cpu(tmp_path / "absent", tmp_path / "absent")["flags"] is None


def test_a_cpu_held_below_its_instructions_is_named_with_the_variables_that_hold_it(monkeypatch):
    """A Zen 4 run with oneDNN held to AVX2 multiplies bf16 the way a CPU without it does: the
    record says so and names the variables; a limit that keeps bf16 leaves it native."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import report

    zen4 = {"model_name": "AMD EPYC", "family": 25, "model": 17, "threads": 2,
            "flags": ["avx2", "avx512f", "avx512_bf16"]}
    monkeypatch.setattr(report, "cpu", lambda: zen4)
    assert report.machine() == "AMD EPYC CPU (family 25 model 17, native bf16), 2 threads"
    zen4["isa_limits"] = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert report.machine() == (
        "AMD EPYC CPU (family 25 model 17, native bf16 held back by ATEN_CPU_CAPABILITY=avx2 "
        "and ONEDNN_MAX_CPU_ISA=AVX2, so bf16 emulated), 2 threads")
    zen4["isa_limits"] = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert report.machine().endswith("(family 25 model 17, native bf16), 2 threads")
    monkeypatch.undo()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    assert report.cpu()["isa_limits"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert "isa_limits" not in report.cpu()


class _Parsed(Exception):
    """Raised in place of running a benchmark once its arguments are parsed."""


def parsed_command(words: list[str], folder: Path, monkeypatch) -> argparse.Namespace:
    """The arguments of `python SCRIPT ...` (words), run in `folder`, parsed by the script's
    own parser at this commit (what the script would do next is not run)."""
    if words[0] == "timeout":  # timeout SECONDS python ...
        words = words[2:]
    assert words[0] == "python", f"the command must run a script with python: {words}"
    script = folder / words[1]
    assert script.is_file(), f"{words[1]} is not in {folder}"
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(parser, args=None, namespace=None):
        raise _Parsed(parse(parser, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", words[1:])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    with pytest.raises(_Parsed) as parsed:
        runpy.run_path(str(script), run_name="__main__")
    return parsed.value.args[0]


def recorded_args(report: dict) -> dict[str, str]:
    """The parsed arguments a record kept (some as their str()), each as its str()."""
    return {key: str(value) for key, value in report.get("args", {}).items()}


@pytest.mark.parametrize("record", sorted(p.name for p in RESULTS.glob("*.json")))
def test_every_records_command_is_what_ran_and_runs_at_this_commit(record, monkeypatch):
    """A record's command is shell-quoted and is the one that wrote it: the arguments it
    recorded are the ones its command gives, and the file it writes (--out or --json) is this
    record (or `written_as`, the name it was written under). It runs at this commit: its
    script's parser accepts it today with the same settings. A record whose command no
    longer does is `history`, and says why; its command must still give its arguments."""
    report = json.loads((RESULTS / record).read_text())
    words = shlex.split(report["command"])
    assert shlex.join(words) == report["command"], f"{record}: not shell-quoted"
    given = recorded_args(report)
    if "history" in report:
        assert len(report["history"]) > 40, f"{record}: say why it is history"
        quoted = [value for key, value in given.items()
                  if value.startswith("['") and "--" + key.replace("_", "-") in words]
        for value in quoted:  # each item of a list option is one word of the command
            items = ast.literal_eval(value)
            assert any(words[i : i + len(items)] == items for i in range(len(words))), (
                f"{record}: its command does not give {value}")
        return
    folder = BENCHMARKS.parent / report.get("ran_in", ".")
    try:
        args = parsed_command(words, folder, monkeypatch)
    except SystemExit as error:  # argparse's refusal, printed on stderr
        pytest.fail(f"{record}: its command no longer parses ({error}): {report['command']}")
    written = getattr(args, "out", None) or getattr(args, "json", None)
    assert written is not None and str(written) == report.get("written_as", str(written))
    assert "written_as" in report or Path(written).name == record, (
        f"{record}: its command writes {written}")
    today = {key: str(value) for key, value in vars(args).items()}
    changed = {key: (value, today[key]) for key, value in given.items()
               if key in today and today[key] != value}
    assert not changed, f"{record}: recorded args (then, today): {changed}"


def test_the_gpus_peak_is_looked_up_by_its_exact_name(monkeypatch):
    """MFU divides by the GPU's dense bf16 peak, found by the whole name that
    torch.cuda.get_device_name reports: an H100 PCIe or NVL, or an H200 NVL, is not given the
    SXM's 989 TFLOP/s, and a GPU not in the table is refused with a message naming it and the
    known ones (never a peak of None, or another model's)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from train_throughput import PEAK_TFLOPS, peak_tflops

    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA H100 NVL") == 835.0
    assert peak_tflops("NVIDIA H200") == 989.0
    assert peak_tflops("NVIDIA H200 NVL") == 835.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    for unknown in ("NVIDIA H100", "H200", "NVIDIA GeForce RTX 4090", "NVIDIA H200 NVL 2"):
        with pytest.raises(ValueError, match=re.escape(repr(unknown))) as refusal:
            peak_tflops(unknown)
        assert "NVIDIA H100 PCIe" in str(refusal.value) and "NVIDIA H200 NVL" in str(refusal.value)
    assert all(peak_tflops(name) == peak for name, peak in PEAK_TFLOPS.items())


def test_the_cpus_nominal_fp32_peak_is_its_fma_width_times_its_stated_clock(monkeypatch):
    """Zen 1 (family 23 model 1) has two 128-bit FMA pipes: 2 x 4 lanes x 2 FLOPs = 16 a cycle a
    core, so two cores at a stated 2,000 MHz give 64 GFLOP/s; Zen 3 twice that a cycle. A core not
    in the table, or no stated clock, gives no nominal peak (never another core's); the measured
    one is a product's FLOPs over its time."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from train_throughput import cpu_peak_gflops

    def info(family, model, mhz="2000.000"):
        lines = ["processor\t: 0", f"cpu family\t: {family}", f"model\t\t: {model}",
                 "model name\t: AMD EPYC 7xx1 32-Core Processor"] + ([f"cpu MHz\t\t: {mhz}"] if mhz else [])
        return "\n".join(lines) + "\n"

    zen1 = cpu_peak_gflops(2, info(23, 1), size=64)
    assert (zen1["nominal_gflops"], zen1["clock_mhz"], zen1["flops_a_cycle_a_core"]) == (64.0, 2000.0, 16)
    assert cpu_peak_gflops(1, info(25, 1, "2450.000"), size=64)["nominal_gflops"] == 32 * 2.45
    for unknown in (info(6, 167), info(23, 1, mhz=None)):
        assert cpu_peak_gflops(2, unknown, size=64)["nominal_gflops"] is None
    assert zen1["measured_gflops"] > 0
