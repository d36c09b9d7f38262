"""Tests of transformer/checkpoints.py (book/checkpoints.md)."""

import os
import pathlib
import shutil
import stat
from dataclasses import asdict
from unittest import mock

import pytest
import torch
from tokenizers import Tokenizer, models

from transformer import (
    Trainer,
    Transformer,
    TransformerConfig,
    average_checkpoints,
    final_model,
    last_checkpoints,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from transformer.checkpoints import (
    checkpoint_path,
    keep_newest_checkpoints,
    newest_checkpoints,
    training_checkpoint,
    write_final_model,
)
from transformer.files import building_folder, write_atomically

TINY = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=1)
TOKENIZER = Tokenizer(models.WordLevel({f"w{i}": i for i in range(40)}, unk_token="w1")).to_str()


def _model_checkpoints(folder, steps, config=TINY, seed=0):
    """A checkpoint of a freshly initialised model for each step (the weights differ)."""
    torch.manual_seed(seed)
    for step in steps:
        state = {"model": Transformer(config).state_dict(), "model_config": asdict(config),
                 "tokenizer": TOKENIZER, "step": step}
        save_checkpoint(state, folder / f"checkpoint-{step:08d}.pt")
    return newest_checkpoints(folder)


def test_write_atomically_leaves_the_old_file_when_the_write_fails(tmp_path):
    path = write_atomically(tmp_path / "a" / "out.txt", lambda file: file.write(b"first"))
    assert path.read_bytes() == b"first"

    def failing(file):
        file.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomically(path, failing)
    assert path.read_bytes() == b"first" and os.listdir(path.parent) == ["out.txt"]


