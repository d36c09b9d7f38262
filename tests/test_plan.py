"""Tests of transformer/plan.py (book/plan.md): one plan a run, decided before its first update,
printed, saved and read back; the Trainer that runs it and changes none of it."""

import ast
import json
import re
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from unittest import mock

import pytest
import torch

from transformer import Trainer, TrainingConfig, TransformerConfig, load_checkpoint, save_checkpoint
from transformer import devices
from transformer.plan import (
    BUDGET_FITS,
    GPU_TEXT_STEPS,
    SMALL_DATA,
    BudgetFit,
    Decision,
    RunPlan,
    Timing,
    device_settings,
    given_plan,
    make_plan,
)
from transformer.runs import FEW_UPDATES
from transformer.trainer import time_first_update

TINY = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1)
SHAPE = {"d_model": 32, "n_heads": 4, "d_ff": 64, "n_layers": 2}  # TINY but for P_drop
RUN = dict(vocab_size=60, warmup_steps=10, lr_scale=1.0, precision="fp32", device="cpu", log_every=2,
           eval_every=3, checkpoint_minutes=1e9)
HALVE = BudgetFit(halve_batch=True)


def _plan(corpus, seconds=None, fit=HALVE, model=None, tokens=120, shape=SHAPE, **overrides):
    """A plan of the small preset at TINY's shape on the tiny corpus, its batch for real text `tokens`, a
    planned run of minutes alone by default; `seconds`: its update's time as if timed (None: timed), for a
    decision that must not depend on this machine's speed."""
    settings = dict(RUN, data=str(corpus), max_minutes=0.01) | overrides
    preset_data = {"max_tokens": tokens}
    if settings["vocab_size"] is None:  # the preset's vocabulary, as a plain run's (RUN's size)
        del settings["vocab_size"]
        preset_data["vocab_size"] = RUN["vocab_size"]
    timer = time_first_update
    if seconds is not None:
        def timer(model_config, config):
            return replace(time_first_update(model_config, config), seconds=seconds)
    with mock.patch.dict(SMALL_DATA["text"], **preset_data):
        return make_plan("small", {**shape, **(model or {})}, timer, fit, **settings)


def _steps(trainer, n):
    losses = [trainer.train_step() for _ in range(n)]
    return [(loss.item(), tokens) for loss, tokens in losses], trainer.model.state_dict()


def _assert_trains_as(trainer, corpus, out, n, model=TINY, **settings):
    """The next n updates of `trainer` equal, loss by loss and weight by weight, those of a run of
    configurations made by hand with `model` and `settings` (minutes alone), never timed, under the same
    schedule (one timed update projected it: a decision of the plan, not of the batch)."""
    steps, weights = _steps(trainer, n)
    config = TrainingConfig(**dict(RUN, data=str(corpus), max_minutes=0.01, split_punctuation=True) | settings)
    by_hand = given_plan(model, config).scheduled(trainer.plan.schedule)
    oracle_steps, oracle_weights = _steps(Trainer.from_plan(by_hand, out), n)
    assert steps == oracle_steps
    for name, expected in oracle_weights.items():
        assert torch.equal(weights[name], expected), name


def test_a_plan_says_where_each_setting_came_from():
    plan = make_plan(max_steps=300, precision="fp32", log_every=7)
    why = {d.setting: d.why for d in plan.decisions}
    assert why["preset"] == "the number corpus" and why["max_steps"] == why["precision"] == "given"
    assert why["vocab_size"] == why["max_tokens"] == "preset small on the number corpus"
    assert why["warmup_steps"] == "preset small" and why["checkpoint_every"] == "about 15 over the budget"
    assert plan.training.checkpoint_every == 20 and plan.training.precision == "fp32"
    assert why["compile"].startswith("cpu: ") and plan.training.compile is False
    assert plan.training.pad_multiple == 1 and plan.training.schedule == "paper"
    assert plan.model == TransformerConfig.small(), "the preset's model"
    rows = plan.table().splitlines()
    assert rows[0].split() == ["setting", "value", "why"] and len(rows) == len(plan.decisions) + 1
    assert any(row.split()[:3] == ["max_tokens", "2,000", "preset"] for row in rows), rows
    assert RunPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan, "saved and read back whole"
    auto = make_plan(max_steps=3, precision="auto", compile=None)
    settings = [d.setting for d in auto.decisions]
    assert len(settings) == len(set(settings)), "no setting twice"
    assert auto.why("precision") != "given" and auto.training.precision in ("fp32", "bf16")


