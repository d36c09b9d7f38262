"""The ONNX graphs against PyTorch (book/deploy.md): every output checked against the model
run without a cache (the whole prefix recomputed) or against torch's own attention weights;
greedy translations against `translate`; bad input refused with nothing left on disk."""

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from tokenizers import Tokenizer

from transformer import (
    OnnxTranslator,
    Transformer,
    TransformerConfig,
    attention_weights,
    export_onnx,
    train_tokenizer,
    translate,
)
from transformer.attention import padding_mask
from transformer.cli import main
from transformer.decoding import DECODING
from transformer.deploy import _check_dynamic, onnx_threads, quantize_export
from transformer.embeddings import Embeddings
from transformer.tokenizer import BOS, EOS, PAD

SENTENCES = [f"{a} {b} and {c}" for a in ("one", "two", "three") for b in ("red", "blue")
             for c in ("cats", "dogs", "birds")]


# an export takes about 25 s on 2 cores: make test-quick exports the post-LN model only. It
# has 2 layers (each layer's caches in their place); the pre-LN one has 1 (a graph traced
# from a view of the source failed to export a 1-layer model once)
@pytest.fixture(scope="module", params=[
    "post-LN", pytest.param("pre-LN, learned positions", marks=pytest.mark.slow)])
def exported(request, tmp_path_factory):
    tokenizer = train_tokenizer(iter(SENTENCES * 2), vocab_size=60)
    vocab = tokenizer.get_vocab_size()
    pre = request.param != "post-LN"
    config = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                               d_ff=64, n_layers=1 if pre else 2, dropout=0.0, norm_first=pre,
                               positional="learned" if pre else "sinusoidal", max_len=64)
    torch.manual_seed(0)
    model = Transformer(config).eval()
    folder = tmp_path_factory.mktemp("onnx") / "model"
    export_onnx(model, tokenizer, folder)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = onnx_threads(None)  # make test's one thread, as torch's
    sessions = {name: onnxruntime.InferenceSession(str(folder / f"{name}.onnx"), options)
                for name in ("encoder", "step")}
    return model, tokenizer, folder, sessions


