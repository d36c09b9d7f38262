"""Tests of transformer/trainer.py (book/trainer.md): the Trainer and its collaborators."""

import concurrent.futures
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace

import pytest
import torch
import torch.multiprocessing as mp

from transformer import (
    Trainer,
    Transformer,
    TrainingConfig,
    TransformerConfig,
    load_checkpoint,
    load_corpus,
    load_model,
    save_checkpoint,
    evaluate,
)
from transformer._book import train_once
from transformer.runs import REPLAN_EVERY
from transformer.trainer import (
    check_vocabulary,
    compile_options,
    rank_sampler,
)

TINY = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1)


def _config(corpus, **overrides):
    settings = dict(data=str(corpus), vocab_size=60, max_tokens=60, max_steps=6, warmup_steps=10, lr_scale=1.0,
                    precision="fp32", device="cpu", log_every=2, eval_every=3, checkpoint_minutes=1e9)
    return TrainingConfig(**{**settings, **overrides})


def test_a_tiny_model_overfits_a_handful_of_pairs(tiny_corpus, tmp_path):
    torch.manual_seed(0)
    trainer = Trainer.from_config(TransformerConfig(d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0),
                      _config(tiny_corpus, max_steps=150, warmup_steps=40, lr_scale=0.3, max_tokens=400, eval_every=1000,
                              label_smoothing=0.0),
                      tmp_path / "run")
    result = trainer.fit(progress=False)
    assert result["loss"] < 0.05
    seen = load_corpus(str(tiny_corpus)).splits["train"][:16]
    model, tokenizer = trainer.model, trainer.data.tokenizer
    assert evaluate(model, tokenizer, seen, beam_size=1)[0].exact_match == 1.0
    assert evaluate(model, tokenizer, seen, beam_size=4)[0].exact_match == 1.0, (
        "beam search keeps what greedy finds on a sure model")


@pytest.mark.parametrize("pack_length", [None, 64])
def test_train_batches_follow_the_sampler_over_epochs_and_from_any_position(tiny_corpus, tmp_path, pack_length):
    config = _config(tiny_corpus, max_tokens=200, pack_length=pack_length)
    trainer = Trainer.from_config(TINY, config, tmp_path / "run")
    stream, split = trainer.batches, trainer.data.train
    plan = [(e, i) for e in range(3) for i in range(len(stream.sampler.epoch(e)))]
    expected = [stream.sampler.batch(split, stream.sampler.epoch(e)[i]) for e, i in plan]
    for want in expected:  # the uninterrupted stream, prefetched in a thread
        got = stream.next()
        assert torch.equal(got.src, want.src) and torch.equal(got.tgt_out, want.tgt_out)
        assert (got.segments is None) == (pack_length is None)
    middle = len(plan) // 2
    stream.seek(*plan[middle])
    for want in expected[middle:]:
        assert torch.equal(stream.next().tgt_in, want.tgt_in)
    assert (stream.epoch, stream.index) == (plan[-1][0], plan[-1][1] + 1), "the next position"
    stream.close()


@pytest.mark.parametrize("pack_length, precision", [(None, "fp32"), (48, "fp32"), (None, "fp16")])
def test_resume_gives_the_same_parameters_as_an_uninterrupted_run(tiny_corpus, tmp_path, pack_length, precision):
    """fp16: the loss scaler's state (its scale, its count of updates without overflow) travels too."""
    settings = dict(max_tokens=200, pack_length=pack_length, precision=precision)
    whole = Trainer.from_config(TINY, _config(tiny_corpus, **settings), tmp_path / "whole")
    whole.fit(progress=False)
    first = Trainer.from_config(TINY, _config(tiny_corpus, **settings, max_steps=4), tmp_path / "split")
    first.fit(progress=False)
    resumed = Trainer.resume(tmp_path / "split", max_steps=6)
    assert resumed.step == 4 and (resumed.batches.epoch, resumed.batches.index) == (first.batches.epoch, first.batches.index)
    resumed.fit(progress=False)
    assert len(whole.batches.sampler) < 6 and whole.batches.epoch == resumed.batches.epoch >= 1, "the run crossed an epoch boundary"
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.scaler.state_dict() == whole.scaler.state_dict()
    assert resumed.scaler.is_enabled() == (precision == "fp16")