def test_a_folder_is_replaced_only_when_whole_and_kept_after_an_error(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        with building_folder(folder) as building:
            (building / "new.txt").write_text("half")
            raise RuntimeError("disk full")
    assert [p.name for p in tmp_path.iterdir()] == ["cache"], "no building folder left"
    assert [p.name for p in folder.iterdir()] == ["old.txt"]
    with building_folder(folder) as building:
        (building / "new.txt").write_text("new")
        assert [p.name for p in folder.iterdir()] == ["old.txt"], "not before the end"
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]
    assert [p.name for p in folder.iterdir()] == ["new.txt"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask, "as os.mkdir makes one"


def test_a_folder_another_process_put_in_place_first_is_kept_when_asked(tmp_path):
    folder = tmp_path / "cache"
    for keep_theirs in (True, False):
        context = building_folder(folder, keep_theirs=keep_theirs)
        building = context.__enter__()
        (building / "mine.txt").write_text("mine")
        # the other process renames its folder into place between our rmtree and rename
        real_rmtree = shutil.rmtree

        def theirs_arrive(path, ignore_errors=False):
            real_rmtree(path, ignore_errors=ignore_errors)
            if path == folder:
                folder.mkdir()
                (folder / "theirs.txt").write_text("theirs")

        with mock.patch("transformer.files.shutil.rmtree", theirs_arrive):
            if keep_theirs:
                context.__exit__(None, None, None)
            else:
                with pytest.raises(OSError):
                    context.__exit__(None, None, None)
        assert [p.name for p in folder.iterdir()] == ["theirs.txt"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
        real_rmtree(folder)


def test_averaging_equal_checkpoints_returns_the_same_weights(tmp_path):
    path = _model_checkpoints(tmp_path, [1])[0]
    averaged = average_checkpoints([path, path, path])
    for name, weight in load_checkpoint(path)["model"].items():
        assert torch.equal(averaged["model"][name], weight), name


def test_averaging_is_the_mean_and_loads_as_a_model(tmp_path):
    _model_checkpoints(tmp_path, [1, 2, 3, 4])
    paths = last_checkpoints(tmp_path, 3)
    assert [p.name for p in paths] == ["checkpoint-00000002.pt", "checkpoint-00000003.pt", "checkpoint-00000004.pt"]
    weights = [torch.load(p, weights_only=True)["model"] for p in paths]
    averaged = average_checkpoints(paths)
    for name in weights[0]:
        torch.testing.assert_close(averaged["model"][name], sum(w[name] for w in weights) / 3)
    assert not torch.equal(averaged["model"]["encoder.layers.0.feed_forward.w_1.weight"],
                           weights[-1]["encoder.layers.0.feed_forward.w_1.weight"])
    save_checkpoint(averaged, tmp_path / "average.pt")
    model, _ = load_model(tmp_path / "average.pt")
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, averaged["model"][name]), name
    with pytest.raises(ValueError, match="weights only"):
        Trainer.resume(tmp_path / "average.pt")


def test_averaging_refuses_checkpoints_of_different_runs(tmp_path):
    a = _model_checkpoints(tmp_path / "a", [1])
    b = _model_checkpoints(tmp_path / "b", [1], TransformerConfig(**{**asdict(TINY), "d_ff": 64}))
    with pytest.raises(ValueError, match="only checkpoints of one training run"):
        average_checkpoints([a[0], b[0]])
    with pytest.raises(ValueError, match="asked for the last 5 checkpoints of .* it holds 1"):
        last_checkpoints(tmp_path / "a", 5)
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def _fake_checkpoints(folder, steps):
    """Weights-only checkpoints of one run whose single weight equals the step."""
    for step in steps:
        state = {"model_config": {}, "tokenizer": "t", "model": {"w": torch.tensor([float(step)])}, "step": step}
        save_checkpoint(state, folder / f"checkpoint-{step:08d}.pt")


def test_final_model_averages_the_newest_checkpoints_of_the_last_third(tmp_path):
    _fake_checkpoints(tmp_path, [200, 400, 600, 800, 1000, 1200])
    path, note = write_final_model(tmp_path, n=5)
    # the last third of 1200 steps starts at step 800: mean of 800, 1000, 1200
    assert path.name == "checkpoint_average.pt" and load_checkpoint(path)["model"]["w"].item() == 1000
    assert "800, 1000, 1200" in note
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == path.name, "lists after the checkpoints"
    assert final_model(tmp_path) == path
    assert load_checkpoint(write_final_model(tmp_path, n=2)[0])["model"]["w"].item() == 1100, "newest 2"
    _fake_checkpoints(tmp_path, [1400])  # the run resumed: the average is stale
    assert final_model(tmp_path).name == "checkpoint-00001400.pt"


def test_final_model_is_the_newest_checkpoint_when_nothing_can_be_averaged(tmp_path):
    _fake_checkpoints(tmp_path, [100, 1000])
    path, note = write_final_model(tmp_path)
    assert path.name == "checkpoint-00001000.pt" and "fewer than 2" in note
    assert not (tmp_path / "checkpoint_average.pt").exists() and final_model(tmp_path) == path
    _fake_checkpoints(tmp_path, [800, 900])
    write_final_model(tmp_path)
    path, note = write_final_model(tmp_path, n=1)
    assert path.name == "checkpoint-00001000.pt" and "off" in note
    assert not (tmp_path / "checkpoint_average.pt").exists(), "a stale average is removed"
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        write_final_model(tmp_path / "empty")


def test_truncated_and_foreign_checkpoints_raise_clear_errors(tmp_path):
    good = save_checkpoint({"step": 1, "weights": torch.ones(1000)}, tmp_path / "good.pt")
    assert load_checkpoint(good)["step"] == 1
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(ValueError, match="not a readable checkpoint") as refused:
        load_checkpoint(truncated)
    reason = str(refused.value).split("corrupt?): ")[1]  # torch's first sentence only
    assert reason and "\n" not in reason and ". " not in reason and len(reason) < 120
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(ValueError, match="not a transformer checkpoint"):
        load_checkpoint(foreign)
    pickled = tmp_path / "pickled.pt"
    torch.save({"format": "transformer-checkpoint-v1", "evil": pathlib.PurePosixPath("/etc")}, pickled)
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(pickled)  # weights_only refuses arbitrary objects
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


def test_newest_checkpoints_sort_by_step_and_a_folder_resumes_from_its_newest(tmp_path):
    for step in (900, 10, 1200):  # written out of order; 8-digit steps sort by name
        (tmp_path / f"checkpoint-{step:08d}.pt").write_bytes(b"")
    (tmp_path / "checkpoint_average.pt").write_bytes(b"")  # not a checkpoint of training
    steps = [int(p.stem.split("-")[1]) for p in newest_checkpoints(tmp_path)]
    assert steps == [10, 900, 1200]
    assert [p.name for p in newest_checkpoints(tmp_path, 2)] == [
        "checkpoint-00000900.pt", "checkpoint-00001200.pt"]
    assert len(newest_checkpoints(tmp_path, 5)) == 3, "asking for more gives all, not a wrap"
    assert newest_checkpoints(tmp_path, 0) == []
    with pytest.raises(ValueError, match="checkpoint-00001200.pt is not a readable"):
        training_checkpoint(tmp_path)  # the newest, which is empty here
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=f"no checkpoint-\\*.pt in {empty}"):
        training_checkpoint(empty)


def test_a_run_keeps_its_newest_checkpoints_by_step_and_nothing_else_is_deleted(tmp_path):
    assert checkpoint_path(tmp_path, 1200) == tmp_path / "checkpoint-00001200.pt"
    for step in (900, 10, 1200, 99):
        checkpoint_path(tmp_path, step).write_bytes(b"")
    (tmp_path / "checkpoint_average.pt").write_bytes(b"")
    (tmp_path / "metrics.jsonl").write_text("")
    keep_newest_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-00000900.pt", "checkpoint-00001200.pt", "checkpoint_average.pt",
        "metrics.jsonl"]
    keep_newest_checkpoints(tmp_path, 5)  # fewer than n: all stay
    assert len(newest_checkpoints(tmp_path)) == 2
    with pytest.raises(ValueError, match="0 or more, not -1"):
        keep_newest_checkpoints(tmp_path, -1)
    keep_newest_checkpoints(tmp_path, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_average.pt", "metrics.jsonl"]