def test_presets_follow_the_data_and_the_budget():
    text = make_plan("small", data="corpus", max_minutes=60)
    assert (text.training.vocab_size, text.training.max_tokens, text.training.split_punctuation) == (8000, 4000, True)
    assert text.training.checkpoint_minutes == 4.0 and text.training.checkpoint_every is None
    assert make_plan("tiny", data="corpus", max_steps=10**6).training.checkpoint_minutes == 10.0, "the paper's"
    given = make_plan("tiny", data="corpus", max_steps=90, checkpoint_every=7, lr_scale=1.0).training
    assert (given.checkpoint_every, given.lr_scale, given.warmup_steps) == (7, 1.0, 800)
    assert make_plan("big", data="corpus", max_steps=10).training.keep_checkpoints == 20
    with mock.patch("transformer.plan.pick_device", return_value=torch.device("cuda", 0)), \
            mock.patch("transformer.plan.device_settings", return_value=[]):
        gpu = make_plan(data="corpus")
    assert gpu.training.max_steps == GPU_TEXT_STEPS and gpu.why("max_steps") == "tiny on real text on a CUDA GPU"
    seen = []

    def timer(model_config, config):
        seen.append(config)
        return Timing(0.045, 100.0)

    with mock.patch("transformer.plan.pick_device", return_value=torch.device("cuda", 0)), \
            mock.patch("transformer.plan.device_settings", return_value=[]):
        timed = make_plan(data="corpus", timer=timer)
    assert timed.training.max_steps == GPU_TEXT_STEPS and [c.compile for c in seen] == [False]
    assert timed.why("max_steps") == ("tiny on real text on a CUDA GPU: about 12 min here at 0.045 s an update "
                                      "uncompiled, less compiled; --max-minutes bounds it"), "16,000 x 0.045 s"
    for preset, data in (("tiny", "corpus"), ("small", "corpus"), ("tiny", "numbers")):
        with pytest.raises(ValueError, match="say when to stop"):
            make_plan(preset, data=data)
    with pytest.raises(ValueError, match="preset must be one of tiny, small, base, big; got 'huge'"):
        make_plan("huge", max_steps=1)


def _card(capability, name="cuda"):
    """device_settings on a CUDA card of `capability` as torch reports it, and with torch's permissive answer
    that bf16 is 'supported' on every card (it can emulate it), which must not decide."""
    with mock.patch("torch.cuda.get_device_capability", return_value=capability), \
            mock.patch("torch.cuda.is_bf16_supported", return_value=True):
        return {d.setting: d.value for d in device_settings(torch.device(name, 0))}


@pytest.mark.parametrize("card, capability, precision, compiled", [
    ("P100", (6, 0), "fp16", False), ("V100", (7, 0), "fp16", True), ("T4", (7, 5), "fp16", True),
    ("A100", (8, 0), "bf16", True), ("RTX 3090", (8, 6), "bf16", True), ("H100", (9, 0), "bf16", True)])
def test_each_kind_of_cuda_card_gets_the_precision_it_has_in_hardware_and_a_step_inductor_compiles(
        card, capability, precision, compiled):
    """The goal of the reader's-GPU issue: fp16 below compute capability 8.0, bf16 from it, never emulated
    bf16; Triton (Inductor's GPU kernels) needs 7.0."""
    decided = _card(capability)
    assert (decided["precision"], decided["compile"]) == (precision, compiled), card
    assert decided["pad_multiple"] == (8 if compiled else 1)


def test_bf16_given_on_a_card_without_it_is_kept_but_not_compiled():
    with mock.patch("torch.cuda.get_device_capability", return_value=(7, 5)):
        decided = device_settings(torch.device("cuda", 0), precision="bf16")
    assert [(d.value, d.why) for d in decided][:2] == [
        ("bf16", "given"), (False, "compute capability 7.5: Inductor skips bf16 below 8.0")]


def test_a_cpu_gets_bf16_only_where_its_products_are_faster_and_mps_fp32():
    for speedup, expected in ((3.0, "bf16"), (1.49, "fp32"), (0.05, "fp32")):
        with mock.patch.object(devices, "cpu_bf16_speedup", return_value=speedup):
            decided = device_settings(torch.device("cpu"))
        assert [d.value for d in decided] == [expected, False, 1], speedup
        assert f"{speedup:.2f}x" in decided[0].why or f"{speedup:.1f}x" in decided[0].why
    assert [d.value for d in device_settings(torch.device("mps"))] == ["fp32", False, 1]