def _fp16_losses(corpus, folder, precision, seed=0, steps=200):
    """Each update's loss per token of the tiny preset's model (no dropout: the runs differ by their
    arithmetic alone) on the number pairs."""
    config = _config(corpus, max_tokens=120, max_steps=steps, precision=precision, seed=seed)
    trainer = Trainer.from_config(TransformerConfig.tiny(dropout=0.0), config, folder / f"{precision}{seed}")
    return [loss.item() / tokens for loss, tokens in (trainer.train_step() for _ in range(steps))], trainer


@pytest.mark.slow
def test_fp16_with_loss_scaling_trains_as_fp32_does_within_the_noise_of_a_seed(tiny_corpus, tmp_path):
    """The path a GPU without bf16 (a T4) takes, on the CPU (autocast and GradScaler run there). Two bounds:
    the first update, same weights and batch, within one fp16 spacing at 1 (2^-10: 10 stored significant
    bits; products accumulate in fp32, the loss is computed in fp32); and over 200 updates, each window
    of 50 nearer the fp32 run's than another seed's fp32 run is (the arithmetic moves the run less than the
    order of its batches and its initial weights do). About 40 s: fp16 products are emulated on a CPU."""
    fp32, _ = _fp16_losses(tiny_corpus, tmp_path, "fp32")
    fp16, trainer = _fp16_losses(tiny_corpus, tmp_path, "fp16")
    other, _ = _fp16_losses(tiny_corpus, tmp_path, "fp32", seed=1)
    assert trainer.dtype is torch.float16 and trainer.scaler.is_enabled()
    assert abs(fp16[0] / fp32[0] - 1) < 2**-10, (fp16[0], fp32[0])
    for start in range(0, 200, 50):
        def window(losses):
            return sum(losses[start:start + 50]) / 50
        assert abs(window(fp16) - window(fp32)) < abs(window(other) - window(fp32)), start
    assert window(fp16) < 0.5 * sum(fp16[:10]) / 10, "and it learns"


def test_an_fp16_update_whose_gradients_overflow_is_skipped_and_the_run_goes_on(tiny_corpus, tmp_path):
    """Oracle: the weights before the update, and GradScaler's rule (an overflow halves the scale)."""
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=120, precision="fp16"), tmp_path / "run")
    trainer.train_step()
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    scale = trainer.scaler.get_scale()
    weight = trainer.model.output.linear.weight
    hook = weight.register_hook(lambda grad: grad * float("inf"))  # one gradient overflows
    trainer.train_step()
    hook.remove()
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items()), "skipped"
    assert trainer.scaler.get_scale() == scale / 2 and trainer.step == 2
    trainer.train_step()
    assert not torch.equal(trainer.model.output.linear.weight, before["output.linear.weight"]), "goes on"
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())


def test_train_once_trains_a_configuration_once_and_again_when_it_changes(tiny_corpus, tmp_path, monkeypatch):
    config = _config(tiny_corpus, max_tokens=200)
    first, result = train_once(TINY, config, tmp_path)
    direct = Trainer.from_config(TINY, config, tmp_path / "direct")  # the oracle: a plain run
    assert direct.fit(progress=False)["val_loss"] == result["val_loss"]
    calls = []

    def counted_fit(self, progress=True):  # what fit leaves behind: the folder and a result
        calls.append(self)
        self.out.mkdir(parents=True, exist_ok=True)
        return {"step": self.step}

    monkeypatch.setattr(Trainer, "fit", counted_fit)
    again, cached = train_once(TINY, config, tmp_path)
    assert not calls and cached == result and again.out == first.out and again.step == 6
    for a, b in zip(direct.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    other, _ = train_once(TINY, _config(tiny_corpus, max_tokens=200, max_steps=5), tmp_path)
    assert len(calls) == 1 and other.out != first.out, "another setting is another run"
    (first.out / "result.json").unlink()  # as if the run had been cut short
    train_once(TINY, config, tmp_path)
    assert len(calls) == 2, "a run without its result is trained again"


def test_train_once_called_twice_at_once_trains_once(tiny_corpus, tmp_path, monkeypatch):
    """Two chapters (or two test workers) asking for one run together: the second waits for
    the first's run and loads it, instead of training it beside it in the same folder."""
    config, fits, fit = _config(tiny_corpus, max_tokens=200), [], Trainer.fit

    def slow_fit(self, progress=True):  # the second caller arrives while the first trains
        fits.append(self)
        time.sleep(0.5)
        return fit(self, progress)

    monkeypatch.setattr(Trainer, "fit", slow_fit)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: train_once(TINY, config, tmp_path)[1], range(2)))
    assert len(fits) == 1 and results[0] == results[1]


