"""Tests of transformer/decoding.py (book/decoding.md)."""

import itertools

import pytest
import torch

from transformer import (
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    train_tokenizer,
    translate,
)
from transformer import decoding
from transformer.attention import KeyValueCache, padding_mask
from transformer.decoding import DecoderSteps, PreallocatedKeyValueCache, StaticCacheSteps, length_penalty
from transformer.tokenizer import BOS, EOS, PAD

SMALL = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)


def test_cached_and_uncached_greedy_decoding_agree():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.randint(4, 40, (5, 9))
    src[2, 6:] = PAD
    cached, uncached = greedy_decode(model, src, max_len=15), greedy_decode(model, src, max_len=15, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.size(1) <= 15


def test_greedy_takes_the_argmax_of_the_full_decoder_at_every_step():
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.randint(4, 40, (2, 6))
    out = greedy_decode(model, src, max_len=6)
    prefix = torch.full((2, 1), 2)
    for step in range(out.size(1)):
        logits = model(src, prefix)[:, -1]
        logits[:, [PAD, BOS]] = float("-inf")  # never generated
        expected = logits.argmax(-1)
        finished = (out[:, :step] == EOS).any(1)
        assert torch.equal(out[:, step][~finished], expected[~finished])
        assert torch.all(out[:, step][finished] == PAD)
        prefix = torch.cat([prefix, out[:, step : step + 1]], 1)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_sentences_leave_the_batch_as_they_end_and_the_others_decode_as_alone(use_cache, monkeypatch):
    """A model whose <eos> row is scaled up ends its sentences after different numbers of
    steps; each sentence decoded alone is the oracle."""
    model = _model(2)
    with torch.no_grad():
        model.output.linear.weight[EOS] *= 5
    src = torch.randint(4, 40, (6, 9))
    kept = []
    keep = DecoderSteps.keep
    monkeypatch.setattr(DecoderSteps, "keep", lambda self, rows: kept.append(len(rows)) or keep(self, rows))
    together = greedy_decode(model, src, max_len=20, use_cache=use_cache)
    ends = {int((row == EOS).nonzero()[0]) for row in together if (row == EOS).any()}
    assert len(ends) >= 3 and (together == EOS).any(1).sum() < len(src), "ends at several steps, or never"
    assert kept and kept == sorted(kept, reverse=True) and kept[-1] < len(src)
    for row, sentence in zip(together, src):
        alone = greedy_decode(model, sentence[None], max_len=20, use_cache=use_cache)[0]
        assert torch.equal(row[: len(alone)], alone) and torch.all(row[len(alone) :] == PAD)


def test_the_preallocated_cache_holds_what_appending_holds_in_buffers_allocated_once():
    """torch.cat's growing cache (KeyValueCache) is the oracle, through appends and a reorder."""
    grown, written = KeyValueCache(), PreallocatedKeyValueCache(length=6)
    buffers = None
    for new in (2, 1, 3):
        key, value = torch.randn(3, 2, new, 4), torch.randn(3, 2, new, 4)
        expected, got = grown.append(key, value), written.append(key, value)
        assert all(torch.equal(a, b) for a, b in zip(expected, got)) and written.steps == grown.steps
        buffers = buffers or written.buffers[0].data_ptr()
        assert written.buffers[0].data_ptr() == buffers and written.buffers[0].shape == (3, 2, 6, 4)
        if new == 1:
            rows = torch.tensor([2, 0, 0])
            grown.reorder(rows), written.reorder(rows)
            assert torch.equal(written.key, grown.key) and torch.equal(written.value, grown.value)
            buffers = written.buffers[0].data_ptr()
    with pytest.raises(ValueError, match="the cache holds 6 positions; a step asked for 7"):
        written.append(torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4))


def test_translate_keeps_order_and_handles_empty_lines():
    torch.manual_seed(0)
    tokenizer = train_tokenizer(iter(["one two three", "eins zwei drei"] * 5), vocab_size=40)
    config = TransformerConfig(**{**SMALL, "src_vocab_size": tokenizer.get_vocab_size(), "tgt_vocab_size": tokenizer.get_vocab_size()})
    model = Transformer(config).train()
    sentences = ["one two three", "", "three", "one two three one two three"]
    outputs = translate(model, tokenizer, sentences, batch_size=2)
    assert len(outputs) == 4 and all(isinstance(o, str) for o in outputs)
    assert outputs == [translate(model, tokenizer, [s])[0] for s in sentences], "batching and sorting change nothing"
    assert model.training, "translate restores the training mode"