def test_a_budget_of_few_updates_halves_the_batch_and_trains_as_that_batch_given_by_name(tiny_corpus, tmp_path):
    """Oracle: a run given the half batch by name, update by update: the timing, in a Trainer of its own
    before the run's, leaves no trace (weights, dropout's random numbers, the batches' position)."""
    plan = _plan(tiny_corpus)
    assert plan.training.max_tokens == 60, plan.table()
    assert plan.why("max_tokens").startswith("one update of 120 took ")
    assert plan.why("max_tokens").endswith(f" in 0.01 min, under {FEW_UPDATES:,}: halved")
    fitted = Trainer.from_plan(plan, tmp_path / "fitted")
    assert fitted.config.max_tokens == fitted.batches.sampler.max_tokens == 60
    _assert_trains_as(fitted, tiny_corpus, tmp_path / "given", 4, max_tokens=60)


def test_a_budget_of_few_passes_sets_the_dropout_of_its_line_and_trains_as_a_model_built_with_it(
        tiny_corpus, tmp_path):
    """Oracle: a model built with that P_drop by name, given the half batch, update by update. The lines
    are placed around the budget's passes: the first line it is under decides, and 0 is a rate."""
    timing = time_first_update(TransformerConfig.small(**SHAPE), TrainingConfig(
        **RUN, data=str(tiny_corpus), max_minutes=0.01, max_tokens=120, split_punctuation=True))
    passes = int(60 * 0.01 / 0.1) / timing.updates_a_pass  # the budget's, at 0.1 s an update
    for lines, rate in [(((passes / 2, 0.2), (passes * 2, 0.3)), 0.3), (((passes * 2, 0.0), (passes * 4, 0.3)), 0.0)]:
        plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, lines))
        assert plan.model.dropout == rate, (lines, plan.table())
        assert plan.why("dropout") == (f"{passes:.1f} passes over the data ({timing.updates_a_pass:,.0f} updates "
                                       f"each), under {passes * 2:g}")
    plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, ((1000, 0.3),)))
    assert (plan.training.max_tokens, plan.model.dropout) == (60, 0.3)
    fitted = Trainer.from_plan(plan, tmp_path / "fitted")
    assert fitted.model.config.dropout == 0.3, "the configuration the checkpoints keep"
    _assert_trains_as(fitted, tiny_corpus, tmp_path / "given", 4, replace(TINY, dropout=0.3), max_tokens=60)


def test_what_is_given_by_name_is_kept_and_the_rest_still_fitted(tiny_corpus, tmp_path):
    plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, ((1000, 0.3),)), max_tokens=120)
    assert plan.training.max_tokens == 120 and plan.why("max_tokens") == "given"
    assert plan.model.dropout == 0.3, "the dropout still fitted"
    plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, ((1000, 0.3),)), model={"dropout": 0.2})
    assert plan.training.max_tokens == 60 and plan.model.dropout == 0.2 and plan.why("dropout") == "given"
    timer = mock.Mock(return_value=Timing(0.1, 100.0))
    both = make_plan("small", {**SHAPE, "dropout": 0.2}, timer, BudgetFit(True, ((1000, 0.3),)),
                     **dict(RUN, data=str(tiny_corpus), max_minutes=0.01, max_tokens=120))
    assert both.training.max_tokens == 120 and both.model.dropout == 0.2, "nothing to fit"
    assert timer.call_count == 1 and both.schedule.updates == int(60 * 0.01 / 0.1), "timed once: the schedule projected"


def test_a_budget_of_many_updates_or_a_half_too_small_keeps_the_batch(tiny_corpus, tmp_path):
    plan = _plan(tiny_corpus, max_minutes=1e6, fit=BudgetFit(True, ((1000, 0.3),)))
    assert plan.training.max_tokens == 120 and plan.why("max_tokens").endswith(f"{FEW_UPDATES:,} or more: kept")
    assert plan.model.dropout == TINY.dropout and plan.why("dropout").endswith("1000 or more: the model's")
    trainer = Trainer.from_plan(plan, tmp_path / "many")
    _assert_trains_as(trainer, tiny_corpus, tmp_path / "untimed", 3, max_minutes=1e6, max_tokens=120)
    longest = int(trainer.data.train.lengths().max())
    plan = _plan(tiny_corpus, seconds=0.1, tokens=2 * longest - 1, fit=BudgetFit(True, ((1000, 0.3),)))
    assert plan.training.max_tokens == 2 * longest - 1, "half of it holds not the longest pair"
    assert plan.why("max_tokens").endswith("but half is too small for this data: kept")
    assert plan.model.dropout == 0.3, "still a budget of few passes"


