# Generated from book/decoding.md by tools/export.py: edit the chapter.
"""Greedy decoding and beam search with a key/value cache, and translation of sentences
(§6)."""

from __future__ import annotations

import json
import math
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor

from transformer.attention import KeyValueCache, padding_mask
from transformer.devices import default_static_cache
from transformer.model import Transformer, to_autocast_dtype
from transformer.tokenizer import BOS, EOS, PAD


@dataclass(frozen=True)
class DecodingDefaults:
    """The settings every decoder defaults to: the paper's beam of 4 and length
    penalty alpha 0.6 (§6.1), outputs up to their input's length + extra_len tokens,
    batch_size sentences decoded at once."""

    beam_size: int = 4
    alpha: float = 0.6
    extra_len: int = 50
    batch_size: int = 64


DECODING = DecodingDefaults()


def _output_limits(
    model: Transformer, src: Tensor, max_len: int | None,
    extra_len: int = DECODING.extra_len,
) -> Tensor:
    """Maximum output length of each sentence: max_len, or its input length + extra_len
    (50 in §6.1, 300 for parsing in §6.3) but no more than the model's max_len
    positions.
    """
    if max_len is not None:
        if max_len < 1:
            raise ValueError(f"max_len must be at least 1; got {max_len}")
        return torch.full((src.size(0),), max_len, device=src.device)
    if extra_len < 0:
        raise ValueError(f"extra_len must be >= 0; got {extra_len}")
    lengths = (src != model.config.pad_id).sum(1)
    return (lengths + extra_len).clamp(max=model.config.max_len)


def next_token_log_probs(logits: Tensor) -> Tensor:
    """The decoder's logits of a step (rows, vocab) -> log-probabilities of the next
    token, with <pad> and <bos> excluded (they are inputs, never outputs)."""
    logits = logits.float()
    logits[:, [PAD, BOS]] = float("-inf")
    return logits.log_softmax(-1)


class PreallocatedKeyValueCache(KeyValueCache):
    """A self-attention cache for outputs of at most `length` positions: each step's
    keys and values are written into buffers of `length` positions, allocated at the
    first step; `key` and `value` are views of the positions written."""

    def __init__(self, length: int):
        super().__init__()
        self.length, self.buffers = length, None

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        start, stop = self.steps, self.steps + key.size(2)
        if stop > self.length:
            raise ValueError(
                f"the cache holds {self.length} positions; a step asked for {stop}"
            )
        if self.buffers is None:  # (rows, h, length, d)
            self.buffers = [
                x.new_empty(*x.shape[:2], self.length, x.size(3)) for x in (key, value)
            ]
        for buffer, x in zip(self.buffers, (key, value)):
            buffer[:, :, start:stop] = x
        self.key, self.value = (buffer[:, :, :stop] for buffer in self.buffers)
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        if self.buffers is not None:  # the positions written, gathered into new buffers
            stop, buffers = self.steps, self.buffers
            self.buffers = [b.new_empty(len(index), *b.shape[1:]) for b in buffers]
            for old, b in zip(buffers, self.buffers):
                torch.index_select(old[:, :, :stop], 0, index, out=b[:, :, :stop])
            self.key, self.value = (b[:, :, :stop] for b in self.buffers)


class DecoderSteps:
    """The decoder one step at a time for `rows` prefixes: steps(prefix (rows, t), t)
    -> logits of the next token (rows, vocab). With the cache only the prefix's newest
    token is fed; without it, the whole prefix. `length`: the most steps asked for."""

    check_every = 1  # steps between the host's checks for the end: StaticCacheSteps
    drops_finished = True  # greedy's finished sentences leave the batch: keep(rows)

    def __init__(
        self, model: Transformer, memory: Tensor, memory_mask: Tensor, use_cache: bool,
        length: int,
    ):
        self.model, self.memory, self.memory_mask = model, memory, memory_mask
        self.cache = [
            (PreallocatedKeyValueCache(length), KeyValueCache(static=True))
            for _ in model.decoder.layers
        ] if use_cache else None

    def __call__(self, prefix: Tensor, t: int) -> Tensor:
        tokens = prefix if self.cache is None else prefix[:, -1:]
        return self.model.decode(
            tokens, self.memory, self.memory_mask, self.cache, check_ids=False
        )[:, -1]  # the ids are the decoder's own choices: no range check

    def reorder(self, rows: Tensor) -> None:
        """Continue from the prefixes `rows` (beam search's survivors)."""
        for self_cache, _ in self.cache or ():
            self_cache.reorder(rows)

    def keep(self, rows: Tensor) -> None:
        """Decode only the sentences `rows` from now on (greedy's unfinished ones)."""
        self.memory, self.memory_mask = self.memory[rows], self.memory_mask[rows]
        for self_cache, cross_cache in self.cache or ():
            self_cache.reorder(rows)
            cross_cache.reorder(rows)


