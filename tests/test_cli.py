"""Tests of transformer/cli.py (book/cli.md) and `python -m transformer`."""

import argparse
import io
import json
import re
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import torch

from transformer import cli
from transformer.checkpoints import load_checkpoint
from transformer.cli import main
from transformer.model import TransformerConfig
from transformer.runs import FEW_UPDATES
from transformer.plan import BUDGET_FITS


def test_python_m_transformer_runs_the_command_line():
    """`python -m transformer` in a process of its own; the other tests call main in this one
    (its errors are SystemExit("error: ..."), which Python prints on stderr with status 1), but
    for the one that pipes standard input through translate."""
    result = subprocess.run([sys.executable, "-m", "transformer", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "usage: python -m transformer" in result.stdout


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "average", "export"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0 and f"usage: python -m transformer {command}" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("transformer 0.")


def test_train_runs_and_summarizes(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--data", str(tiny_corpus), "--max-steps", "3", "--max-tokens", "200", "--vocab-size", "60",
                 "--precision", "fp32", "--out", str(out)])
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "done: 3 steps" in printed and "validation loss" in printed
    assert "step 3: loss " in printed and "\r" not in captured.err, "plain lines in a log, no bar"
    assert (out / "checkpoint-00000003.pt").exists()
    assert main(["train", "--resume", str(out), "--max-steps", "4", "--out", str(out)]) == 0
    assert (out / "checkpoint-00000004.pt").exists()


def test_the_default_preset_follows_the_data(tiny_corpus, tmp_path, monkeypatch):
    """The settings each run wrote. The number run's closing exact match on the test split (500
    sentences that an untrained model decodes to the length limit) is left out: the README's
    example checks it."""
    monkeypatch.setattr(cli, "evaluate", lambda *args, **kwargs: (argparse.Namespace(exact_match=0.0), []))
    assert main(["train", "--data", str(tiny_corpus), "--max-steps", "1", "--out", str(tmp_path / "text")]) == 0
    assert main(["train", "--max-steps", "1", "--out", str(tmp_path / "numbers")]) == 0
    assert main(["train", "--data", str(tiny_corpus), "--preset", "small", "--max-steps", "1",
                 "--out", str(tmp_path / "small-text")]) == 0
    written = {name: load_checkpoint(tmp_path / name / "checkpoint-00000001.pt")
               for name in ("text", "numbers", "small-text")}
    settings = {name: (state["model_config"]["d_model"], state["model_config"]["norm_first"],
                       state["training_config"]["vocab_size"], state["training_config"]["max_tokens"])
                for name, state in written.items()}
    assert settings == {"text": (128, True, 8000, 4096),  # tiny, pre-LN
                        "numbers": (256, False, 200, 2000),  # small, on the number corpus
                        "small-text": (256, False, 8000, 4000)}  # small, on real text


def test_layers_dropout_and_pre_ln_shape_a_new_model_and_are_refused_on_resume(tiny_corpus,
                                                                               tmp_path):
    out = tmp_path / "run"
    assert main(_train_args(tiny_corpus, out, "--preset", "tiny", "--dropout", "0.25", "--pre-ln",
                            "--attention-dropout", "0.1", "--activation-dropout", "0.2",
                            "--layers", "3")) == 0
    model = load_checkpoint(out / "checkpoint-00000001.pt")["model_config"]
    assert (model["d_model"], model["n_layers"], model["dropout"], model["norm_first"]) == (128, 3, 0.25, True)
    weights = load_checkpoint(out / "checkpoint-00000001.pt")["model"]
    assert {k.split(".")[2] for k in weights if k.startswith("encoder.layers.")} == {"0", "1", "2"}
    assert (model["attention_dropout"], model["activation_dropout"]) == (0.1, 0.2)
    with pytest.raises(SystemExit, match="a resumed run keeps its checkpoint's"):
        main(["train", "--resume", str(out), "--max-steps", "2", "--dropout", "0.1", "--out", str(out)])
    for option in ("--post-ln", "--attention-dropout=0", "--activation-dropout=0", "--layers=2"):
        with pytest.raises(SystemExit, match="a resumed run keeps its checkpoint's"):
            main(["train", "--resume", str(out), "--max-steps", "2", option, "--out", str(out)])
    post = tmp_path / "post"
    assert main(_train_args(tiny_corpus, post, "--preset", "tiny", "--post-ln")) == 0
    assert load_checkpoint(post / "checkpoint-00000001.pt")["model_config"]["norm_first"] is False


def test_train_needs_a_stopping_rule(tmp_path, tiny_corpus):
    with pytest.raises(SystemExit, match="--max-steps N, --max-minutes M"):
        main(["train", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="only the tiny preset on real text on a CUDA GPU has a default"):
        main(["train", "--data", str(tiny_corpus), "--device", "cpu", "--out", str(tmp_path)])


def test_real_text_on_a_cuda_gpu_stops_after_the_gpu_step_budget(tmp_path, tiny_corpus, monkeypatch):
    """The tiny preset on real text on CUDA: GPU_TEXT_STEPS updates, 15 checkpoints over them;
    the embedded corpus and other presets still need a stopping rule there."""
    configs, plans = [], []

    def from_plan(plan, *args):
        configs.append(plan.training)
        plans.append(plan)  # the plan the run prints first
        raise KeyboardInterrupt  # stop before any training

    from transformer import plan
    from transformer.plan import Timing

    monkeypatch.setattr(plan, "pick_device", lambda device="auto": torch.device("cuda"))
    monkeypatch.setattr(plan, "device_settings", lambda *args: [])  # no CUDA to ask here
    monkeypatch.setattr(cli, "time_first_update", lambda *args: Timing(0.06, 100.0))  # nor to time
    monkeypatch.setattr(cli.Trainer, "from_plan", from_plan)
    with pytest.raises(KeyboardInterrupt):
        main(["train", "--data", str(tiny_corpus), "--out", str(tmp_path / "run")])
    assert configs[0].max_steps == cli.GPU_TEXT_STEPS and configs[0].max_minutes is None
    assert configs[0].checkpoint_every == cli.GPU_TEXT_STEPS // 15
    assert "about 16 min here at 0.060 s an update uncompiled" in plans[0].why("max_steps"), "16,000 x 0.06 s"
    for other in (["--preset", "small", "--data", str(tiny_corpus)], []):
        with pytest.raises(SystemExit, match="say when to stop"):
            main(["train", *other, "--out", str(tmp_path / "run")])


@pytest.fixture
def run_folder(tiny_corpus, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--data", str(tiny_corpus), "--max-steps", "3", "--max-tokens", "200", "--vocab-size", "60",
                 "--precision", "fp32", "--out", str(out)]) == 0
    return out


def _train_args(corpus, out, *more):
    return ["train", "--data", str(corpus), "--max-steps", "1", "--max-tokens", "200", "--vocab-size", "60",
            "--precision", "fp32", "--out", str(out), *more]


def test_a_used_out_folder_is_refused_unless_resumed_or_overwritten(run_folder, tiny_corpus):
    # as if the old run had averaged its checkpoints: its final model is its file too
    shutil.copy(run_folder / "checkpoint-00000003.pt", run_folder / "checkpoint_average.pt")
    before = {p.name: p.stat().st_mtime_ns for p in run_folder.iterdir()}
    with pytest.raises(SystemExit, match=r"holds another run's files \(checkpoint_average.pt, metrics.jsonl, 5 in all"):
        main(_train_args(tiny_corpus, run_folder))
    assert {p.name: p.stat().st_mtime_ns for p in run_folder.iterdir()} == before, "nothing touched"
    assert main(_train_args(tiny_corpus, run_folder, "--overwrite")) == 0
    assert sorted(p.name for p in run_folder.glob("checkpoint*")) == ["checkpoint-00000001.pt"]
    steps = [json.loads(line)["step"] for line in (run_folder / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 1, "the old run's records were removed, not mixed with the new run's"


def test_an_out_that_is_a_file_is_refused_before_the_corpus_is_read(tiny_corpus, tmp_path):
    file = tmp_path / "file"
    file.write_text("not a folder")
    with pytest.raises(SystemExit) as refused:
        main([*_train_args(tiny_corpus, file), "--cache-dir", str(tmp_path / "cache")])
    assert refused.value.code == f"error: the output folder {file} is a file"
    assert not (tmp_path / "cache").exists(), "refused before preparing the data"


def test_a_folder_in_use_is_refused_and_freed_when_its_process_dies(run_folder):
    """Another process holds the folder's lock, as a running train does (a lock is held by an
    open file, so main here, in this process, is refused as a second process would be)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
                                "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)"),
         str(run_folder / ".lock")],
        stdout=subprocess.PIPE, text=True)
    resume = ["train", "--resume", str(run_folder), "--max-steps", "4", "--out", str(run_folder)]
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(SystemExit) as refused:
            main(resume)
        message = str(refused.value.code)
        assert f"is training in {run_folder}" in message and "\n" not in message, message
        assert not (run_folder / "checkpoint-00000004.pt").exists()
    finally:
        holder.kill()  # dies without unlocking: the kernel releases the lock
        holder.wait()
    assert main(resume) == 0
    assert (run_folder / "checkpoint-00000004.pt").exists()


def test_translate_reads_stdin_and_writes_stdout(run_folder):
    result = subprocess.run([sys.executable, "-m", "transformer", "translate", "--checkpoint", str(run_folder),
                             "--beam", "2"], input="one\n\ntwenty-one ☃\n", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3, "one line out per line in, the empty one included"


LINE_BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("where", ["stdin", "file"])
def test_translate_writes_one_line_per_input_line_whatever_the_characters(run_folder, tmp_path, where,
                                                                          capsys, monkeypatch):
    lines = [f"one{c}two" for c in LINE_BREAKS] + ["windows line\r", "", "last"]
    text = "\n".join(lines)  # no newline after the last line
    command = ["translate", "--checkpoint", str(run_folder), "--beam", "1"]
    if where == "file":
        (tmp_path / "in.txt").write_bytes(text.encode())
        command += ["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(command) == 0
    written = capsys.readouterr().out if where == "stdin" else (tmp_path / "out.txt").read_bytes().decode()
    assert written.count("\n") == len(lines) == 12 and written.endswith("\n")


def test_translate_names_the_line_of_bytes_that_are_not_utf8(run_folder, tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"one\ntwo\nthr\xffee\n")
    with pytest.raises(SystemExit) as refused:
        main(["translate", "--checkpoint", str(run_folder), "--input", str(tmp_path / "bad.txt")])
    assert refused.value.code == f"error: {tmp_path / 'bad.txt'} is not UTF-8 text: byte 0xff on line 3"


def test_translate_files_without_a_redrawn_bar_off_a_terminal(run_folder, tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text("one\ntwo\nthree\n")
    target = tmp_path / "out.de"
    assert main(["translate", "--checkpoint", str(run_folder), "--input", str(source), "--output", str(target),
                 "--beam", "1", "--batch-size", "2"]) == 0
    assert len(target.read_text().splitlines()) == 3
    assert "\r" not in capsys.readouterr().err, "stderr is not a terminal here: no bar redrawn into a log"
    assert not list(tmp_path.glob("*.tmp"))


def test_translate_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(SystemExit, match="does not exist"):
        main(["translate", "--checkpoint", str(tmp_path / "missing.pt")])
    with pytest.raises(SystemExit, match="holds 0"):
        main(["translate", "--checkpoint", str(tmp_path)])


def test_evaluate_prints_bleu_with_its_signature_and_appends_json(run_folder, tiny_corpus, tmp_path, capsys):
    results = tmp_path / "scores.jsonl"
    for beam in ("1", "2"):
        assert main(["evaluate", "--checkpoint", str(run_folder), "--data", str(tiny_corpus), "--split", "val",
                     "--beam", beam, "--json", str(results), "--output", str(tmp_path / "hyp.de")]) == 0
    printed = capsys.readouterr().out
    assert "greedy: BLEU" in printed and "beam 2: BLEU" in printed and "tok:13a" in printed
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["beam"] for r in records] == [1, 2] and all(r["sentences"] == 8 for r in records)
    assert len((tmp_path / "hyp.de").read_text().splitlines()) == 8
    with pytest.raises(SystemExit, match="no split 'dev'"):
        main(["evaluate", "--checkpoint", str(run_folder), "--data", str(tiny_corpus), "--split", "dev"])


def test_evaluate_scores_the_corpus_and_pair_the_model_was_trained_on(tiny_corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the corpus named by a relative path, as a user types it
    out = tmp_path / "de-en"
    assert main(["train", "--data", "corpus", "--src", "de", "--tgt", "en", "--max-steps", "3", "--max-tokens", "200",
                 "--vocab-size", "60", "--precision", "fp32", "--out", str(out)]) == 0
    capsys.readouterr()
    (tmp_path / "input.de").write_text("einundzwanzig\n")
    assert main(["translate", "--checkpoint", str(out), "--input", "input.de", "--output", "output.en"]) == 0
    assert f"translating with {out / 'checkpoint_average.pt'}" in capsys.readouterr().err
    scores = tmp_path / "scores.jsonl"
    assert main(["evaluate", "--checkpoint", str(out), "--split", "val", "--beam", "1", "--json", str(scores),
                 "--output", "hyp.en"]) == 0  # no --data, --src, --tgt: the average's run's
    record = json.loads(scores.read_text())
    assert (record["data"], record["pair"], record["sentences"]) == ("corpus", "de-en", 8)
    hypotheses = (tmp_path / "hyp.en").read_text().splitlines()
    english, german = ((tiny_corpus / f"val.{lang}").read_text().splitlines() for lang in ("en", "de"))
    assert record["chrf"] == sacrebleu.corpus_chrf(hypotheses, [english]).score
    assert record["chrf"] != sacrebleu.corpus_chrf(hypotheses, [german]).score, "scored against English"
    for checkpoint in out.glob("checkpoint-*.pt"):  # deleted to save space: the average stands
        checkpoint.unlink()
    assert main(["translate", "--checkpoint", str(out), "--input", "input.de", "--output", "output.en"]) == 0
    assert f"translating with {out / 'checkpoint_average.pt'}" in capsys.readouterr().err
    monkeypatch.chdir(out)  # where "corpus" is not
    with pytest.raises(SystemExit, match="was trained on corpus, which is not found from here; give --data"):
        main(["evaluate", "--checkpoint", str(out)])


def test_train_ends_with_the_average_of_its_last_checkpoints(run_folder):
    # 3 steps: a checkpoint after each; the last third of the run holds steps 2 and 3
    assert sorted(p.name for p in run_folder.glob("checkpoint*.pt")) == [
        "checkpoint-00000001.pt", "checkpoint-00000002.pt", "checkpoint-00000003.pt", "checkpoint_average.pt"]
    two, three, average = (torch.load(run_folder / name, weights_only=True)["model"] for name in
                           ("checkpoint-00000002.pt", "checkpoint-00000003.pt", "checkpoint_average.pt"))
    for name, weight in average.items():
        torch.testing.assert_close(weight, (two[name] + three[name]) / 2, rtol=0, atol=1e-6)
    src = run_folder.parent / "src.txt"
    src.write_text("one\ntwo\n")
    outputs = []
    for checkpoint in (run_folder, run_folder / "checkpoint_average.pt"):
        out = run_folder.parent / f"out{len(outputs)}.txt"
        assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(src), "--output", str(out)]) == 0
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1], "a run folder translates with its average"


def test_train_plans_the_schedule_of_a_run_of_minutes_alone(tmp_path, tiny_corpus, monkeypatch):
    """`--max-minutes` alone plans; with `--max-steps`, a `--cooldown` or `--schedule paper`,
    the paper's curve."""
    configs = []

    def from_plan(plan, *args):
        configs.append(plan.training)
        raise KeyboardInterrupt  # stop before any training

    monkeypatch.setattr(cli.Trainer, "from_plan", from_plan)
    for more in ([], ["--max-steps", "5"], ["--cooldown", "0.2"], ["--schedule", "paper"]):
        with pytest.raises(KeyboardInterrupt):
            main(["train", "--data", str(tiny_corpus), "--max-minutes", "10", *more, "--out", str(tmp_path / "run")])
    assert [config.schedule for config in configs] == ["planned", "paper", "paper", "paper"]


def test_train_fits_the_tiny_presets_batch_to_a_budget_of_minutes_unless_one_is_given(tmp_path, tiny_corpus, capsys,
                                                                                      monkeypatch):
    """A budget of 0.001 min, an update timed at 0.01 s: 6 updates of the tiny preset, far fewer than FEW_UPDATES and
    than the first line of its dropout_by_passes (6 updates make at most 6 passes): its 4,096 tokens halved and
    P_drop lowered from 0.3 to that line's, said in the plan printed first and saved; a P_drop given by name is
    kept; a batch given by name is kept, and the P_drop still lowered."""
    from transformer import trainer

    monkeypatch.setattr(trainer, "time_update", lambda probe: 0.01)  # not this machine's speed
    (passes, rate), *_ = BUDGET_FITS["tiny"].dropout_by_passes
    assert passes > 6 and rate < TransformerConfig.tiny().dropout
    halved = f"max_tokens 2,048 one update of 4,096 took 0.01 s: about 6 in 0.001 min, under {FEW_UPDATES:,}: halved"
    fitted = rf"dropout {rate:g} [\d.]+ passes over the data \(\d+ updates each\), under {passes:g}$"
    for i, (more, batch, dropout, said_dropout) in enumerate([
            ([], halved, rate, fitted), (["--dropout", "0.2"], halved, 0.2, "^dropout 0.2 given$"),
            (["--max-tokens", "4096"], "max_tokens 4,096 given", rate, fitted)]):
        out = tmp_path / f"run{i}"
        assert main(["train", "--data", str(tiny_corpus), "--vocab-size", "60", "--max-minutes", "0.001",
                     "--precision", "fp32", "--device", "cpu", *more, "--out", str(out)]) == 0
        said = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
        first = next(i for i, line in enumerate(said) if line.startswith("step ") or line.startswith("final"))
        assert batch in said[:first] and any(re.search(said_dropout, line) for line in said[:first]), said
        checkpoint = load_checkpoint(sorted(out.glob("checkpoint-*.pt"))[-1])
        assert checkpoint["model_config"]["dropout"] == dropout
        assert json.loads((out / "plan.json").read_text())["model"]["dropout"] == dropout


def test_a_cooled_down_run_ends_on_its_newest_checkpoint_unless_told_to_average(tiny_corpus, tmp_path, capsys):
    newest = "checkpoint-00000003.pt (averaging is off)"
    for i, (how, more, final) in enumerate([
            (["--cooldown", "0.5"], [], newest), (["--schedule", "planned"], [], newest),
            (["--cooldown", "0.5"], ["--average-last", "5"], "checkpoint_average.pt, the average of the checkpoints of steps 2, 3")]):
        out = tmp_path / f"run{i}"
        assert main(["train", "--data", str(tiny_corpus), "--max-steps", "3", "--max-tokens", "200", "--vocab-size", "60",
                     "--precision", "fp32", *how, "--out", str(out), *more]) == 0
        said = capsys.readouterr().out
        assert f"final model: {final}" in said
        assert ("planned: peak" in said and "0 after update 3" in said) == ("planned" in how), "the plan, said"
        assert (out / "checkpoint_average.pt").exists() == bool(more)


def test_average_a_folder_or_files(run_folder, tmp_path, capsys):
    assert main(["train", "--resume", str(run_folder), "--max-steps", "5", "--checkpoint-every", "1",
                 "--out", str(run_folder)]) == 0
    files = sorted(run_folder.glob("checkpoint-*.pt"))
    assert main(["average", str(run_folder), "--last", "1", "--out", str(tmp_path / "a.pt")]) == 0
    assert main(["average", *map(str, files), "--out", str(tmp_path / "b.pt")]) == 0
    assert f"averaged {len(files)} checkpoints" in capsys.readouterr().out
    a, b = torch.load(tmp_path / "a.pt", weights_only=True), torch.load(tmp_path / "b.pt", weights_only=True)
    assert len(files) == 5 and a["averaged_from"] == [str(files[-1])] and len(b["averaged_from"]) == 5
    with pytest.raises(SystemExit, match="--last goes with one training folder"):
        main(["average", *map(str, files), "--last", "2", "--out", str(tmp_path / "c.pt")])
    with pytest.raises(SystemExit, match="asked for the last 9"):
        main(["average", str(run_folder), "--last", "9", "--out", str(tmp_path / "c.pt")])
    assert not (tmp_path / "c.pt").exists()


BAD_INPUTS = [  # (arguments after the command, what the one-line answer must say)
    (["train", "--max-steps", "-5"], "argument --max-steps: expected an integer > 0, got -5"),
    (["train", "--max-steps", "1", "--lr-scale", "-1"], "argument --lr-scale: expected a finite number > 0, got -1"),
    (["train", "--max-minutes", "inf"], "argument --max-minutes: expected a finite number > 0, got inf"),
    (["train", "--max-steps", "1", "--checkpoint-minutes", "0"], "expected a finite number > 0, got 0"),
    (["train", "--max-steps", "1", "--layers", "0"], "argument --layers: expected an integer > 0, got 0"),
    (["train", "--max-steps", "1", "--dropout", "1"], "argument --dropout: expected a number in [0, 1), got 1"),
    (["train", "--max-steps", "1", "--label-smoothing", "1"], "label_smoothing must be in [0, 1); got 1.0"),
    (["train", "--max-steps", "1", "--cooldown", "1"], "argument --cooldown: expected a number in [0, 1), got 1"),
    (["train", "--max-steps", "1", "--schedule", "cosine"], "argument --schedule: invalid choice: 'cosine'"),
    (["train", "--max-steps", "1", "--vocab-size", "3", "--out", "{tmp}/new"], "vocab_size=3 is too small"),
    (["train", "--max-steps", "1", "--device", "banana"], "unknown device 'banana'"),
    (["train", "--max-steps", "1", "--data-changed-ok", "--out", "{tmp}/new"], "--data-changed-ok goes with --resume"),
    (["train", "--max-steps", "1", "--device", "cuda:99"], "device 'cuda:99' asked for; this machine has"),
    (["translate", "--beam", "0"], "argument --beam: expected an integer > 0, got 0"),
    (["translate", "--alpha", "nan"], "argument --alpha: expected a finite number >= 0, got nan"),
    (["translate", "--alpha", "-1"], "argument --alpha: expected a finite number >= 0, got -1"),
    (["translate", "--batch-size", "0"], "argument --batch-size: expected an integer > 0, got 0"),
    (["evaluate", "--limit", "-18"], "argument --limit: expected an integer > 0, got -18"),
    (["evaluate", "--split", "dev"], "the corpus has no split 'dev'"),
    (["average", "--last", "0", "--out", "{tmp}/a.pt"], "argument --last: expected an integer > 0, got 0"),
    (["average", "--last", "1", "--out", "{tmp}"], "is a folder; give the file to write"),
]


@pytest.fixture(scope="module")
def shared_run(tiny_corpus_module, tmp_path_factory):
    out = tmp_path_factory.mktemp("shared") / "run"
    assert main(_train_args(tiny_corpus_module, out)) == 0
    return out


@pytest.mark.parametrize(("args", "expected"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gets_one_line_and_changes_nothing(shared_run, tiny_corpus_module, tmp_path, args, expected,
                                                     capsys, monkeypatch):
    command, *rest = [a.format(tmp=tmp_path) for a in args]
    where = {"train": ["--data", str(tiny_corpus_module), *([] if "--out" in rest else ["--out", str(shared_run)])],
             "translate": ["--checkpoint", str(shared_run)],
             "evaluate": ["--checkpoint", str(shared_run), "--data", str(tiny_corpus_module)],
             "average": [str(shared_run)]}[command]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"one\n")))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in [*tmp_path.rglob("*"), *shared_run.rglob("*")])
    with pytest.raises(SystemExit) as exit:
        main([command, *where, *rest])
    printed = capsys.readouterr().err.splitlines()
    line = exit.value.code if isinstance(exit.value.code, str) else printed[-1]  # argparse: usage, then error
    assert "\n" not in line and expected in line and "error: " in line, line
    assert sorted((p.name, p.stat().st_mtime_ns) for p in [*tmp_path.rglob("*"), *shared_run.rglob("*")]) == before


def test_a_corpus_file_cut_short_is_refused_in_a_line_before_training(tiny_corpus, tmp_path, capsys,
                                                                      monkeypatch):
    """A gzipped training file cut short: one line naming it, no run folder, nothing cached."""
    import gzip

    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "cache"))
    whole = gzip.compress((tiny_corpus / "train.de").read_bytes())
    (tiny_corpus / "train.de").unlink()
    (tiny_corpus / "train.de.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SystemExit) as exit:
        main(_train_args(tiny_corpus, tmp_path / "run"))
    line = exit.value.code if isinstance(exit.value.code, str) else capsys.readouterr().err.splitlines()[-1]
    assert "\n" not in line and f"{tiny_corpus / 'train.de.gz'} is not a whole gzip file" in line, line
    assert not (tmp_path / "run").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_lowercase_travels_with_the_checkpoint_to_translate_and_evaluate(tiny_corpus, tmp_path, capsys):
    for path in tiny_corpus.iterdir():  # capitals the lowercased model never sees
        path.write_text(path.read_text().title())
    out = tmp_path / "lc"
    assert main(_train_args(tiny_corpus, out, "--lowercase")) == 0
    assert "(lowercased text)" in capsys.readouterr().out
    state = load_checkpoint(out / "checkpoint-00000001.pt")
    vocabulary = json.loads(state["tokenizer"])["model"]["vocab"]
    assert not any(char.isupper() for token in vocabulary for char in token)
    # real text: punctuation split from words, so no token glues a hyphen to a letter
    assert state["training_config"]["split_punctuation"] is True
    assert "-" in vocabulary and not [t for t in vocabulary if "-" in t and len(t) > 1]
    cased, lower = tmp_path / "cased.en", tmp_path / "lower.en"
    cased.write_text("Twenty-One\nSixty Four\nONE\n")
    lower.write_text(cased.read_text().lower())
    outputs = []
    for source in (cased, lower):
        target = source.with_suffix(".de")
        assert main(["translate", "--checkpoint", str(out), "--input", str(source), "--output", str(target)]) == 0
        outputs.append(target.read_text())
    assert outputs[0] == outputs[1], "cased input translates as its lowercase"
    assert "trained on lowercased text" in capsys.readouterr().err
    scores = tmp_path / "scores.jsonl"
    assert main(["evaluate", "--checkpoint", str(out), "--data", str(tiny_corpus), "--split", "val",
                 "--beam", "1", "--json", str(scores), "--output", str(tmp_path / "hyp.de")]) == 0
    record = json.loads(scores.read_text())
    hypotheses = (tmp_path / "hyp.de").read_text().splitlines()
    references = (tiny_corpus / "val.de").read_text().splitlines()
    assert record["lowercase"] is True and "case:lc" in record["signature"]
    assert record["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert record["exact_match"] == sum(h == r.lower() for h, r in zip(hypotheses, references)) / 8
    with pytest.raises(SystemExit, match="a resumed run keeps its checkpoint's"):
        main(["train", "--resume", str(out), "--max-steps", "2", "--lowercase", "--out", str(out)])
    resumed = tmp_path / "resumed"
    assert main(["train", "--resume", str(out), "--max-steps", "2", "--out", str(resumed)]) == 0
    assert load_checkpoint(resumed / "checkpoint-00000002.pt")["tokenizer"] == state["tokenizer"]


def test_data_fetches_multi30k_into_the_folder_given(tmp_path, monkeypatch, capsys):
    """The command's path through the library: the languages and folder it is given reach
    fetch_multi30k; a failed fetch is one line (served here from a local folder)."""
    import functools
    import gzip
    import hashlib
    import http.server
    import threading

    from transformer.corpora import fetch_multi30k

    served = tmp_path / "served"
    served.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "fr"):
            (served / f"{split}.{lang}.gz").write_bytes(gzip.compress(f"{split} {lang}\n".encode()))
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in served.iterdir()}
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=served)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        monkeypatch.setattr(cli, "fetch_multi30k", functools.partial(fetch_multi30k, url=url, checksums=sums))
        assert main(["data", "multi30k", "--out", str(tmp_path / "m30k"), "--languages", "en", "fr"]) == 0
        assert sorted(p.name for p in (tmp_path / "m30k").iterdir()) == sorted(sums)
        assert "(checked)" in capsys.readouterr().out
        (served / "val.fr.gz").unlink()
        with pytest.raises(SystemExit, match=r"^error: could not fetch .*val.fr.gz"):
            main(["data", "multi30k", "--out", str(tmp_path / "other"), "--languages", "en", "fr"])
    finally:
        server.shutdown()
        server.server_close()