def test_prefetching_does_not_change_the_run(tiny_corpus, tmp_path):
    config = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    runs = []
    for prefetch in (0, 3):
        trainer = Trainer.from_config(config, _config(tiny_corpus, prefetch=prefetch, max_tokens=200),
                                      tmp_path / f"prefetch-{prefetch}")
        trainer.fit(progress=False)
        runs.append(trainer.model.state_dict())
    for name, weights in runs[0].items():
        assert torch.equal(weights, runs[1][name]), f"prefetching changed {name}"


def test_max_tokens_is_the_update_shared_by_accumulated_batches(tiny_corpus, tmp_path):
    one = Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=240), tmp_path / "one")
    four = Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=240, accumulate=4), tmp_path / "four")
    assert one.batches.sampler.max_tokens == 240 and four.batches.sampler.max_tokens == 60
    with pytest.raises(ValueError, match=r"max_tokens=8 per update, over 1 process\(es\) x 4 accumulated batch"):
        Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=8, accumulate=4), tmp_path / "too-small")


def test_checkpoints_are_atomic_kept_and_loadable(tiny_corpus, tmp_path):
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_steps=6, checkpoint_every=1, keep_checkpoints=2), tmp_path / "run")
    trainer.fit(progress=False)
    names = sorted(p.name for p in (tmp_path / "run").iterdir() if p.name != ".lock")
    assert names == ["checkpoint-00000005.pt", "checkpoint-00000006.pt", "metrics.jsonl", "plan.json"]
    model, tokenizer = load_model(tmp_path / "run" / "checkpoint-00000006.pt")
    for a, b in zip(model.state_dict().values(), trainer.model.state_dict().values()):
        assert torch.equal(a, b)
    assert tokenizer.to_str() == trainer.data.tokenizer.to_str()
    with pytest.raises(Exception):
        save_checkpoint({"bad": lambda: None}, tmp_path / "x.pt")  # lambdas cannot be pickled
    assert not list(tmp_path.glob("x.pt*")), "nothing half-written is left"


def test_ctrl_c_mid_step_finishes_the_step_and_resumes_exactly(tiny_corpus, tmp_path):
    whole = Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=200), tmp_path / "whole")
    whole.fit(progress=False)
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_tokens=200), tmp_path / "run")
    original, calls = trainer.forward_loss, []

    def ctrl_c_in_step_4(*batch):
        calls.append(1)
        if len(calls) == 4:  # after the step took its batch, before the update
            os.kill(os.getpid(), signal.SIGINT)
        return original(*batch)

    trainer.forward_loss = ctrl_c_in_step_4
    handler = signal.getsignal(signal.SIGINT)  # Python's, or SIG_IGN in a background job
    result = trainer.fit(progress=False)
    assert result["interrupted"] == signal.SIGINT and result["step"] == 4
    assert signal.getsignal(signal.SIGINT) is handler, "the handler is restored"
    resumed = Trainer.resume(tmp_path / "run")
    assert resumed.step == 4
    resumed.fit(progress=False)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps), "one record per step, in order"


@pytest.mark.slow
def test_killed_at_any_moment_a_resumed_run_ends_as_the_uninterrupted_one(tiny_corpus, tmp_path):
    """Crash safety as databases test it: one run of real processes, stopped by SIGKILL, SIGINT,
    SIGTERM and SIGKILL again (checkpoints are written every step, so the SIGKILLs can land in
    a write), resumed after each, ends as a run that was never stopped. Processes, because a
    signal stops a process: six of them, the uninterrupted one beside the rest."""
    def train(out, *more):
        return [sys.executable, "-m", "transformer", "train", "--data", str(tiny_corpus), "--vocab-size", "60",
                "--max-tokens", "200", "--max-steps", "10", "--checkpoint-every", "1", "--keep-checkpoints", "3",
                "--precision", "fp32", "--eval-every", "5", "--out", str(out), *more]

    def start(*command):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def newest(out):
        return max((p.name for p in out.glob("checkpoint-*.pt")), default="")

    whole, out = start(*train(tmp_path / "whole")), tmp_path / "killed"
    process = start(*train(out))
    # two steps apart: a SIGKILL in the write of the next checkpoint still leaves the
    # resumed process a step to make before the next signal
    for how, after in [(signal.SIGKILL, 2), (signal.SIGINT, 4), (signal.SIGTERM, 6), (signal.SIGKILL, 8)]:
        while newest(out) < f"checkpoint-{after:08d}.pt":
            assert process.poll() is None, f"the run ended before it could be stopped after step {after}"
            time.sleep(0.01)
        process.send_signal(how)
        assert process.wait() == (-9 if how == signal.SIGKILL else 128 + how), (how.name, after)
        assert newest(out) < "checkpoint-00000010.pt", f"{how.name} after step {after} came too late"
        process = start(*train(out, "--resume", str(out)))
    assert process.wait() == 0 and whole.wait() == 0
    expected = load_checkpoint(tmp_path / "whole" / "checkpoint-00000010.pt")["model"]
    for name, weights in load_checkpoint(out / "checkpoint-00000010.pt")["model"].items():
        assert torch.equal(weights, expected[name]), f"{name} differs"
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and not list(out.glob("*.tmp"))