def _model(seed=0, **overrides):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**SMALL, **overrides})).eval()


def test_length_penalty_follows_the_gnmt_formula():
    for length in (1, 2, 7, 30):
        for alpha in (0.0, 0.6, 1.0):
            assert length_penalty(length, alpha) == pytest.approx(((5 + length) ** alpha) / (6**alpha))
    lengths = torch.arange(1, 10)
    torch.testing.assert_close(length_penalty(lengths, 0.6), ((5 + lengths) / 6) ** 0.6)


def test_beam_of_one_keeps_greedys_prefix_until_greedy_ends():
    """k = 1 keeps the most probable extension alive at every step: greedy's prefix (the
    result may differ: a runner-up ending in <eos> is kept as finished and can win)."""
    model = _model(2)
    src = torch.randint(4, 40, (6, 8))
    src[1, 5:] = PAD
    greedy = greedy_decode(model, src, max_len=20)  # one limit: every sentence stops at it
    prefixes = {}
    beam_search(model, src, beam_size=1, max_len=20, on_step=lambda t, alive, _: prefixes.update({t: alive[:, 0]}))
    before_eos = (greedy != EOS).cumprod(1).sum(1)
    compared = 0
    for t, alive in prefixes.items():
        going = before_eos >= t
        if going.any():
            assert torch.equal(alive[going], greedy[going, :t])
            compared += int(going.sum())
    assert compared >= 6 * 8


def test_cached_and_uncached_beam_search_agree():
    model = _model(3)
    src = torch.randint(4, 40, (4, 7))
    src[0, 4:] = PAD
    cached = beam_search(model, src, beam_size=4, max_len=12)
    uncached = beam_search(model, src, beam_size=4, max_len=12, use_cache=False)
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores)
    torch.testing.assert_close(cached.log_probs, uncached.log_probs)


def test_beam_results_do_not_depend_on_the_batch():
    model = _model(4)
    src = torch.randint(4, 40, (5, 9))
    src[2, 3:] = PAD
    together = beam_search(model, src, beam_size=3)
    for i in range(5):
        alone = beam_search(model, src[i : i + 1, : int((src[i] != PAD).sum())], beam_size=3)
        width = alone.tokens.size(-1)
        assert torch.equal(together.tokens[i, :, :width], alone.tokens[0])
        assert torch.all(together.tokens[i, :, width:] == PAD)
        torch.testing.assert_close(together.scores[i], alone.scores[0])


def test_scores_are_log_probabilities_over_the_length_penalty_and_sorted():
    model = _model(5)
    src = torch.randint(4, 40, (3, 6))
    result = beam_search(model, src, beam_size=4, alpha=0.6, max_len=10)
    assert torch.all(result.scores[:, :-1] >= result.scores[:, 1:])
    for b, j in itertools.product(range(3), range(4)):
        seq = [t for t in result.tokens[b, j].tolist() if t != PAD]
        logits = model(src[b : b + 1], torch.tensor([[BOS, *seq[:-1]]]))[0]
        logits[:, [PAD, BOS]] = float("-inf")
        logp = logits.log_softmax(-1).gather(1, torch.tensor([seq]).T).sum()
        assert result.log_probs[b, j].item() == pytest.approx(logp.item(), abs=1e-4)
        assert result.scores[b, j].item() == pytest.approx(logp.item() / length_penalty(len(seq), 0.6), abs=1e-4)
        assert EOS in seq or len(seq) == 10


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_a_beam_wide_enough_finds_the_exhaustive_best(alpha):
    model = _model(14, src_vocab_size=7, tgt_vocab_size=7, d_model=16, n_heads=2, d_ff=32, n_layers=1)
    x, max_len, outputs = torch.tensor([[4, 5, 6]]), 3, [1, 3, 4, 5, 6]
    best = (float("-inf"), None)
    with torch.no_grad():
        for length in range(1, max_len + 1):
            for seq in itertools.product(outputs, repeat=length):
                if EOS in seq[:-1] or (length < max_len and seq[-1] != EOS):
                    continue
                logits = model(x, torch.tensor([[BOS, *seq[:-1]]]))[0]
                logits[:, [PAD, BOS]] = float("-inf")
                logp = logits.log_softmax(-1).gather(1, torch.tensor([seq]).T).sum()
                best = max(best, (logp.item() / length_penalty(length, alpha), seq))
    found = beam_search(model, x, beam_size=len(outputs) ** max_len, alpha=alpha, max_len=max_len)
    assert tuple(t for t in found.tokens[0, 0].tolist() if t != PAD) == best[1]
    assert found.scores[0, 0].item() == pytest.approx(best[0], abs=1e-5)