def test_only_a_planned_run_of_minutes_alone_not_compiled_is_fitted_and_a_projected_schedule_timed(tiny_corpus):
    """A budget of updates, or minutes under the paper's curve uncooled, is not timed; a run of minutes whose
    schedule is projected (compiled, or with no fit) is timed once, uncompiled, for the schedule alone."""
    never = mock.Mock(side_effect=AssertionError("timed"))
    settings, preset = dict(RUN, data=str(tiny_corpus)), SMALL_DATA["text"]["max_tokens"]
    for overrides in (dict(max_minutes=0.01, schedule="paper"), dict(max_steps=5, schedule="planned"),
                      dict(max_steps=5)):
        plan = make_plan("small", SHAPE, never, HALVE, **settings | overrides)
        assert plan.training.max_tokens == preset and not plan.schedule.measure, overrides
    assert not never.called
    for fit, overrides in ((HALVE, dict(compile=True)), (None, {})):
        timer = mock.Mock(return_value=Timing(0.1, 100.0))
        plan = make_plan("small", SHAPE, timer, fit, **settings | overrides, max_minutes=0.01)
        assert plan.training.max_tokens == preset and timer.call_count == 1, overrides
        assert timer.call_args.args[1].compile is False and plan.schedule.updates == int(60 * 0.01 / 0.1)
    with pytest.raises(ValueError, match="this plan times one update .*: give make_plan a timer"):
        make_plan("small", SHAPE, None, HALVE, **settings, max_minutes=0.01)


def test_a_budget_of_few_updates_takes_the_layers_of_its_line_and_trains_as_that_model_given_by_name(
        tiny_corpus, tmp_path):
    """At 0.1 s an update a budget of 0.01 min holds `updates` (the written-out count); the small preset's N
    is not given. Oracle: a model built with N=1 by name (TINY's shape), given the half batch, update by
    update. The lines are placed around the budget: the first it is under decides."""
    updates = int(60 * 0.01 / 0.1)
    shape = {k: v for k, v in SHAPE.items() if k != "n_layers"}
    preset_n = TransformerConfig.small().n_layers
    lines = BudgetFit(True, (), ((updates + 1, 1), (100, 3)))
    plan = _plan(tiny_corpus, seconds=0.1, fit=lines, shape=shape, model={"dropout": TINY.dropout},
                 vocab_size=None)
    assert plan.model.n_layers == 1, plan.table()
    assert plan.why("n_layers") == (f"one update of 120 took 0.10 s: about {updates} in 0.01 min at "
                                    f"N={preset_n}, under {updates + 1}")
    fitted = Trainer.from_plan(plan, tmp_path / "fitted")
    assert fitted.model.config.n_layers == len(fitted.model.encoder.layers) == 1
    _assert_trains_as(fitted, tiny_corpus, tmp_path / "given", 3, replace(TINY, n_layers=1), max_tokens=60)
    on_line = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, (), ((updates, 1),)), shape=shape,
                    vocab_size=None)
    assert on_line.model.n_layers == preset_n
    assert on_line.why("n_layers").endswith(f", {updates} or more: the model's")
    given = _plan(tiny_corpus, seconds=0.1, fit=lines, vocab_size=None)  # SHAPE names N=2
    assert given.model.n_layers == 2 and given.why("n_layers") == "given"
    assert given.training.max_tokens == 60, "the batch still fitted"
    # the line counts updates of the preset's model at the preset's batch: a run given its batch or
    # its vocabulary keeps the preset's N, and no line decides it
    for other in (dict(max_tokens=120, vocab_size=None), dict(vocab_size=60)):
        kept = _plan(tiny_corpus, seconds=0.1, fit=lines, shape=shape, **other)
        assert kept.model.n_layers == preset_n and kept.why("n_layers") is None, other