def _decoder_steps(
    model: Transformer, memory: Tensor, memory_mask: Tensor, length: int,
    use_cache: bool, static_cache: bool | None,
) -> DecoderSteps:
    """The steps decoding asks for; static_cache defaults to on CUDA, with a cache, for
    outputs within the model's max_len positions (the growing cache extends its
    table)."""
    fits = length <= model.config.max_len
    if static_cache is None:
        static_cache = use_cache and default_static_cache(memory.device) and fits
    if static_cache and not use_cache:
        raise ValueError("static_cache=True is a cache: it needs use_cache=True")
    if static_cache and not fits:
        raise ValueError(
            f"static_cache=True holds the model's max_len={model.config.max_len} "
            f"positions; outputs of up to {length} tokens were asked for (max_len)"
        )
    if static_cache:
        return StaticCacheSteps(model, memory, memory_mask, length)
    return DecoderSteps(model, memory, memory_mask, use_cache, length)


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    max_len: int | None = None,
    use_cache: bool = True,
    extra_len: int = DECODING.extra_len,
    static_cache: bool | None = None,
) -> Tensor:
    """The most probable token at each step: src (batch, n) -> ids (batch, <= max_len).

    The output excludes <bos>; after a sentence's <eos> it holds <pad>. max_len defaults
    to each sentence's length + extra_len. use_cache=False recomputes the whole prefix
    every step; static_cache (default: on CUDA) see StaticCacheSteps.
    """
    limits = _output_limits(model, src, max_len, extra_len)
    longest = int(limits.max())
    memory, memory_mask = model.encode(src), padding_mask(src, model.config.pad_id)
    steps = _decoder_steps(model, memory, memory_mask, longest, use_cache, static_cache)
    prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    rows = None  # the sentences the steps decode (their rows of prefix); None: all
    for t in range(1, longest + 1):
        logits = steps(prefix if rows is None else prefix[rows], t)
        token = next_token_log_probs(logits).argmax(-1)
        if rows is not None:
            token = torch.full_like(finished, PAD, dtype=torch.long).index_copy(
                0, rows, token
            )
        token = token.masked_fill(finished, PAD)  # a finished sentence gets <pad>
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        finished |= (token == EOS) | (t >= limits)
        if t % steps.check_every == 0 and finished.all():
            break
        ended = finished if rows is None else finished[rows]
        if steps.drops_finished and ended.any():  # the steps go on without them
            keep = (~ended).nonzero()[:, 0]
            steps.keep(keep)
            rows = keep if rows is None else rows[keep]
    used = int((prefix != PAD).any(0).nonzero().max())  # the steps after the end: <pad>
    return prefix[:, 1 : used + 1]


