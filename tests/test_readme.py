"""The README's figures are those its records give (tools/readme.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import readme  # noqa: E402


def test_readme_figures_are_rendered_from_the_records():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "readme.py"), "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_a_marked_block_is_rewritten_and_an_unknown_one_refused(monkeypatch):
    monkeypatch.setitem(readme.BLOCKS, "answer", lambda: "42 s\n")
    text = "before\n<!-- record: answer -->\nstale 41 s\n<!-- /record -->\nafter\n"
    assert readme.render(text) == "before\n<!-- record: answer -->\n42 s\n<!-- /record -->\nafter\n"
    with pytest.raises(KeyError, match="'nope'"):
        readme.render("<!-- record: nope -->\n<!-- /record -->")


def _fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _environment() -> dict:
    """This Python first on PATH; the session's cache of prepared corpora and runs (conftest.py:
    make test's, where the chapters prepared the number corpus)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.slow
def test_the_readme_examples_run_as_pasted(tmp_path, monkeypatch):
    """The command-line example (trained for 3 steps instead of 1,000: enough for the average of
    its last checkpoints that translate and evaluate load; evaluate scores the first 20 test
    sentences, which the untrained model, like all 500, decodes to the length limit), then the
    Python one."""
    (commands,) = [block for block in _fenced("console") if "train --data numbers" in block]
    env = _environment()
    lines = commands.strip().splitlines()
    assert len(lines) == 3 and "--max-steps 1000" in lines[0]
    outputs = []
    for line in lines:
        line = line.replace("--max-steps 1000", "--max-steps 3")
        line += " --limit 20" if " evaluate " in line else ""
        result = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, (line, result.stderr[-2000:])
        outputs.append(result.stdout)
    assert "; exact match on the test split " in outputs[0], "the number run closes with its test score"
    assert "the average of the checkpoints of steps 2, 3" in outputs[0], outputs[0]
    assert ", test, beam 4: BLEU " in outputs[2] and " on 20 sentences, " in outputs[2], outputs[2]
    assert (tmp_path / "runs" / "numbers" / "checkpoint_average.pt").is_file()
    (python,) = _fenced("python")
    assert len(python.strip().splitlines()) <= 10
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "README.md", "exec"), {})


@pytest.mark.slow
def test_the_readme_real_text_example_runs_as_pasted(tmp_path):
    """The real-text example on a small folder laid out as Multi30k's (number words), a few
    steps instead of minutes: train, evaluate the run folder, resume it."""
    from num2words import num2words

    (commands,) = [block for block in _fenced("console") if "--data data/multi30k" in block]
    corpus = tmp_path / "data" / "multi30k"  # where `python -m transformer data multi30k` puts it
    corpus.mkdir(parents=True)
    for split, numbers in {"train": range(1, 65), "val": range(1, 9), "test_2016_flickr": range(65, 73)}.items():
        for lang in ("en", "de"):
            lines = [num2words(n, lang=lang) for n in numbers]
            (corpus / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    lines = commands.strip().splitlines()
    assert len(lines) == 3 and "--max-minutes 10" in lines[0] and "--max-minutes 30" in lines[2]
    outputs = []
    for line in lines:
        line = line.replace("--max-minutes 10", "--max-steps 3").replace("--max-minutes 30", "--max-steps 5")
        result = subprocess.run(line, shell=True, cwd=tmp_path, env=_environment(), capture_output=True,
                                text=True)
        assert result.returncode == 0, (line, result.stderr[-2000:])
        outputs.append(result.stdout)
    assert ", test, beam 4: BLEU" in outputs[1] and "case:mixed" in outputs[1], outputs[1]
    run = tmp_path / "runs" / "m30k"
    assert (run / "checkpoint-00000005.pt").is_file() and (run / "checkpoint_average.pt").is_file()


def test_what_you_get_is_one_table_of_four_rows_each_figure_linked_to_its_record():
    """Issue 108: the README is a front page of at most 100 lines. What you get is one table
    of at most four rows (a CPU with native bf16, one without, one GPU, an hour), rendered
    from the records; each of its figures is a link to its record, and no table is wide."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 100
    assert len((ROOT / "tools" / "readme.py").read_text().splitlines()) <= 400
    section = text.split("\n## What you get\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"<!-- record: results -->\n(.*?)<!-- /record -->", section, re.S)
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]
    assert [row.split("|")[1].strip().split(" (")[0].split(",")[0] for row in rows] == [
        "a 2-core CPU with native bf16", "a 2-core CPU without native bf16", "one GPU", "a 2-core CPU"]
    unlinked = re.sub(r"\[[^\]]*\]\(benchmarks/results/\w+\.json\)", "", block.split("\n\n")[0])
    assert not re.findall(r"\d+\.\d+|\d+ min", unlinked), unlinked
    columns = [line.count("|") - 1 for line in text.splitlines() if line.startswith("|")]
    assert max(columns) <= 5, f"a README table of {max(columns)} columns"


def test_the_readme_rows_are_what_its_sentences_say():
    """What the README says of its records: the first row's CPU has native bf16 and trains
    in it; the second ran on a stand-in without it, planned as the slowest CPU met (the
    family-23 EPYC) plans its ten minutes; the GPU ran the plain lowercased command on one
    GPU; the hour's seeds ran the paper's schedule, the default then, each at its own commit;
    `make train` ran to its end on a CPU held back from its bf16."""
    import ledger
    from transformer.plan import BUDGET_FITS
    from transformer.runs import fitted_layers

    native, stand_in, gpu = map(readme._record, (readme.NATIVE, readme.EMULATED, readme.GPU))
    assert "native bf16)" in native["machine"] and native["hardware"]["threads"] == 2
    assert {ledger._trains_in(run) for run in native["seeds"].values()} == {"bf16"}
    slowest = readme._record(ledger.TEN_MINUTES[0])
    assert (stand_in["hardware"]["family"], slowest["hardware"]["family"]) == (25, 23)
    assert "bf16 emulated" in stand_in["machine"] and slowest["hardware"]["threads"] == 2
    assert {ledger._trains_in(run) for run in stand_in["seeds"].values()} == {"fp32"}
    n = fitted_layers(slowest["seeds"]["0"]["steps"], BUDGET_FITS["tiny"].layers_by_updates)
    assert {ledger._layers(run) for run in stand_in["seeds"].values()} == {str(n)}, (
        "the stand-in not planned as the slowest CPU's ten minutes plan")
    assert gpu["hardware"]["gpu_count"] == 1
    assert all(run["train"].endswith("--lowercase --seed 0 --out runs/gpu/lc/cli-0 --overwrite")
               for run in gpu["seeds"].values())
    hour = [readme._record(name) for name in readme.HOUR]
    runs = [run for record in hour for run in record["seeds"].values()]
    assert all("--schedule" not in run["train"] and run.get("schedule", "the paper's") == "the paper's"
               and "--lowercase --max-minutes 60 " in run["train"] for run in runs)
    assert len({record["git"]["commit"] for record in hour}) == len(runs) == 3
    assert {record["hardware"]["threads"] for record in hour} == {2}
    held = readme._record(readme.FRESH_HELD)
    assert "held back" in held["machine"] and "bf16 emulated" in readme._record(readme.FRESH_EMULATED)["machine"]
    assert [run["returncode"] for run in held["runs"] if run["command"] == "make train"] == [0]
    assert "native bf16" in readme._record(readme.FRESH)["machine"]