def test_beam_search_rejects_a_bad_beam_size_and_max_len():
    model = _model()
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, torch.tensor([[5, 6]]), beam_size=0)
    with pytest.raises(ValueError, match="alpha >= 0"):
        beam_search(model, torch.tensor([[5, 6]]), alpha=-0.5)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, torch.tensor([[5, 6]]), max_len=0)


def test_outputs_stop_at_input_length_plus_extra_len_without_eos():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    model.output.register_forward_hook(lambda module, args, logits: logits.index_fill(-1, torch.tensor([EOS]), -1e9))
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, PAD, PAD]])  # lengths 5 and 3
    for extra_len in (0, 4, 30):
        greedy = greedy_decode(model, src, extra_len=extra_len)
        beam = beam_search(model, src, beam_size=3, extra_len=extra_len).tokens[:, 0]
        for out in (greedy, beam):
            lengths = (out != PAD).sum(1).tolist()
            assert lengths == [min(5 + extra_len, model.config.max_len), min(3 + extra_len, model.config.max_len)]
            assert not (out == EOS).any()
    with pytest.raises(ValueError, match="extra_len"):
        greedy_decode(model, src, extra_len=-1)


def _tokenizer_and_model(**overrides):
    tokenizer = train_tokenizer(iter(["one two three", "eins zwei drei"] * 5), vocab_size=40)
    vocab = tokenizer.get_vocab_size()
    return tokenizer, _model(0, src_vocab_size=vocab, tgt_vocab_size=vocab, **overrides)


def test_translate_with_beam_search_handles_unknown_characters_and_batches():
    tokenizer, model = _tokenizer_and_model()
    sentences = ["one two three", "", "三 € ☃ one", "three two"]
    outputs = translate(model, tokenizer, sentences, beam_size=3, batch_size=3)
    assert outputs == [translate(model, tokenizer, [s], beam_size=3)[0] for s in sentences]
    assert len(translate(model, tokenizer, sentences, beam_size=1)) == 4
    assert all(isinstance(o, str) for o in outputs)


def test_translate_cuts_a_line_longer_than_max_len_and_says_so():
    tokenizer, model = _tokenizer_and_model(positional="learned", max_len=12)
    long_line = " ".join(["one two three"] * 10)
    with pytest.warns(UserWarning, match=r"sentence 2 has \d+ tokens .* at most 12"):
        outputs = translate(model, tokenizer, ["one", long_line], beam_size=2)
    assert len(outputs) == 2


def test_translate_reports_progress():
    tokenizer, model = _tokenizer_and_model()
    seen = []
    translate(model, tokenizer, ["one"] * 5, beam_size=2, batch_size=2, progress=seen.append)
    assert seen == [2, 2, 1]


def test_translate_refuses_a_string_and_a_batch_size_below_one():
    tokenizer = train_tokenizer(iter(["a b c", "x y z"] * 10), vocab_size=30)
    model = Transformer(TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=16, n_heads=2, d_ff=32,
                                          n_layers=1))
    with pytest.raises(TypeError, match=r"a list of strings; got one string \(pass \[text\]\)"):
        translate(model, tokenizer, "a b c")
    with pytest.raises(ValueError, match="batch_size must be a positive number of sentences; got 0"):
        translate(model, tokenizer, ["a b c"], batch_size=0)


def _decodings(model, src, **options):
    """Greedy tokens and beam-4 hypotheses of src with the given options."""
    return greedy_decode(model, src, **options), beam_search(model, src, beam_size=4, **options)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("check_every", [1, 8])