def length_penalty(length: int | Tensor,
                   alpha: float = DECODING.alpha) -> float | Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha; scores are log P(Y|X) / lp(Y)."""
    return ((5 + length) / 6) ** alpha


@dataclass
class Hypotheses:
    """Beam search results, best first: tokens (batch, k, length) without <bos>, ended
    by <eos> then <pad> (or cut at the maximum length); scores log P / lp and log_probs
    (batch, k). A sentence with fewer than k finished hypotheses has <pad> rows scored
    -inf.
    """

    tokens: Tensor
    scores: Tensor
    log_probs: Tensor

    @classmethod
    def none(cls, batch: int, k: int, longest: int, device: torch.device) -> Hypotheses:
        """No hypothesis finished yet: k rows of <pad> for each sentence, scored
        -inf."""
        empty = torch.full((batch, k), float("-inf"), device=device)
        tokens = torch.full((batch, k, longest), PAD, dtype=torch.long, device=device)
        return cls(tokens, empty, empty.clone())


def _extend(
    alive: Tensor, alive_logp: Tensor, logp: Tensor, longest: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The 2k best one-token extensions of each sentence's k prefixes alive (batch * k,
    t): their log P, the rows of `alive` they extend, their new token (each (batch,
    2k)), and the extended sequences without <bos>, padded to `longest` (batch, 2k,
    longest)."""
    (batch, k), (vocab, t) = alive_logp.shape, (logp.size(-1), alive.size(1))
    candidates = (alive_logp.view(-1, 1) + logp).view(batch, k * vocab)
    top_logp, top = candidates.topk(min(2 * k, k * vocab), dim=1)
    first_row = torch.arange(batch, device=logp.device)[:, None] * k
    rows, token = top // vocab + first_row, top % vocab
    sequences = torch.cat([alive[rows.flatten(), 1:], token.view(-1, 1)], 1)
    sequences = F.pad(sequences.view(batch, -1, t), (0, longest - t), value=PAD)
    return top_logp, rows, token, sequences


def _add_finished(
    done: Hypotheses, sequences: Tensor, log_probs: Tensor, scores: Tensor
) -> None:
    """Keep the k best of the finished hypotheses and the candidates that just ended
    (those with a score; the others are -inf)."""
    k, longest = done.tokens.shape[1:]
    done.scores, best = torch.cat([done.scores, scores], 1).topk(k, dim=1)
    done.log_probs = torch.cat([done.log_probs, log_probs], 1).gather(1, best)
    done.tokens = torch.cat([done.tokens, sequences], 1).gather(
        1, best[..., None].expand(-1, -1, longest)
    )
    empty = done.scores == float("-inf")  # fewer than k finished so far
    done.tokens.masked_fill_(empty[..., None], PAD)
    done.log_probs.masked_fill_(empty, float("-inf"))


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam_size: int = DECODING.beam_size,
    alpha: float = DECODING.alpha,
    max_len: int | None = None,
    use_cache: bool = True,
    on_step: Callable[[int, Tensor, Tensor], None] | None = None,
    extra_len: int = DECODING.extra_len,
    static_cache: bool | None = None,
    trace: BeamTrace | None = None,
) -> Hypotheses:
    """Beam search with GNMT's length penalty over src (batch, n), all sentences at
    once; max_len defaults to each one's length + extra_len. on_step(t, prefixes (batch,
    k, t), log P (batch, k)) sees the beam after each step; trace (one sentence) records
    it. static_cache (default: on CUDA): see StaticCacheSteps."""
    batch, k, device = src.size(0), beam_size, src.device
    if k < 1 or alpha < 0 or (trace is not None and batch != 1):
        raise ValueError(
            "beam_size must be at least 1, alpha >= 0 (early stopping relies on it) "
            f"and a traced src one sentence; got beam_size={k}, alpha={alpha}, "
            f"src of {batch} sentences{' traced' if trace is not None else ''}")
    limits = _output_limits(model, src, max_len, extra_len)
    longest = int(limits.max())
    memory_mask = padding_mask(src, model.config.pad_id).repeat_interleave(k, 0)
    memory = model.encode(src).repeat_interleave(k, 0)  # (batch * k, n, d_model)
    steps = _decoder_steps(model, memory, memory_mask, longest, use_cache, static_cache)
    check_every = 1 if (on_step, trace) != (None, None) else steps.check_every
    alive = torch.full((batch * k, 1), BOS, dtype=torch.long, device=device)
    alive_logp = torch.zeros(batch, k, device=device)
    alive_logp[:, 1:] = float("-inf")  # one empty hypothesis, not k copies
    done = Hypotheses.none(batch, k, longest, device)
    complete = torch.zeros(batch, dtype=torch.bool, device=device)
    for t in range(1, longest + 1):
        logp = next_token_log_probs(steps(alive, t))
        top_logp, rows, token, sequences = _extend(alive, alive_logp, logp, longest)
        ended = (token == EOS) | (t >= limits)[:, None]
        ended_scores = (top_logp / length_penalty(t, alpha)).masked_fill(
            ~ended | complete[:, None], float("-inf"))
        _add_finished(done, sequences, top_logp, ended_scores)
        parent_logp, (alive_logp, keep) = alive_logp, top_logp.masked_fill(
            ended, float("-inf")).topk(k, dim=1)
        best_possible = alive_logp[:, 0] / length_penalty(limits, alpha)
        complete |= (done.scores[:, 0] >= best_possible) | (t >= limits)
        if trace is not None:
            trace.add(t, alive[:, 1:], parent_logp[0], logp, top_logp[0], rows[0],
                      token[0], ended_scores[0], keep[0], best_possible[0])
        if t % check_every == 0 and complete.all():
            break
        survivors = rows.gather(1, keep).flatten()  # the row each new prefix extends
        alive = torch.cat([alive[survivors], token.gather(1, keep).view(-1, 1)], 1)
        steps.reorder(survivors)
        if on_step is not None:
            on_step(t, alive[:, 1:].view(batch, k, t), alive_logp)
    used = int((done.tokens != PAD).any(1).any(0).nonzero().max()) + 1
    done.tokens = done.tokens[..., :used]
    if trace is not None:
        trace.end(done.tokens[0], done.log_probs[0], done.scores[0])
    return done