def _source(batch, n, vocab):
    """Sentences as a beam holds them: each row twice (one row when batch is 1)."""
    torch.manual_seed(batch * 100 + n)
    src = torch.randint(4, vocab, (max(batch // 2, 1), n))
    src[0, n - 2 :] = PAD  # a padded sentence
    return src if batch == 1 else src.repeat_interleave(2, 0)


def _log_probs(logits):  # the written-out formula: <pad> and <bos> are never generated
    logits = logits.clone()
    logits[:, [PAD, BOS]] = float("-inf")
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("batch, n", [(1, 3), (4, 9), (6, 17)])
def test_steps_equal_the_model_recomputing_the_whole_prefix(exported, batch, n):
    model, _, folder, sessions = exported
    meta = json.loads((folder / "model.json").read_text())
    src = _source(batch, n, model.config.src_vocab_size)
    memory, *cross = sessions["encoder"].run(None, {"src": src.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(memory), model.encode(src), atol=1e-5, rtol=1e-4)
    past = [np.zeros((batch, 4, 0, 8), np.float32)] * (2 * meta["n_layers"])
    prefix = torch.full((batch, 1), BOS)
    rows = np.arange(batch)
    for step in range(6):
        inputs = [prefix[:, -1:].numpy(), src.numpy(), memory, rows, *past, *cross]
        log_probs, attention, *past = sessions["step"].run(None, dict(zip(meta["step_inputs"], inputs)))
        with torch.no_grad():
            logits = model.decode(prefix, model.encode(src), padding_mask(src, PAD))[:, -1]
            weights = attention_weights(model, src, prefix)[f"decoder.{meta['n_layers'] - 1}.cross"]
        expected = _log_probs(logits)
        finite = torch.isfinite(expected)
        torch.testing.assert_close(torch.from_numpy(log_probs)[finite], expected[finite], atol=1e-4, rtol=1e-4)
        assert np.isneginf(log_probs[:, [PAD, BOS]]).all()
        torch.testing.assert_close(torch.from_numpy(attention), weights[:, :, -1], atol=1e-5, rtol=1e-4)
        assert past[0].shape == (batch, 4, step + 1, 8)
        # as beam search does: a row continues another hypothesis of the same sentence
        rows = np.arange(batch) ^ (1 if batch > 1 else 0)
        token = torch.from_numpy(log_probs).argmax(-1, keepdim=True)
        prefix = torch.cat([prefix[torch.from_numpy(rows)], token], 1)


def test_greedy_translations_equal_translate(exported):
    model, tokenizer, folder, _ = exported
    translator = OnnxTranslator(folder)
    assert translator.translate(SENTENCES) == translate(model, tokenizer, SENTENCES, beam_size=1, batch_size=1)
    ids, weights = translator.greedy(tokenizer.encode("one red cats", add_special_tokens=False).ids + [EOS])
    assert weights.shape[1:] == (4, len(tokenizer.encode("one red cats", add_special_tokens=False).ids) + 1)
    assert len(weights) in (len(ids), len(ids) + 1), "a row of the map per output step"


def test_the_translator_runs_on_the_threads_it_is_given_or_omp_num_threads(exported, monkeypatch):
    """Each session's threads within an operator, as onnxruntime reports them: `threads`
    where given, else OMP_NUM_THREADS where it is a number, else 0 (onnxruntime's own
    default, a thread per core); the translations do not depend on them."""
    model, tokenizer, folder, _ = exported
    for omp, threads, expected in [("3", None, 3), ("3", 1, 1), (None, None, 0), ("4,2", None, 0)]:
        if omp is None:
            monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        else:
            monkeypatch.setenv("OMP_NUM_THREADS", omp)
        translator = OnnxTranslator(folder, threads)
        for session in (translator.encoder, translator.step, translator.maps):
            assert session.get_session_options().intra_op_num_threads == expected, (omp, threads)
    assert OnnxTranslator(folder, 2).translate(SENTENCES[:6]) == OnnxTranslator(folder, 1).translate(SENTENCES[:6])
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=f"threads must be a positive integer or None; got {bad!r}"):
            OnnxTranslator(folder, bad)


@pytest.mark.parametrize("beam_size, alpha", [(4, 0.6), (3, 0.0), (5, 1.0)])
def test_beam_translations_equal_translate(exported, beam_size, alpha):
    model, tokenizer, folder, _ = exported
    translator = OnnxTranslator(folder)
    ours = translator.translate(SENTENCES, beam_size=beam_size, alpha=alpha)
    assert ours == translate(model, tokenizer, SENTENCES, beam_size=beam_size, alpha=alpha)
    src = tokenizer.encode("two blue dogs", add_special_tokens=False).ids + [EOS]
    ids, weights = translator.beam(src, beam_size, alpha)
    assert weights.shape[1:] == (4, len(src))
    assert len(weights) in (len(ids), len(ids) + 1), "a row of the map per output step"
    assert translator.beam(src, 1, alpha)[0] == translator.greedy(src)[0], "k = 1 is greedy"


def _rounded_to_int8(model):
    """A copy of `model` whose weight matrices (every Linear's and token Embeddings',
    not the position tables) are what an int8 export stores, written out: each row w (an
    output feature, a token) as round(w / s) * s, s = max|w| / 127."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for module in rounded.modules():
            if isinstance(module, (torch.nn.Linear, Embeddings)):
                weight = getattr(module, "embedding", module).weight
                s = weight.abs().amax(1, keepdim=True) / 127
                weight.copy_(torch.round(weight / s) * s)
    return rounded


def test_int8_export_stores_int8_weights_and_computes_in_float32(exported, tmp_path, monkeypatch):
    """The int8 graphs hold no float32 matrix of the weights, compute as the model does
    with its weights rounded to int8 (in float32, without integer kernels), and are
    under a third of the float32 ones' size. The graphs are traced once, by the fixture:
    the export here copies them (tracing takes 10 s a model on 2 cores), and quantizes."""
    import transformer.deploy as deploy

    model, tokenizer, folder, sessions = exported
    monkeypatch.setattr(deploy, "_export", lambda module, args, path, *names: shutil.copy(folder / path.name, path))
    meta = export_onnx(model, tokenizer, tmp_path / "int8", int8=True)
    assert meta["weights"] == "int8"
    for graph in ("encoder", "step", "maps"):
        proto = onnx.load(str(tmp_path / "int8" / f"{graph}.onnx")).graph
        ops = {node.op_type for node in proto.node}
        assert not ops & {"MatMulInteger", "DynamicQuantizeLinear", "DequantizeLinear"}, ops
        matrices = {t.name: onnx.TensorProto.DataType.Name(t.data_type)
                    for t in proto.initializer if len(t.dims) == 2 and min(t.dims) > 8}
        assert "INT8" in matrices.values(), (graph, matrices)
        assert all(kind == "INT8" or "positions" in name
                   for name, kind in matrices.items()), (graph, matrices)
        size = (tmp_path / "int8" / f"{graph}.onnx").stat().st_size
        assert size < (folder / f"{graph}.onnx").stat().st_size / 3, (graph, size)
    int8 = onnxruntime.InferenceSession(str(tmp_path / "int8" / "encoder.onnx"))
    src = _source(4, 9, model.config.src_vocab_size)
    ours = torch.from_numpy(int8.run(None, {"src": src.numpy()})[0])
    with torch.no_grad():
        torch.testing.assert_close(ours, _rounded_to_int8(model).encode(src), atol=1e-5, rtol=1e-4)
        assert (ours - model.encode(src)).abs().max() > 1e-4, "the weights were rounded"
    assert len(OnnxTranslator(tmp_path / "int8").translate(SENTENCES[:6], beam_size=2)) == 6


def test_model_json_says_how_to_drive_the_graphs(exported):
    model, tokenizer, folder, _ = exported
    meta = json.loads((folder / "model.json").read_text())
    assert (meta["pad_id"], meta["bos_id"], meta["eos_id"]) == (PAD, BOS, EOS)
    assert meta["n_layers"] == len(model.decoder.layers) and meta["d_k"] == meta["d_v"] == 8
    assert meta["max_len"] == 64
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).encode("two blue dogs").ids == \
        tokenizer.encode("two blue dogs").ids
    for name in ("encoder", "step", "maps"):
        graph = onnx.load(str(folder / f"{name}.onnx")).graph
        assert [i.name for i in graph.input] == meta[f"{name}_inputs"]
        assert [o.name for o in graph.output] == meta[f"{name}_outputs"]
    assert sorted(p.name for p in folder.iterdir()) == ["encoder.onnx", "maps.onnx", "model.json", "step.onnx",
                                                        "tokenizer.json"]


def test_model_json_carries_the_decoding_defaults_that_the_searches_read(exported, tmp_path):
    """model.json holds DECODING's beam size, alpha and extra_len (the page types none of its
    own); OnnxTranslator's searches default to them; a model.json without them is refused
    with what to do."""
    model, tokenizer, folder, _ = exported
    meta = json.loads((folder / "model.json").read_text())
    assert {k: meta[k] for k in ("beam_size", "alpha", "extra_len")} == {
        "beam_size": DECODING.beam_size, "alpha": DECODING.alpha, "extra_len": DECODING.extra_len}
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    (edited / "model.json").write_text(json.dumps({**meta, "beam_size": 2, "alpha": 0.0}))
    translator = OnnxTranslator(edited)
    trace = translator.trace(SENTENCES[0])
    assert (trace.beam_size, trace.alpha) == (2, 0.0)
    assert translator.translate(SENTENCES[:6], beam_size=2) == translate(
        model, tokenizer, SENTENCES[:6], beam_size=2, alpha=0.0)
    for key in ("beam_size", "alpha", "extra_len"):
        (edited / "model.json").write_text(json.dumps({k: v for k, v in meta.items() if k != key}))
        with pytest.raises(ValueError, match=f"has no {key} .*older version.*export the model again"):
            OnnxTranslator(edited)


def test_the_shipped_page_models_carry_the_decoding_defaults():
    """The models the book ships (web/models) are read by the page, which types no decoding
    default of its own: each model.json has DECODING's."""
    folders = sorted((Path(__file__).resolve().parent.parent / "web" / "models").iterdir())
    assert folders, "the book ships a model"
    for folder in folders:
        meta = json.loads((folder / "model.json").read_text())
        assert (meta["beam_size"], meta["alpha"], meta["extra_len"]) == (
            DECODING.beam_size, DECODING.alpha, DECODING.extra_len), folder.name


def test_a_graph_with_a_fixed_size_is_refused(tmp_path):
    fixed = onnx.helper.make_tensor_value_info("src", onnx.TensorProto.INT64, [2, 6])
    out = onnx.helper.make_tensor_value_info("out", onnx.TensorProto.INT64, [2, 6])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["src"], ["out"])], "g", [fixed], [out])
    onnx.save(onnx.helper.make_model(graph), tmp_path / "g.onnx")
    with pytest.raises(RuntimeError, match=r"g.onnx: input src has fixed size\(s\) at axes \[0, 1\]"):
        _check_dynamic(tmp_path / "g.onnx", {"src": [0, 1]})