def test_a_run_that_names_no_schedule_plans_one_for_minutes_alone():
    """The rule written out: planned for max_minutes without max_steps or a cooldown, the
    paper's otherwise (the GPU's default step budget too); a schedule named is kept."""
    assert TrainingConfig(max_minutes=10).schedule == "planned"
    assert TrainingConfig(max_steps=100).schedule == "paper"
    assert TrainingConfig(max_steps=100, max_minutes=10).schedule == "paper"
    assert TrainingConfig(max_minutes=10, cooldown=0.2).schedule == "paper"
    assert TrainingConfig(max_minutes=10, schedule="paper").schedule == "paper"
    assert TrainingConfig(max_steps=100, schedule="planned").schedule == "planned"
    with pytest.raises(ValueError, match=r"schedule must be one of \('paper', 'planned'\); got ''"):
        TrainingConfig(max_minutes=10, schedule="")


def test_bad_training_configs_raise():
    with pytest.raises(ValueError, match="set max_steps or max_minutes"):
        TrainingConfig()
    with pytest.raises(ValueError, match="precision must be"):
        TrainingConfig(max_steps=1, precision="fp8")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        TrainingConfig(max_steps=1, label_smoothing=1.0)
    for cooldown in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"cooldown must be in \[0, 1\); got "):
            TrainingConfig(max_steps=1, cooldown=cooldown)
    with pytest.raises(ValueError, match=r"schedule must be one of \('paper', 'planned'\); got 'cosine'"):
        TrainingConfig(max_steps=1, schedule="cosine")
    with pytest.raises(ValueError, match="give schedule='planned' or a cooldown, not both"):
        TrainingConfig(max_steps=1, schedule="planned", cooldown=0.2)
    with pytest.raises(ValueError, match="pack_length must be a multiple of 8 .*; got 50"):
        TrainingConfig(max_steps=1, pack_length=50)
    with pytest.raises(ValueError, match="pack_length must be a positive integer; got 0"):
        TrainingConfig(max_steps=1, pack_length=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world_size, port, corpus, out, overrides=None):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    config = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    trainer = Trainer.from_config(config, _config(corpus, **(overrides or {"max_steps": 3})), out)
    trainer.fit(progress=False)
    torch.save(trainer.model.state_dict(), f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_ddp_on_two_cpu_processes_matches_one_process_with_accumulation(tiny_corpus, tmp_path):
    out = tmp_path / "ddp"
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tiny_corpus), str(out)), nprocs=2, join=True)
    rank0, rank1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    config = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    single = Trainer.from_config(config, _config(tiny_corpus, max_steps=3, accumulate=2), tmp_path / "single")
    single.fit(progress=False)
    for name, expected in single.model.state_dict().items():
        assert torch.equal(rank0[name], rank1[name]), f"replicas differ in {name}"
        if name.endswith("w_qkv.bias"):
            # The bias of the keys (rows 32:64) has an exact gradient of zero (softmax ignores a
            # constant added to every score of a query); Adam divides the rounding noise by its
            # own size and takes full steps on it.
            keep = torch.cat([torch.arange(32), torch.arange(64, 96)])
            rank0, expected = {**rank0, name: rank0[name][keep]}, expected[keep]
        torch.testing.assert_close(rank0[name], expected, atol=1e-6, rtol=1e-5, msg=name)
    assert not torch.equal(rank0["encoder.layers.0.feed_forward.w_1.weight"], Trainer.from_config(config, _config(tiny_corpus), tmp_path / "fresh").model.state_dict()["encoder.layers.0.feed_forward.w_1.weight"]), "training moved the weights"