def encode_sources(
    tokenizer: Tokenizer, sentences: Sequence[str], max_len: int
) -> list[list[int]]:
    """Token ids + <eos> of each sentence, cut to max_len tokens (with a warning)."""
    encoded = []
    for line, e in enumerate(
        tokenizer.encode_batch(list(sentences), add_special_tokens=False), start=1
    ):
        ids = e.ids + [EOS]
        if len(ids) > max_len:
            warnings.warn(
                f"sentence {line} has {len(ids)} tokens (with <eos>) but the model "
                f"takes at most {max_len} (max_len); translating its first "
                f"{max_len} tokens only",
                stacklevel=3,
            )
            ids = ids[:max_len]
        encoded.append(ids)
    return encoded


@torch.no_grad()
def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    beam_size: int = DECODING.beam_size,
    alpha: float = DECODING.alpha,
    batch_size: int = DECODING.batch_size,
    progress: Callable[[int], object] | None = None,
    extra_len: int = DECODING.extra_len,
) -> list[str]:
    """Translations of `sentences`, in their order; beam_size=1 decodes greedily.

    progress(n) is called after each batch with the number of sentences it translated.
    Outputs stop at their input's length + extra_len tokens.
    """
    if isinstance(sentences, str):  # it would translate each character
        raise TypeError(
            "sentences must be a list of strings; got one string (pass [text])"
        )
    if batch_size < 1:
        raise ValueError(
            f"batch_size must be a positive number of sentences; got {batch_size}"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    encoded = encode_sources(tokenizer, sentences, model.config.max_len)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs: list[str] = [""] * len(encoded)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = torch.full(
            (len(chunk), max(len(encoded[i]) for i in chunk)), PAD, dtype=torch.long
        )
        for row, i in enumerate(chunk):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        src = src.to(device)
        if beam_size == 1:
            best = greedy_decode(model, src, extra_len=extra_len)
        else:
            best = beam_search(
                model, src, beam_size, alpha, extra_len=extra_len
            ).tokens[:, 0]
        for i, ids in zip(chunk, best.tolist()):
            outputs[i] = tokenizer.decode(ids[: ids.index(EOS)] if EOS in ids else ids)
        if progress is not None:
            progress(len(chunk))
    model.train(was_training)
    return outputs


def _finite(x: float) -> float | None:
    """A score for JSON: None for -inf (an empty slot of the beam)."""
    return float(x) if math.isfinite(x) else None


@dataclass
class Candidate:
    """One of a step's 2k best extensions: the step's prefix `row` extended by `token`.
    log_prob: its log P; token_log_prob: the decoder's log P of `token` after the
    prefix; score: log P / lp(t) where it ended (<eos> or the maximum length), else
    None; fate: "finished", "kept" (`slot`: its row at the next step) or "pruned"."""

    row: int
    token: int
    log_prob: float
    token_log_prob: float
    score: float | None
    fate: str
    slot: int | None = None


@dataclass
class BeamStep:
    """Step t: the k prefixes it extended (ids after <bos>; log P None for an empty
    slot), its candidates best first, the stopping rule's bound (the best log P that
    continues / lp of the maximum length) and, once recorded, each prefix's
    encoder-decoder attention as it chose (k, h, n), the last decoder layer's."""

    t: int
    prefixes: list[list[int]]
    log_probs: list[float | None]
    candidates: list[Candidate]
    bound: float | None
    attention: list | None = None


def _list(values) -> list:
    """A tensor's or an array's values (or a list's) as a Python list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


class BeamTrace:
    """One sentence's beam search, step by step, filled by beam_search(trace=...) or
    OnnxTranslator.beam: source ids, steps, the k best finished (ids through <eos>, log
    P, score), greedy's ids and score beside them; token(id) names an id for the view
    (a tokenizer's id_to_token)."""

    def __init__(self, source: Sequence[int], beam_size: int, alpha: float,
                 token: Callable[[int], str | None] | None = None):
        self.source, self.beam_size, self.alpha = _list(source), beam_size, alpha
        self.token, self.greedy, self.greedy_score, self.finished = token, [], None, []
        self.steps: list[BeamStep] = []

    def add(self, t, prefixes, prefix_log_probs, log_probs, top_log_probs, rows,
            tokens, scores, keep, bound, attention=None) -> None:
        """Step t: the k prefixes and their log P, the decoder's log P (k, vocab), the
        2k best extensions (log P, prefix, token, score or -inf), the kept's indices."""
        slots = {j: slot for slot, j in enumerate(_list(keep))}
        candidates = []
        for j, (lp, row, token, score) in enumerate(zip(*map(_list, (
                top_log_probs, rows, tokens, scores)))):
            if math.isfinite(lp):  # -inf: an extension of an empty slot
                fate = ("finished" if math.isfinite(score) else
                        "kept" if j in slots else "pruned")
                candidates.append(Candidate(
                    row, token, lp, float(log_probs[row][token]), _finite(score), fate,
                    slots[j] if fate == "kept" else None))
        self.steps.append(BeamStep(
            t, [[int(i) for i in _list(p)] for p in prefixes],
            [_finite(x) for x in _list(prefix_log_probs)], candidates,
            _finite(float(bound)), None if attention is None else _list(attention)))

    def end(self, tokens, log_probs, scores) -> None:
        """The search's k best finished hypotheses, best first (<pad> after <eos>)."""
        hypotheses = zip(*map(_list, (tokens, log_probs, scores)))
        self.finished = [([int(i) for i in _list(ids) if i != PAD], float(lp),
                          float(score)) for ids, lp, score in hypotheses
                         if math.isfinite(score)]

    def to_dict(self) -> dict:
        """The trace for JSON and for beamsearch.js, which draws it."""
        ids = {*self.source, *self.greedy, *(i for ids, _, _ in self.finished
                                            for i in ids)}
        for step in self.steps:
            ids.update(c.token for c in step.candidates)
        steps = [asdict(step) for step in self.steps]
        for step in steps:  # weights to 4 decimals, as the attention explorer's
            if step["attention"] is not None:
                step["attention"] = torch.tensor(step["attention"], dtype=torch.float64
                                                 ).mul(1e4).round().div(1e4).tolist()
        return {"source": self.source, "beam_size": self.beam_size, "alpha": self.alpha,
                "steps": steps, "greedy": self.greedy,
                "greedy_score": self.greedy_score,
                "finished": [{"ids": ids, "log_prob": lp, "score": score}
                             for ids, lp, score in self.finished],
                "tokens": {str(i): (self.token and self.token(i)) or f"<{i}>"
                           for i in sorted(ids)}}

    def _repr_html_(self) -> str:
        return script_view("beamsearch.js", "renderBeamSearch", self.to_dict(),
                           "beam-search")


def script_view(script: str, render: str, data: dict, name: str) -> str:
    """A notebook's HTML output that draws `data` with one of the package's scripts:
    render(root, data), a function that `script` defines, into a <div> of class name."""
    code = resources.files("transformer").joinpath(script).read_text()
    root = f"{name}-{uuid.uuid4().hex}"
    data_json = json.dumps(data).replace("</", "<\\/")  # no </script> in the data
    return (f'<div id="{root}" class="{name}"></div>\n<script>\n{code}\n{render}'
            f'(document.getElementById("{root}"), {data_json});\n</script>')


class StaticKeyValueCache(KeyValueCache):
    """A self-attention cache of `length` positions, allocated at the first step and
    written in place at `position` (a tensor of one index): the same buffers at every
    step. The positions not yet written must be masked out of the attention."""

    def __init__(self, length: int, position: Tensor):
        super().__init__()
        self.length, self.position = length, position

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        if self.key is None:  # (rows, h, length, d), in the projections' dtype
            self.key = key.new_zeros(*key.shape[:2], self.length, key.size(3))
            self.value = value.new_zeros(*value.shape[:2], self.length, value.size(3))
        self.key.index_copy_(2, self.position, key)
        self.value.index_copy_(2, self.position, value)
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        if self.key is not None:  # in place, so that a graph's buffers stay valid
            self.key.copy_(self.key.index_select(0, index))
            self.value.copy_(self.value.index_select(0, index))


class StaticCacheSteps(DecoderSteps):
    """Decoder steps on static caches of `length` positions; on CUDA, the steps after
    the first are one CUDA graph, replayed."""

    def __init__(
        self, model: Transformer, memory: Tensor, memory_mask: Tensor, length: int
    ):
        super().__init__(model, memory, memory_mask, use_cache=False, length=length)
        rows, device = memory.size(0), memory.device
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.cache = [
            (StaticKeyValueCache(length, self.position), KeyValueCache(static=True))
            for _ in model.decoder.layers
        ]
        self.keys = torch.arange(length, device=device)
        self.tokens = torch.full((rows, 1), BOS, dtype=torch.long, device=device)
        self.rows, self.reorders = torch.arange(rows, device=device), False
        self.graph, self.logits = None, None
        self.cuda = device.type == "cuda"
        self.drops_finished = False  # the same buffers, of the same rows, every step
        if self.cuda:
            self.check_every = 8

    def _step(self) -> Tensor:
        """One step from the inputs' buffers: the rows gathered, the token decoded."""
        if self.reorders:
            for self_cache, _ in self.cache:
                self_cache.reorder(self.rows)
        m = self.model
        x = m.tgt_embed(self.tokens, check_ids=False)
        x = m.dropout(m.tgt_positions(x, positions=self.position[:, None]))
        written = (self.keys <= self.position)[None, None, None, :]  # (1, 1, 1, length)
        y = m.decoder(to_autocast_dtype(x), self.memory, self.memory_mask, self.cache,
                      self_mask=written)
        return m.output(y)[:, -1]

    def __call__(self, prefix: Tensor, t: int) -> Tensor:
        self.tokens.copy_(prefix[:, -1:])
        self.position.fill_(t - 1)
        if not self.cuda:
            return self._step()
        with torch.cuda.device(self.memory.device):  # streams and graph on its GPU
            if self.graph is not None:
                self.graph.replay()
                return self.logits
            if t == 1:
                return self._step()
            logits = _on_side_stream(self._step)  # PyTorch's warm-up before a capture
            self.graph, self.logits = _capture(self._step)  # for the steps after it
            return logits

    def reorder(self, rows: Tensor) -> None:
        self.rows.copy_(rows)  # gathered at the start of the next step
        self.reorders = True


def _on_side_stream(step: Callable[[], Tensor]) -> Tensor:
    """step() run on a new CUDA stream, which the current stream then waits for."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        output = step()
    torch.cuda.current_stream().wait_stream(stream)
    return output


def _capture(step: Callable[[], Tensor]) -> tuple[torch.cuda.CUDAGraph, Tensor]:
    """step recorded as a CUDA graph, not run, and the tensor its replays write."""
    graph = torch.cuda.CUDAGraph()
    autocast = torch.is_autocast_enabled("cuda")
    dtype = torch.get_autocast_dtype("cuda")
    with torch.autocast("cuda", dtype, enabled=autocast, cache_enabled=False):
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):  # the current GPU's
            output = step()
    return graph, output


__all__ = [
    'DecodingDefaults',
    'next_token_log_probs',
    'PreallocatedKeyValueCache',
    'DecoderSteps',
    'greedy_decode',
    'length_penalty',
    'Hypotheses',
    'beam_search',
    'encode_sources',
    'translate',
    'Candidate',
    'BeamStep',
    'BeamTrace',
    'script_view',
    'StaticKeyValueCache',
    'StaticCacheSteps',
]