def test_export_refuses_a_used_folder_and_leaves_nothing_half_written(exported, tmp_path, monkeypatch):
    model, tokenizer, _, _ = exported
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError, match="out exists; pass overwrite=True"):
        export_onnx(model, tokenizer, tmp_path / "out")
    import transformer.deploy as deploy

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(deploy, "_export", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        export_onnx(model, tokenizer, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no folder, no holding folder"


@pytest.mark.slow
def test_quantize_export_makes_the_int8_export_of_a_float32_one_without_tracing(exported, tmp_path):
    """An int8 folder from the fixture's float32 one: the same files and metadata but the
    weights field, graphs that compute as the model with its weights rounded to int8 (the
    oracle: PyTorch on those weights), and bad input refused with nothing left on disk."""
    model, tokenizer, folder, _ = exported
    meta = quantize_export(folder, tmp_path / "int8")
    written = sorted(p.name for p in (tmp_path / "int8").iterdir())
    assert written == sorted(p.name for p in folder.iterdir())
    before = json.loads((folder / "model.json").read_text())
    assert meta == json.loads((tmp_path / "int8" / "model.json").read_text())
    assert meta == {**before, "weights": "int8"} and before["weights"] == "float32"
    src = _source(4, 9, model.config.src_vocab_size)
    session = onnxruntime.InferenceSession(str(tmp_path / "int8" / "encoder.onnx"))
    ours = torch.from_numpy(session.run(None, {"src": src.numpy()})[0])
    with torch.no_grad():
        torch.testing.assert_close(ours, _rounded_to_int8(model).encode(src), atol=1e-5, rtol=1e-4)
    with pytest.raises(FileExistsError, match="int8 exists; pass overwrite=True"):
        quantize_export(folder, tmp_path / "int8")
    with pytest.raises(ValueError, match="holds 'int8' weights; expected a float32 export"):
        quantize_export(tmp_path / "int8", tmp_path / "again")
    with pytest.raises(FileNotFoundError, match="holds no model.json"):
        quantize_export(tmp_path, tmp_path / "again")
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "step.onnx").write_bytes(b"not a graph")
    with pytest.raises(Exception, match=r"step.onnx failed:Protobuf parsing failed"):
        quantize_export(broken, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "int8"]


def test_cli_export_writes_a_run_folders_final_model(tiny_corpus, tmp_path, capsys, monkeypatch):
    """`export` of a run folder hands its final model (the average of its last checkpoints)
    to the exporter, and writes where that model came from. The tracing is export_onnx's,
    tested on its own (the fixture, the chapter): here each graph only records the model it
    was given (tracing takes 10 s a graph on 2 cores)."""
    import transformer.deploy as deploy

    traced = []

    def trace(module, args, path, *names):
        traced.append(copy.deepcopy(module.model.state_dict()))
        path.write_bytes(b"")

    run = tmp_path / "run"
    assert main(["train", "--data", str(tiny_corpus), "--max-steps", "3", "--max-tokens", "200",
                 "--vocab-size", "60", "--precision", "fp32", "--out", str(run)]) == 0
    monkeypatch.setattr(deploy, "_export", trace)
    assert main(["export", "--checkpoint", str(run), "--out", str(tmp_path / "onnx")]) == 0
    average = torch.load(run / "checkpoint_average.pt", weights_only=True)["model"]
    assert len(traced) == 3 and all(
        torch.equal(weights[name], average[name]) for weights in traced for name in average)
    assert "encoder.onnx" in capsys.readouterr().out.splitlines()[-1]
    meta = json.loads((tmp_path / "onnx" / "model.json").read_text())
    about = meta["about"]
    assert about["checkpoint"] == "checkpoint_average.pt" and about["step"] == 3
    assert about["src_lang"] == "en" and about["tgt_lang"] == "de" and about["averaged_from"]
    with pytest.raises(SystemExit, match="onnx exists; pass overwrite=True"):
        main(["export", "--checkpoint", str(run), "--out", str(tmp_path / "onnx")])
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match=r"^error: .*bad.pt is not a readable checkpoint"):
        main(["export", "--checkpoint", str(tmp_path / "bad.pt"), "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def test_committed_page_models_are_small_and_say_where_they_come_from():
    """web/models holds exported models that the book's page offers (benchmarks/page_model.py
    writes them): each complete, int8, the four files a first visit loads under 8 MB and
    the explorer's maps.onnx (fetched when asked for) under 4 MB, with its record committed
    beside it."""
    root = Path(__file__).resolve().parent.parent
    folders = [p for p in (root / "web" / "models").glob("*") if p.is_dir()]
    for folder in folders:
        files = {p.name: p.stat().st_size for p in folder.iterdir()}
        assert set(files) == {"encoder.onnx", "step.onnx", "tokenizer.json", "model.json",
                              "maps.onnx"}, sorted(files)
        visit = sum(files.values()) - files["maps.onnx"]
        assert visit < 8e6, f"{folder.name}: {visit / 1e6:.1f} MB"
        assert files["maps.onnx"] < 4e6, f"{folder.name}: {files['maps.onnx'] / 1e6:.1f} MB"
        meta = json.loads((folder / "model.json").read_text())
        assert meta["weights"] == "int8" and meta["about"]["label"]
        assert (root / meta["about"]["record"]).is_file(), meta["about"]["record"]



def test_the_maps_graph_gives_attention_weights_for_every_kind_layer_and_head(exported):
    """maps.onnx against attention_weights (PyTorch, the oracle) on sources of several
    lengths and outputs of other lengths, both post-LN and pre-LN."""
    from transformer.attention_maps import attention_weights

    model, _, folder, _ = exported
    translator = OnnxTranslator(folder)
    meta = json.loads((folder / "model.json").read_text())
    assert meta["maps_inputs"] == ["src", "tgt"]
    vocab = model.config.tgt_vocab_size
    for n, m in [(1, 1), (3, 9), (12, 4)]:
        torch.manual_seed(n * 10 + m)
        src = torch.randint(4, vocab, (n,)).tolist()[:-1] + [EOS]
        out = torch.randint(4, vocab, (m,)).tolist()[:-1] + [EOS]
        maps = translator.attention_maps(src, out)
        expected = attention_weights(model.eval(), torch.tensor([src]), torch.tensor([[BOS, *out[:-1]]]))
        assert maps.keys() == expected.keys()
        for key, w in expected.items():
            np.testing.assert_allclose(maps[key], w[0].numpy(), atol=1e-5, rtol=0, err_msg=key)
            assert maps[key].shape == w[0].shape


def test_a_folder_without_maps_translates_and_says_what_is_missing(exported, tmp_path):
    _, _, folder, _ = exported
    older = tmp_path / "older"
    shutil.copytree(folder, older)
    (older / "maps.onnx").unlink()
    translator = OnnxTranslator(older)
    assert translator.translate(["a"]) == OnnxTranslator(folder).translate(["a"])
    with pytest.raises(FileNotFoundError, match="no maps.onnx .* export the model again"):
        translator.attention_maps([EOS], [EOS])


def test_the_numpy_search_traces_as_the_torch_search_does(exported):
    """OnnxTranslator.trace (NumPy around the graphs, each step's attention from the step
    graph) against trace_search (PyTorch, the attention read afterwards by attention_weights
    on each whole prefix): the same steps, candidates, fates, finished hypotheses and
    greedy output; log P and weights to float32's sums."""
    from transformer import trace_search

    model, tokenizer, folder, _ = exported
    translator = OnnxTranslator(folder)
    for sentence in SENTENCES[:6] + [""]:
        ours, torchs = (translator.trace(sentence, 3).to_dict(),
                        trace_search(model, tokenizer, sentence, 3).to_dict())
        assert ours["greedy"] == torchs["greedy"] and ours["tokens"] == torchs["tokens"]
        assert ours["greedy_score"] == pytest.approx(torchs["greedy_score"], abs=1e-4)
        assert [f["ids"] for f in ours["finished"]] == [f["ids"] for f in torchs["finished"]]
        assert len(ours["steps"]) == len(torchs["steps"])
        for a, b in zip(ours["steps"], torchs["steps"]):
            assert a["prefixes"] == b["prefixes"]
            assert [(c["row"], c["token"], c["fate"], c["slot"]) for c in a["candidates"]] == [
                (c["row"], c["token"], c["fate"], c["slot"]) for c in b["candidates"]]
            for key in ("log_prob", "token_log_prob"):
                assert [c[key] for c in a["candidates"]] == pytest.approx(
                    [c[key] for c in b["candidates"]], abs=1e-4)
            np.testing.assert_allclose(a["attention"], b["attention"], atol=2e-4)
