"""Tests of transformer/cli.py (book/cli.md) and `python -m transformer`."""

import subprocess
import sys

import pytest

from transformer.cli import main


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"]])
def test_every_command_has_help(args):
    result = subprocess.run([sys.executable, "-m", "transformer", *args], capture_output=True, text=True)
    assert result.returncode == 0 and "usage: python -m transformer" in result.stdout


def test_train_runs_and_summarizes(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--data", str(tiny_corpus), "--max-steps", "3", "--max-tokens", "200", "--vocab-size", "60",
                 "--precision", "fp32", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "done: 3 steps" in printed and "validation loss" in printed
    assert (out / "checkpoint-00000003.pt").exists()
    assert main(["train", "--resume", str(out), "--max-steps", "4", "--out", str(out)]) == 0
    assert (out / "checkpoint-00000004.pt").exists()


def test_train_needs_a_stopping_rule(tmp_path):
    with pytest.raises(SystemExit, match="--max-steps N and/or --max-minutes M"):
        main(["train", "--out", str(tmp_path)])