@pytest.mark.slow
def test_ddp_processes_plan_and_cool_down_by_rank_0s_clock(tiny_corpus, tmp_path):
    """A run of minutes plans its schedule from rank 0's measured rate and falls to 0 by
    rank 0's clock: each process's own would give each replica its own rate, and the
    replicas would drift apart."""
    out = tmp_path / "ddp"
    # 6 s: past the plan (update 30) with time to fall, on a CPU that the other test
    # processes load (3 s was too short once: the plan came when the budget was spent);
    # rank 0's clock broadcast every update
    overrides = {"max_steps": 10_000, "max_minutes": 0.1, "log_every": 1, "schedule": "planned"}
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tiny_corpus), str(out), overrides), nprocs=2, join=True)
    rank0, rank1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"replicas differ in {name}"
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    planned = [r["step"] for r in logged if "plan" in r]
    assert planned[0] == 30, "planned after update 30"
    assert all((step - 30) % REPLAN_EVERY == 0 for step in planned), "then measured again every so often"
    updates = [r for r in logged if "lr" in r]  # logged every update
    assert updates[-1]["step"] > 30, "the budget was spent before the plan: no fall to check"
    last = updates[-1]  # the run's last update
    peak = 0.7 * 32**-0.5 * 10**-0.5  # 0.7 of the paper's curve at its warm-up, written out
    assert last["lr"] < 0.9 * peak, "the rate fell at the end of the budget"


@pytest.mark.gpu
def test_bf16_training_on_cuda_reduces_the_loss(tiny_corpus, tmp_path):
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_steps=60, precision="bf16", device="cuda", eval_every=20), tmp_path / "gpu")
    first = trainer.validate()["val_loss"]
    assert trainer.fit(progress=False)["val_loss"] < first


# Compiling the step costs about 45 s on 2 cores, whatever the model's size (most of it is
# the C++ compiler's), so the two tests below compile one step: packed rows of one length
# give it one shape, and Inductor's cache gives the second test the first one's code.
COMPILED = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.0)


def _compiled_config(corpus, **overrides):
    return _config(corpus, **{"max_tokens": 200, "pack_length": 48, "compile": True, **overrides})


@pytest.mark.slow
def test_compiled_packed_steps_on_a_cpu_match_the_eager_steps(tiny_corpus, tmp_path):
    """torch.compile of the packed step (segment masks and positions built inside the graph):
    four updates from the same weights on the same batches give the eager losses."""
    losses = {}
    for compiled in (False, True):
        trainer = Trainer.from_config(COMPILED, _compiled_config(tiny_corpus, compile=compiled), tmp_path / f"c{compiled}")
        losses[compiled] = [(lambda s, n: s.item() / n)(*trainer.train_step()) for _ in range(4)]
    assert losses[False][-1] < losses[False][0], "the steps train"
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]), rtol=1e-4, atol=0)


@pytest.mark.slow
def test_compiled_training_runs_and_checkpoints_the_plain_model(tiny_corpus, tmp_path):
    """fit with the compiled step (the one above: its code comes from Inductor's cache) and
    its validation; the checkpoint holds the model's own parameter names."""
    trainer = Trainer.from_config(COMPILED, _compiled_config(tiny_corpus, max_steps=2), tmp_path / "compiled")
    result = trainer.fit(progress=False)
    assert result["step"] == 2 and math.isfinite(result["val_loss"])
    names = load_checkpoint(tmp_path / "compiled" / "checkpoint-00000002.pt")["model"].keys()
    assert not any(name.startswith("_orig_mod") for name in names), "the checkpoint holds the uncompiled names"


def _eight_cuda_losses(corpus, folder, **settings) -> torch.Tensor:
    """The losses of eight updates on CUDA, each a mean over its target tokens, from the weights
    every Trainer of this config starts from, on the same batches."""
    config = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    trainer = Trainer.from_config(
        config, _config(corpus, device="cuda", pad_multiple=8, max_tokens=200, **settings), folder)
    return torch.tensor([(lambda s, n: s.item() / n)(*trainer.train_step()) for _ in range(8)])