def test_the_static_cache_gives_the_uncached_tokens_and_scores(norm_first, check_every, monkeypatch):
    """On the CPU (no graph): the static cache, the growing cache and no cache choose the same
    tokens with the same scores; check_every=8 (CUDA's) runs steps past the end, which must be
    trimmed away."""
    monkeypatch.setattr(StaticCacheSteps, "check_every", check_every)
    model = _model(6, norm_first=norm_first)
    src = torch.randint(4, 40, (5, 8))
    src[1, 5:] = PAD
    static = _decodings(model, src, max_len=14, static_cache=True)
    for other in (_decodings(model, src, max_len=14, static_cache=False),
                  _decodings(model, src, max_len=14, use_cache=False)):
        assert torch.equal(static[0], other[0])
        assert torch.equal(static[1].tokens, other[1].tokens)
        torch.testing.assert_close(static[1].scores, other[1].scores)
        torch.testing.assert_close(static[1].log_probs, other[1].log_probs)


def test_the_static_cache_writes_one_position_a_step_in_buffers_allocated_once():
    model = _model(7)
    src = torch.randint(4, 40, (2, 6))
    memory = model.encode(src)
    steps = StaticCacheSteps(model, memory, padding_mask(src, PAD), length=5)
    prefix = torch.full((2, 1), BOS)
    buffers = None
    for t in range(1, 4):
        logits = steps(prefix, t)
        prefix = torch.cat([prefix, logits.argmax(-1, keepdim=True)], 1)
        key = steps.cache[0][0].key
        buffers = buffers or key.data_ptr()
        assert key.shape == (2, 4, 5, 8) and key.data_ptr() == buffers
        assert torch.all(key[:, :, t:] == 0) and torch.all(key[:, :, :t].abs().sum(-1) > 0)


def test_static_cache_without_the_cache_or_beyond_max_len_is_refused():
    model = _model(8, max_len=16)
    src = torch.randint(4, 40, (1, 4))
    with pytest.raises(ValueError, match="static_cache=True is a cache: it needs use_cache=True"):
        greedy_decode(model, src, use_cache=False, static_cache=True)
    with pytest.raises(ValueError, match="max_len=16 positions; outputs of up to 20 tokens"):
        greedy_decode(model, src, max_len=20, static_cache=True)
    # by default a longer output decodes with the growing cache, whose table grows
    assert greedy_decode(model, src, max_len=20).size(1) <= 20


@pytest.mark.gpu
@pytest.mark.parametrize("norm_first", [False, True])
def test_cuda_graph_steps_give_the_growing_caches_tokens_and_scores(norm_first, monkeypatch):
    """On CUDA the static cache's steps after the second are one replayed CUDA graph (counted);
    in fp32 they choose the growing cache's tokens, with its scores."""
    captures = []
    capture = decoding._capture
    monkeypatch.setattr(decoding, "_capture", lambda step: captures.append(1) or capture(step))
    model = _model(9, norm_first=norm_first).cuda()
    src = torch.randint(4, 40, (6, 9), device="cuda")
    src[2, 4:] = PAD
    graphs = _decodings(model, src, max_len=16)
    assert len(captures) == 2  # one graph for greedy, one for beam search
    growing = _decodings(model, src, max_len=16, static_cache=False)
    assert torch.equal(graphs[0], growing[0])
    assert torch.equal(graphs[1].tokens, growing[1].tokens)
    torch.testing.assert_close(graphs[1].scores, growing[1].scores)