def test_the_tiny_presets_budget_fit_and_bad_lines():
    assert BUDGET_FITS["tiny"] == BudgetFit(True, ((10, 0.0), (30, 0.1)), ((600, 2), (FEW_UPDATES, 3)))
    for lines in (((600, 0),), ((600, 2.5),), ((0, 3),), ((600.5, 3),), ((1200, 3), (600, 2)), ((600, True),),
                  [(600, 3)], ((600,),)):
        with pytest.raises(ValueError, match=r"layers_by_updates must be a tuple of \(updates, N\) pairs, "
                                             r"updates positive and rising, N a positive integer; got "):
            BudgetFit(True, (), lines)
    assert set(BUDGET_FITS) == {"tiny"}, "the other presets keep their batch and P_drop"
    for lines in (0.1, [(10, 0.1)], ((10,),), ((10, 1.0),), ((10, -0.1),), ((10, True),), ((0, 0.1),),
                  ((10, "0.1"),), ((30, 0.1), (10, 0.0)), ((10, 0.1), (10, 0.0))):
        with pytest.raises(ValueError, match=r"dropout_by_passes must be a tuple of \(passes, P_drop\) pairs, "
                                             r"passes positive and rising, P_drop in \[0, 1\); got "):
            BudgetFit(True, lines)


def test_the_plan_is_printed_first_saved_and_the_trainer_runs_it_unchanged(tiny_corpus, tmp_path, capsys):
    """The Trainer's configuration, sampler and model at the end are the objects it was built with."""
    plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, ((1000, 0.3),)), max_minutes=0.005)
    trainer = Trainer.from_plan(plan, tmp_path / "run")
    built = trainer.config, trainer.batches.sampler, trainer.model, trainer.model.config
    seen = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: seen.append((trainer.config, trainer.batches.sampler, trainer.model.config)))
    trainer.fit(progress=True)
    assert seen and all(s == (built[0], built[1], built[3]) and s[0] is built[0] and s[1] is built[1]
                        for s in seen)
    assert trainer.model is built[2] and trainer.model.config.dropout == 0.3
    out = capsys.readouterr().out
    assert out.startswith(plan.table().splitlines()[0]) and "halved" in out.split("step ")[0]
    saved = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert saved == json.loads(json.dumps(trainer.plan.to_dict()))
    assert saved["training"]["max_tokens"] == 60 and saved["model"]["dropout"] == 0.3
    assert saved["model"]["src_vocab_size"] == trainer.model.config.src_vocab_size, "the model that ran"


def test_a_resumed_run_reads_its_plan_and_says_what_was_given_again(tiny_corpus, tmp_path):
    plan = _plan(tiny_corpus, seconds=0.1, fit=BudgetFit(True, ((1000, 0.3),)))
    path = Trainer.from_plan(plan, tmp_path / "run").save()
    resumed = Trainer.resume(path, max_minutes=0.02)
    assert (resumed.config.max_tokens, resumed.model.config.dropout) == (60, 0.3), "not fitted again"
    assert resumed.batches.sampler.max_tokens == 60
    old = {d.setting: d for d in plan.decisions}
    new = {d.setting: d for d in resumed.plan.decisions}
    assert new["max_minutes"] == Decision("max_minutes", 0.02, "given at resume")
    assert new.pop("data_check").value == "as checkpointed"
    assert new["rate"].why == "at resume, untimed: measured again after update 30", "a new budget: decided again"
    assert resumed.plan.schedule.measure and resumed.plan.schedule.updates is None
    assert {k: v for k, v in new.items() if k not in ("max_minutes", "rate")} == {
        k: v for k, v in old.items() if k not in ("max_minutes", "rate")}
    again = Trainer.resume(path, precision="auto")
    assert again.plan.why("precision") != "given at resume" and again.config.precision in ("fp32", "bf16")
    assert again.plan.schedule == plan.schedule and again.plan.why("rate") == plan.why("rate"), \
        "the schedule read back, not measured again"


def test_a_checkpoint_from_before_plans_resumes_on_its_settings(tiny_corpus, tmp_path):
    """Before plans a checkpoint held its configurations alone, with the fitting's fields (fit_batch,
    dropout_by_passes; few_epochs_dropout from 0fc0402 to c287e4b), already applied: they are dropped."""
    config = TrainingConfig(**RUN, data=str(tiny_corpus), max_steps=2, max_tokens=120, split_punctuation=True)
    state = load_checkpoint(Trainer.from_config(TINY, config, tmp_path / "run").save())
    del state["plan"]
    old = {**state["training_config"], "precision": "auto", "compile": None, "pad_multiple": None}
    for i, fitting in enumerate([{"fit_batch": False, "dropout_by_passes": None}, {"few_epochs_dropout": 0.1}]):
        path = tmp_path / f"old{i}" / "checkpoint-00000000.pt"
        save_checkpoint({**state, "training_config": {**old, **fitting}, "schedule": {}}, path)
        resumed = Trainer.resume(path)
        assert resumed.config.max_tokens == 120 and resumed.model.config.dropout == TINY.dropout
        assert resumed.plan.why("max_tokens") == "from the checkpoint (before plans)"
        assert resumed.config.precision in ("fp32", "bf16") and resumed.plan.why("precision") != "given"
        assert asdict(resumed.config).keys() == asdict(config).keys()


