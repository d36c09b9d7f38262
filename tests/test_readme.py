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


def test_the_results_open_with_three_lines_for_a_reader_and_no_table_is_wide():
    """Issue 101: the README's results open with what the ten-minute command gives on a CPU
    with native bf16, on one without, and the GPU recipe on one GPU, each line from its
    record; the ledger of every CPU lives in the results chapter, so no README table has
    more than 5 columns."""
    text = (ROOT / "README.md").read_text()
    results = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"<!-- record: (\w[\w-]*) -->\n(.*?)<!-- /record -->", results, re.S)
    assert first[1] == "reader"
    lines = [line for line in first[2].splitlines() if line.startswith("- **")]
    assert [line.split("**")[1] for line in lines] == [
        "A 2-core CPU with native bf16:", "A 2-core CPU without it", "One GPU:"]
    assert all(re.search(r"`multi30k_en_de_\w+\.json`, commit [0-9a-f]{7}", line) for line in lines)
    assert "precision" in first[2] and "`train` prints its plan" in first[2]
    columns = [line.count("|") - 1 for line in text.splitlines() if line.startswith("|")]
    assert max(columns) <= 5, f"a README table of {max(columns)} columns"