@pytest.mark.gpu
@pytest.mark.parametrize("pack_length", [None, 48])
def test_compiled_fp32_steps_on_cuda_match_the_eager_steps(tiny_corpus, tmp_path, pack_length):
    """Eight updates compiled and eager: each update's loss agrees to 1e-4 (relative); fp32
    differs only in the order of sums."""
    eager, compiled = (_eight_cuda_losses(tiny_corpus, tmp_path / f"c{c}", precision="fp32", compile=c,
                                          pack_length=pack_length) for c in (False, True))
    assert eager[-1] < eager[0], "the steps train"
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("pack_length", [None, 48])
def test_compiled_bf16_steps_on_cuda_stay_as_close_to_fp32_as_the_eager_ones(tiny_corpus, tmp_path, pack_length):
    """bf16 rounds in other places compiled (Inductor keeps a fused kernel's intermediates in
    fp32) than eager (autocast rounds each op's output), and the difference compounds over the
    updates: on one H200, the eighth packed update of the two differed by 3.7%. So each is held
    to the fp32 eager steps from the same weights on the same batches: the first update (the
    same weights) agrees to 1e-2, bf16's rounding (8 bits of mantissa); the compiled steps
    train; and over eight updates their losses stray from fp32 at most twice as far as the
    eager ones, or 5e-2 (the drift seen, with room: these bounds are not yet seen on a GPU)."""
    reference = _eight_cuda_losses(tiny_corpus, tmp_path / "fp32", precision="fp32", compile=False,
                                   pack_length=pack_length)
    eager, compiled = (_eight_cuda_losses(tiny_corpus, tmp_path / f"c{c}", precision="bf16", compile=c,
                                          pack_length=pack_length) for c in (False, True))
    error = {name: ((losses - reference).abs() / reference).tolist() for name, losses in
             (("eager", eager), ("compiled", compiled))}
    assert error["eager"][0] < 1e-2 and error["compiled"][0] < 1e-2, error
    assert compiled[-1] < compiled[0], "the compiled steps train"
    assert max(error["compiled"]) <= max(2 * max(error["eager"]), 5e-2), error


@pytest.mark.gpu
def test_torchrun_with_one_cuda_process_trains_and_resumes(tiny_corpus, tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
                "-m", "transformer", "train"]
    out = tmp_path / "run"
    first = subprocess.run(torchrun + ["--data", str(tiny_corpus), "--vocab-size", "60", "--max-tokens", "200",
                                       "--device", "cuda", "--max-steps", "4", "--log-every", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "on cuda (1 process(es), bfloat16)" in first.stdout, first.stdout
    second = subprocess.run(torchrun + ["--resume", str(out), "--max-steps", "8", "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert load_checkpoint(out / "checkpoint-00000008.pt")["step"] == 8
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r][-1] == 8


def _rates_used(trainer):
    """The first parameter group's rate at each optimizer step, as the step sees it."""
    rates = []
    trainer.optimizer.register_step_pre_hook(lambda optimizer, *_: rates.append(optimizer.param_groups[0]["lr"]))
    return rates


def test_the_cooldown_takes_the_papers_rate_linearly_down_over_the_last_steps(tiny_corpus, tmp_path):
    """Oracle: the paper's formula written out; step k of 10 is taken with (k - 1) / 10 of the
    run done, so a cool-down of 0.4 scales it by min(1, (11 - k) / 4)."""
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_steps=10, cooldown=0.4), tmp_path / "run")
    rates = _rates_used(trainer)
    trainer.fit(progress=False)
    paper = [TINY.d_model**-0.5 * min(k**-0.5, k * 10**-1.5) for k in range(1, 12)]
    factors = [1, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25]
    assert rates == pytest.approx([r * f for r, f in zip(paper, factors)], rel=1e-12)


def test_a_planned_schedule_of_steps_rises_and_falls_as_written_out(tiny_corpus, tmp_path):
    """Oracle: warm-up over a tenth of 20 updates (2), to 0.7 of the paper's curve at its
    warm-up (10), held, then a line to 0 over the last fifth; update u is taken with
    (u - 1) / 20 of the run done."""
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, max_steps=20, schedule="planned"), tmp_path / "run")
    rates = _rates_used(trainer)
    trainer.fit(progress=False)
    peak = 0.7 * TINY.d_model**-0.5 * 10**-0.5
    line = [min(u / 2, (1 - (u - 1) / 20) / 0.2, 1.0) * peak for u in range(1, 21)]
    assert rates == pytest.approx(line, rel=1e-12)
    saved = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert (saved["schedule"]["kind"], saved["schedule"]["warmup"], saved["schedule"]["updates"]) == ("planned", 2, 20)
    assert saved["schedule"]["why"] == "planned for max_steps" and not saved["schedule"]["measure"]
    assert f"planned: peak {peak:.2e} at update 2, 0 after update 20" in trainer.plan.table(), "its true shape"
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not [r for r in logged if "plan" in r], "planned before the first update: nothing decided mid-run"