def _edited_run(corpus, folder):
    """A run of 4 updates with checkpoints on the tiny corpus, and its checkpoint of step 2."""
    config = TrainingConfig(**RUN, data=str(corpus), max_steps=4, max_tokens=120, checkpoint_every=2)
    Trainer.from_config(TINY, config, folder).fit(progress=False)
    return folder / "checkpoint-00000002.pt"


def test_a_resume_on_the_same_data_is_said_and_exact(tiny_corpus, tmp_path):
    """Oracle: the uninterrupted run's weights (a resume on unchanged data is what it was)."""
    checkpoint = _edited_run(tiny_corpus, tmp_path / "run")
    whole = load_checkpoint(tmp_path / "run" / "checkpoint-00000004.pt")["model"]
    resumed = Trainer.resume(checkpoint, out=tmp_path / "resumed")
    assert resumed.plan.why("data_check") == "checkpoint-00000002.pt: the same fingerprints"
    resumed.fit(progress=False)
    assert all(torch.equal(v, whole[k]) for k, v in resumed.model.state_dict().items())
    saved = json.loads((tmp_path / "resumed" / "plan.json").read_text())
    assert saved["data"] == resumed.data.fingerprints and set(saved["data"]) == {"train", "val"}


def test_a_resume_on_edited_training_files_is_refused_by_name_and_writes_nothing(tiny_corpus, tmp_path):
    checkpoint = _edited_run(tiny_corpus, tmp_path / "run")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "run").iterdir())
    german = (tiny_corpus / "train.de").read_text().splitlines()
    (tiny_corpus / "train.de").write_text("\n".join(german[1:] + german[:1]) + "\n")  # every pair wrong
    with pytest.raises(ValueError, match=r"^the data changed since checkpoint-00000002.pt was written \(train "
                                         r"\w{12} then, \w{12} now\): resume on the data it trained on, or give "
                                         r"--data-changed-ok"):
        Trainer.resume(checkpoint)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "run").iterdir()) == before


def test_a_resume_told_to_go_on_says_from_which_step_the_data_differed(tiny_corpus, tmp_path):
    checkpoint = _edited_run(tiny_corpus, tmp_path / "run")
    (tiny_corpus / "train.de").write_text((tiny_corpus / "train.de").read_text().upper())
    resumed = Trainer.resume(checkpoint, data_changed_ok=True)
    assert resumed.plan.decisions[-1].value == "changed at step 2"
    assert resumed.plan.why("data_check").endswith("now; data_changed_ok") and "train " in resumed.plan.why("data_check")
    resumed.fit(progress=False)
    logged = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    changed = [r for r in logged if "data_changed" in r]
    assert [r["step"] for r in changed] == [2], "once, at the step it resumed from"
    saved = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert {"setting": "data_check", "value": "changed at step 2", "why": resumed.plan.why("data_check")} in saved["decisions"]
    assert saved["data"] == resumed.data.fingerprints, "the data it trains on now"


def test_a_checkpoint_without_fingerprints_resumes_saying_its_data_was_not_checked(tiny_corpus, tmp_path):
    checkpoint = _edited_run(tiny_corpus, tmp_path / "run")
    state = load_checkpoint(checkpoint)
    state["plan"]["data"] = {}
    save_checkpoint(state, tmp_path / "old" / "checkpoint-00000002.pt")
    resumed = Trainer.resume(tmp_path / "old")
    assert resumed.plan.decisions[-1] == Decision(
        "data_check", "not checked", "checkpoint-00000002.pt holds no fingerprint of its data (written before they "
                               "were kept)")