def test_a_run_picks_its_device_once_and_plans_its_schedule_before_the_first_update(tiny_corpus, tmp_path,
                                                                                  monkeypatch):
    """The goals of issue 110, through `python -m transformer train` in this process: pick_device is called
    once for a run (the plan decides the device; the timer and the Trainer read it from the plan), and a run
    of minutes has its schedule, projected from the update timed before the first, in the printed plan, in
    plan.json and in each checkpoint."""
    import sys as _sys

    calls = []
    for name, module in list(_sys.modules.items()):
        if name.startswith("transformer") and hasattr(module, "pick_device"):
            original = module.pick_device
            monkeypatch.setattr(module, "pick_device",
                                lambda device="auto", original=original: calls.append(device) or original(device))
    out = tmp_path / "run"
    assert main(["train", "--data", str(tiny_corpus), "--vocab-size", "60", "--max-tokens", "200",
                 "--max-minutes", "0.01", "--checkpoint-minutes", "0.002", "--precision", "fp32",
                 "--out", str(out)]) == 0
    assert calls == ["auto"], "one call, for the whole run"
    saved = json.loads((out / "plan.json").read_text())
    assert saved["training"]["device"] == "cpu"
    why = {d["setting"]: d["why"] for d in saved["decisions"]}
    assert why["device"] == "auto: CUDA, then MPS, then CPU"
    first = saved["schedule"]
    assert first["kind"] == "planned" and first["updates"] is not None
    assert why["rate"] == first["why"] and re.match(r"(one update took [\d.]+ s|measured at update 30)", first["why"])
    for path in out.glob("checkpoint-*.pt"):
        assert load_checkpoint(path)["plan"]["schedule"]["updates"] is not None, path