def test_a_run_of_minutes_plans_its_schedule_after_its_30th_update(tiny_corpus, tmp_path):
    """Oracle: untimed (configurations made by hand), a line to 0.7 of the paper's peak at its
    warm-up (10), held, until update 30; then the schedule measured there, at most that peak, close to 0
    at its last update, where the run stops; measured again every REPLAN_EVERY updates, its end
    moves (in the fall, the fall goes on from the rate reached: the rate never rises). Each schedule is a decision of the plan: in plan.json and in each later checkpoint, with
    its reason; a resumed run reads it back."""
    config = _config(tiny_corpus, max_steps=None, max_minutes=0.1, eval_every=10**6, schedule="planned",
                     checkpoint_minutes=0.02)
    trainer = Trainer.from_config(TINY, config, tmp_path / "run")
    assert trainer.plan.schedule.measure and trainer.plan.schedule.updates is None
    rates = _rates_used(trainer)
    trainer.fit(progress=False)
    peak = 0.7 * TINY.d_model**-0.5 * 10**-0.5
    assert rates[:30] == pytest.approx([min(u / 10, 1.0) * peak for u in range(1, 31)], rel=1e-12)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    at = [(r["step"], {k: v for k, v in r["plan"].items() if k != "text"}) for r in logged if "plan" in r]
    (first_step, first), plans = at[0], [plan for _, plan in at]
    assert first_step == 30 and first["start"] == 30 and first["updates"] > 31, plans
    assert first["start_rate"] == pytest.approx(rates[29], rel=1e-12)
    assert first["why"].startswith("measured at update 30: ") and "updates a minute" in first["why"]
    assert first["peak"] == pytest.approx(peak, rel=1e-12)
    for step, again in at[1:]:  # every REPLAN_EVERY updates after the 30th: the end moved (the fall too)
        assert (step - 30) % REPLAN_EVERY == 0 and again["why"].startswith(f"measured again at update {step:,}: ")
        assert {k: v for k, v in again.items() if k not in ("updates", "fall", "why")} == {
            k: v for k, v in first.items() if k not in ("updates", "fall", "why")}
    top = rates.index(max(rates))  # after the peak the rate never rises, whatever moved
    assert all(b <= a * (1 + 1e-12) for a, b in zip(rates[top:], rates[top + 1:])), rates
    assert max(rates[30:]) <= peak * (1 + 1e-12), "never above the plan's peak"
    assert rates[-1] < 0.3 * peak or trainer.step < plans[-1]["updates"], rates[-1]
    assert json.loads((tmp_path / "run" / "plan.json").read_text())["schedule"] == plans[-1]
    assert trainer.plan.why("rate") == plans[-1]["why"]
    checkpoints = sorted((tmp_path / "run").glob("checkpoint-*.pt"))
    later = [c for c in checkpoints if int(c.stem.split("-")[1]) >= 30]
    for checkpoint in later:  # each holds the schedule in force when it was written
        step = int(checkpoint.stem.split("-")[1])
        assert load_checkpoint(checkpoint)["plan"]["schedule"] == [p for s, p in at if s <= step][-1]
    assert later
    resumed = Trainer.resume(later[0], out=tmp_path / "resumed")
    assert asdict(resumed.plan.schedule) == load_checkpoint(later[0])["plan"]["schedule"], (
        "read back, not measured again")