def test_a_resumed_run_decides_its_device_settings_again_unless_they_were_given(tiny_corpus, tmp_path):
    """A run begun where bf16 paid (faked: a CPU whose bf16 products are fast) and resumed on one where it
    does not trains in fp32 there; a precision given by name is kept."""
    config = TrainingConfig(**{**RUN, "precision": "auto"}, data=str(tiny_corpus), max_steps=2, max_tokens=120)
    with mock.patch.object(devices, "cpu_bf16_speedup", return_value=3.0):
        path = Trainer.from_config(TINY, config, tmp_path / "run").save()
    assert load_checkpoint(path)["plan"]["training"]["precision"] == "bf16"
    with mock.patch.object(devices, "cpu_bf16_speedup", return_value=0.05):
        resumed = Trainer.resume(path)
        assert resumed.config.precision == "fp32" and "no native bf16" in resumed.plan.why("precision")
        given = Trainer.from_config(TINY, replace(config, precision="bf16"), tmp_path / "given").save()
        assert Trainer.resume(given).config.precision == "bf16", "given: kept"
        assert Trainer.resume(given, compile=False).plan.why("compile") == "given at resume"


def test_a_data_change_stays_in_the_plan_after_a_later_resume(tiny_corpus, tmp_path):
    checkpoint = _edited_run(tiny_corpus, tmp_path / "run")
    (tiny_corpus / "train.de").write_text((tiny_corpus / "train.de").read_text().upper())
    went_on = Trainer.resume(checkpoint, data_changed_ok=True, max_steps=3)
    went_on.fit(progress=False)
    again = Trainer.resume(tmp_path / "run" / "checkpoint-00000003.pt", max_steps=4)
    assert again.plan.why("data_check") == "checkpoint-00000003.pt: the same fingerprints"
    assert again.plan.why("data_check changed at step 2") == went_on.plan.why("data_check")


# Each distinctive default is typed once in transformer/ and web/ (issue 110). The
# places where one of these numbers is typed on purpose, each with why; a count that
# differs fails, so a new copy is caught and a stale entry goes.
DISTINCTIVE = {25000, 37000, 4000, 0.7, 0.2, 0.6}  # 0.6: DECODING.alpha
NUMBER = r"(?<![\w.$])(?:25[,_]?000|37[,_]?000|4[,_]?000|0\.7|0\.2|0\.6)(?![\w.])"
# the decoding defaults, where a name is bound to them: beam 4, alpha 0.6, extra_len 50
DECODING_NAMES = [(r"k|beam|beam_?size|beamSize", 4), (r"alpha", 0.6),
                  (r"extra_?len|extraLen", 50)]
ALLOWED = {
    ("transformer/presets.py", "37000"): (1, "PAPER.vocab_size, its one place"),
    ("transformer/presets.py", "25000"): (1, "PAPER.max_tokens, its one place"),
    ("transformer/presets.py", "4000"): (2, "PAPER.warmup_steps; and the small preset's "
                                            "batch on real text, another setting"),
    ("transformer/presets.py", "0.2"): (1, "Table 3's row (D), P_drop=0.2"),
    ("transformer/presets.py", "'0.2' in a string"): (1, "that row's label"),
    ("transformer/runs.py", "0.7"): (1, "PEAK_SHARE, the planned schedule's peak"),
    ("transformer/runs.py", "0.2"): (1, "FALL_SHARE, the planned schedule's last fifth"),
    ("transformer/decoding.py", "beam_size=4"): (1, "DECODING, the decoding defaults"),
    ("transformer/decoding.py", "alpha=0.6"): (1, "DECODING"),
    ("transformer/decoding.py", "0.6"): (1, "DECODING.alpha's number"),
    ("transformer/decoding.py", "extra_len=50"): (1, "DECODING"),
    ("transformer/figures.py", "0.7"): (1, "a line's width in Figure 1"),
    ("transformer/figures.py", "0.2"): (2, "labels' offsets in Figure 1"),
    ("transformer/figures.py", "0.6"): (1, "a box's height in Figure 1"),
    ("transformer/explorer.js", "0.7"): (3, "a label's place in a cell, 0.7 of its side"),
    ("web/page.js", "0.7"): (1, "a label's place in a cell of the map"),
    ("web/page.js", "0.6"): (1, "the CSS opacity of a disabled button"),
}