@pytest.mark.gpu
def test_cuda_graph_steps_under_bf16_autocast_stay_within_bf16s_rounding():
    """Under autocast the graph records the casts; its log-probabilities are the growing cache's
    within bf16's rounding (8 bits of mantissa) on the same tokens."""
    model = _model(10).cuda()
    src = torch.randint(4, 40, (6, 9), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        graphs = beam_search(model, src, beam_size=4, max_len=12)
        growing = beam_search(model, src, beam_size=4, max_len=12, static_cache=False)
    same = (graphs.tokens == growing.tokens).all(-1)  # (batch, k): the same hypothesis
    assert same.float().mean() >= 0.5
    torch.testing.assert_close(graphs.log_probs[same], growing.log_probs[same], atol=0.1, rtol=0.02)


def _replayed(trace, model, src, limit):
    """Step by step, what the model itself says each step of `trace` should hold: the
    prefixes (the last step's kept candidates, in their slots), the 2k best extensions of
    every prefix from the model run on the whole prefix, the fates (finished where they
    ended, then the k best of the others kept) and the stop (the first step whose best
    finished score reaches the bound, or the limit). Returns the best finished (score,
    ids) of all steps."""
    k, alpha, best = trace.beam_size, trace.alpha, (float("-inf"), None)
    prefixes, logp_of = [[]], [0.0]  # step 1: one empty prefix; the other slots are empty
    for step in trace.steps:
        assert step.prefixes[: len(prefixes)] == prefixes
        assert step.log_probs[: len(prefixes)] == pytest.approx(logp_of, abs=1e-4)
        assert all(p is None for p in step.log_probs[len(prefixes):])
        tgt = torch.tensor([[BOS, *p] for p in prefixes])
        with torch.no_grad():
            logits = model(src.expand(len(tgt), -1), tgt)[:, -1].float()
        logits[:, [PAD, BOS]] = float("-inf")  # never generated: written out here
        sums = torch.tensor(logp_of)[:, None] + logits.log_softmax(-1)
        order = sums.flatten().sort(descending=True, stable=True)
        top = order.indices[: 2 * k].tolist()
        assert [(c.row, c.token) for c in step.candidates] == [divmod(i, sums.size(1)) for i in top]
        going = []
        for c, value in zip(step.candidates, order.values[: 2 * k].tolist()):
            assert c.log_prob == pytest.approx(value, abs=1e-4)
            assert c.log_prob == pytest.approx(logp_of[c.row] + c.token_log_prob, abs=1e-5)
            ended = c.token == EOS or step.t == limit
            assert (c.fate == "finished") == ended
            if ended:
                assert c.score == pytest.approx(c.log_prob / ((5 + step.t) / 6) ** alpha, rel=1e-6)
                best = max(best, (c.score, prefixes[c.row] + [c.token]), key=lambda b: b[0])
            else:
                going.append(c)
        assert [c.fate for c in going] == ["kept"] * min(k, len(going)) + ["pruned"] * (len(going) - k)
        assert [c.slot for c in going[:k]] == list(range(min(k, len(going))))
        bound = going[0].log_prob / ((5 + limit) / 6) ** alpha if going else float("-inf")
        assert (step.bound or float("-inf")) == pytest.approx(bound, rel=1e-6)
        stops = best[0] >= bound or step.t == limit
        assert stops == (step is trace.steps[-1]), f"step {step.t}: stop {stops}"
        prefixes = [prefixes[c.row] + [c.token] for c in going[:k]]
        logp_of = [c.log_prob for c in going[:k]]
    return best


@pytest.mark.parametrize("seed, beam_size, alpha", [(0, 4, 0.6), (1, 1, 0.6), (2, 3, 0.0), (3, 5, 1.0)])
def test_a_traced_search_returns_the_untraced_ones_output_and_each_step_replays(seed, beam_size, alpha):
    """The trace changes nothing (tokens, scores and log P equal the untraced search's,
    bit for bit), and each of its steps is what the model run on the whole prefixes says
    it should be; its best finished candidate is the output."""
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    for n in (1, 3, 6, 9):
        src = torch.randint(4, 40, (1, n))
        trace = decoding.BeamTrace(src[0], beam_size, alpha)
        traced = beam_search(model, src, beam_size, alpha, max_len=12, trace=trace)
        untraced = beam_search(model, src, beam_size, alpha, max_len=12)
        for name in ("tokens", "scores", "log_probs"):
            assert torch.equal(getattr(traced, name), getattr(untraced, name)), name
        score, ids = _replayed(trace, model, src, limit=12)
        assert trace.finished[0][2] == score and trace.finished[0][0] == ids
        assert [h[0] for h in trace.finished] == [
            [i for i in row if i != PAD] for row in untraced.tokens[0].tolist()[: len(trace.finished)]]


def test_a_trace_is_of_one_sentence():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.randint(4, 40, (2, 5))
    with pytest.raises(ValueError, match="a traced src one sentence; got beam_size=4, alpha=0.6, src of 2 sentences traced"):
        beam_search(model, src, trace=decoding.BeamTrace(src[0], 4, 0.6))