def test_a_run_resumed_in_its_cooldown_ends_with_the_uninterrupted_runs_weights(tiny_corpus, tmp_path):
    config = _config(tiny_corpus, max_tokens=200, cooldown=0.5, checkpoint_every=4)
    whole = Trainer.from_config(TINY, config, tmp_path / "whole")
    whole.fit(progress=False)
    resumed = Trainer.resume(tmp_path / "whole" / "checkpoint-00000004.pt", out=tmp_path / "resumed")
    rates = _rates_used(resumed)
    resumed.fit(progress=False)
    assert resumed.step == 6 and len(rates) == 2
    paper = [TINY.d_model**-0.5 * min(k**-0.5, k * 10**-1.5) for k in (5, 6)]
    assert rates == pytest.approx([paper[0] * 2 / 3, paper[1] / 3], rel=1e-12), "steps 5 and 6 of 6, cooling"
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_share_too_small_for_the_longest_pair_names_the_arithmetic():
    config = TrainingConfig(max_steps=1, max_tokens=40, accumulate=2)
    lengths = torch.tensor([[5, 6], [15, 12]]).numpy()
    assert rank_sampler(lengths, replace_tokens(config, 80), 0, 1, 1).max_tokens == 40
    with pytest.raises(ValueError, match=r"max_tokens=40 per update, over 2 process\(es\) x 2"):
        rank_sampler(lengths, config, rank=0, world_size=2, pad_multiple=1)


def replace_tokens(config, max_tokens):
    return TrainingConfig(**{**config.__dict__, "max_tokens": max_tokens})


def test_a_model_smaller_than_the_tokenizer_is_refused():
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(50)}, unk_token="w0"))
    def model(src, tgt):
        return Transformer(replace(TINY, src_vocab_size=src, tgt_vocab_size=tgt, share_embeddings=False))

    check_vocabulary(model(50, 60), tokenizer)
    with pytest.raises(ValueError, match=r"vocabularies \(50, 40\) must hold the tokenizer's 50 ids"):
        check_vocabulary(model(50, 40), tokenizer)


def test_lowercase_is_a_setting_of_the_run_and_travels_with_its_checkpoints(tiny_corpus, tmp_path):
    """lowercase=True: a tokenizer that lowercases (its normalizer maps "Eins" to "eins"),
    kept by the checkpoint's settings, so a resumed run keeps it."""
    from transformer.tokenizer import lowercases

    for path in tiny_corpus.iterdir():
        path.write_text(path.read_text().title())
    trainer = Trainer.from_config(TINY, _config(tiny_corpus, lowercase=True, max_steps=2), tmp_path / "lc")
    assert lowercases(trainer.data.tokenizer)
    assert trainer.data.tokenizer.encode("Eins").tokens == trainer.data.tokenizer.encode("eins").tokens
    trainer.fit(progress=False)
    resumed = Trainer.resume(tmp_path / "lc", max_steps=3)
    assert resumed.config.lowercase and lowercases(resumed.data.tokenizer)
    cased = Trainer.from_config(TINY, _config(tiny_corpus), tmp_path / "cased")
    assert not lowercases(cased.data.tokenizer)


@pytest.mark.parametrize(
    "device, pack_length, world_size, accumulate, expected",
    [
        ("cpu", 64, 1, 1, {}),  # compiled on a CPU: Inductor's defaults
        ("cuda", None, 1, 1, {}),  # padded batches change shape: nothing to tune once
        ("cuda", 64, 1, 1, {"coordinate_descent_tuning": True, "triton.cudagraphs": True}),
        ("cuda", 64, 2, 1, {"coordinate_descent_tuning": True}),  # DDP: no graphs
        ("cuda", 64, 1, 2, {"coordinate_descent_tuning": True}),  # accumulation: no graphs
    ],
)
def test_compile_options_tune_fixed_shapes_and_record_graphs_only_when_a_replay_is_safe(
        device, pack_length, world_size, accumulate, expected):
    config = TrainingConfig(pack_length=pack_length, accumulate=accumulate, max_steps=10)
    assert compile_options(config, torch.device(device), world_size) == expected


def test_the_trainer_class_runs_and_does_not_build():
    """Issue 110: the class holds the loop and the step, at most 150 lines; its set-up, build, resume and
    timing are functions beside it, and the device is the plan's (no pick_device in the module)."""
    import inspect

    from transformer import trainer

    assert len(inspect.getsource(Trainer).splitlines()) <= 150
    assert not hasattr(trainer, "pick_device") and not hasattr(Trainer, "time_update")
    for name in ("placed", "precision", "train_batches", "compiled", "time_update", "built_trainer",
                 "resumed_trainer"):
        assert inspect.isfunction(getattr(trainer, name)), name