def _python_literals(text: str) -> Counter:
    """The distinctive numbers typed in Python code (not in docstrings or comments): as
    numbers, inside strings (help texts, messages; and the word "fifth"), and the
    decoding defaults bound to their names (a default, a keyword, an assignment, a
    dict's key)."""
    tree = ast.parse(text)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found, bound = Counter(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            value = node.value
            if isinstance(value, str):
                for hit in re.findall(NUMBER, value) + re.findall(r"\bfifths?\b", value, re.I):
                    found[f"{hit!r} in a string"] += 1
                found.update(_bound_in_text(value))
            elif not isinstance(value, bool) and value in DISTINCTIVE:
                found[repr(value)] += 1
        if isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            bound += zip([a.arg for a in positional[len(positional) - len(node.defaults):]],
                         node.defaults)
            bound += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d]
        elif isinstance(node, ast.keyword) and node.arg:
            bound.append((node.arg, node.value))
        elif isinstance(node, (ast.AnnAssign, ast.Assign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Dict):
            bound += [(k.value, v) for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    for name, value in bound:
        for names, default in DECODING_NAMES:
            if (re.fullmatch(names, name) and isinstance(value, ast.Constant)
                    and not isinstance(value.value, bool) and value.value == default):
                found[f"{name}={value.value!r}"] += 1
    return found


def _bound_in_text(text: str) -> Counter:
    """The decoding defaults after their names in code or prose: k = 4, alpha: 0.6."""
    found = Counter()
    for names, default in DECODING_NAMES:
        for name in re.findall(rf"\b({names})\s*[=:]?\s*{default}(?![\w.])", text):
            found[f"{name}={default}"] += 1
    return found


def _javascript_literals(text: str) -> Counter:
    """The distinctive numbers as tokens of JavaScript outside comments (strings
    included: labels are checked too), "fifth", the decoding defaults after their names
    and a beam of 4 as a string ("4")."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"(^|[^:\\])//[^\n]*", r"\1", text)  # comments, not https://
    found = Counter(re.findall(NUMBER, text) + re.findall(r"\bfifths?\b", text, re.I))
    found.update(_bound_in_text(text))
    found.update(f"{hit} as a string" for hit in re.findall(r"""["']4["']""", text))
    return found


def test_the_literal_scanner_finds_each_kind_of_copy():
    """The scanners below see what they are for, and not what they are not."""
    python = '''
def f(x, beam_size=4, alpha=0.6):
    """25000 in a docstring is prose."""
    help = f"(paper: 25000; the last fifth, k = 4)"  # 37000 in a comment: not code
    return g(extra_len=50, rate=0.7, log_every=50, heads=4)
'''
    assert _python_literals(python) == Counter({
        "beam_size=4": 1, "alpha=0.6": 1, "0.6": 1, "'25000' in a string": 1,
        "'fifth' in a string": 1, "k=4": 1, "extra_len=50": 1, "0.7": 1})
    js = 'const url = "https://x"; // k = 4\nfunction b(k = 4, alpha = 0.6) { return 0.65 * 2; }\n'
    js += 'el({ value: "4" }, "beam, k = 4"); /* 0.7 */ x = 25000;'
    assert _javascript_literals(js) == Counter({
        "k=4": 2, "alpha=0.6": 1, "0.6": 1, '"4" as a string': 1, "25000": 1})


def test_each_distinctive_default_is_typed_in_one_place():
    """25000, 37000, 4000 (the paper's batch, vocabulary and warm-up), the planned
    schedule's 0.7 and last fifth (0.2), and the decoding defaults (beam 4, alpha 0.6,
    extra_len 50) are typed as code only in their one place in transformer/ and web/
    (ALLOWED says each place and why); the rest read them (PAPER, PRESETS, PEAK_SHARE,
    FALL_SHARE, DECODING, model.json)."""
    root = Path(__file__).resolve().parent.parent
    found = {}
    for path in sorted((root / "transformer").glob("*.py")):
        for what, n in _python_literals(path.read_text()).items():
            found[(path.relative_to(root).as_posix(), what)] = n
    for path in sorted([*(root / "transformer").glob("*.js"), *(root / "web").glob("*.js")]):
        for what, n in _javascript_literals(path.read_text()).items():
            found[(path.relative_to(root).as_posix(), what)] = n
    typed = [f"{path}: {what} x{n} (allowed: {ALLOWED.get((path, what), (0,))[0]})"
             for (path, what), n in found.items() if ALLOWED.get((path, what), (0,))[0] != n]
    stale = [f"{path}: {what}" for path, what in ALLOWED if (path, what) not in found]
    assert not typed, "distinctive defaults typed outside their one place (read them " \
        "from PAPER, PRESETS, runs' PEAK_SHARE/FALL_SHARE, DECODING or model.json, or " \
        f"say why in ALLOWED): {typed}"
    assert not stale, f"ALLOWED names places that no longer type the value: {stale}"
