"""Decoding speed: greedy and beam 4 without the key/value cache, with the growing cache and
with the static cache (replayed as CUDA graphs on a GPU), at several batch sizes, in fp32 and
bf16, beside a greedy decoder built on torch.nn.TransformerEncoder/Decoder (which has no cache)
with the same weights, on the same sentences, in one run. Every variant's tokens are compared
with the uncached decoder's of the same precision, and bf16's with fp32's.

    python benchmarks/decoding_speed.py --checkpoint runs/m30k --data DIR --device cuda \
        --out benchmarks/results/decoding_gpu.json

Batch size b decodes the first min(--sentences, max(32, 8 b)) test sentences (32 at b = 1, all
1000 of Multi30k's test set at b = 128). Without --checkpoint it times an untrained model of
the small preset's size on the number corpus (untrained, it writes to the maximum length).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
from torch import nn

from report import spread, write_report
from transformer import (
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    last_checkpoints,
    load_corpus,
    load_model,
    train_tokenizer,
)
from transformer.tokenizer import BOS, EOS, PAD


class TorchGreedy(nn.Module):
    """Our embeddings and output layer around nn.TransformerEncoder/Decoder with our weights."""

    def __init__(self, model: Transformer):
        super().__init__()
        c = model.config
        if c.activation != "relu" or c.d_k is not None or c.d_v is not None:
            raise ValueError("the peer needs a ReLU model with d_k = d_v = d_model / h")
        make = dict(d_model=c.d_model, nhead=c.n_heads, dim_feedforward=c.d_ff, dropout=0.0, batch_first=True,
                    layer_norm_eps=c.layer_norm_eps, norm_first=c.norm_first)
        final = (lambda: nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)) if c.norm_first else (lambda: None)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**make), c.n_layers, norm=final(),
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**make), c.n_layers, norm=final())
        self.model = model
        with torch.no_grad():
            for ours, theirs in zip(model.encoder.layers, self.encoder.layers):
                self._copy(ours, theirs, [ours.self_attn], [theirs.self_attn])
            for ours, theirs in zip(model.decoder.layers, self.decoder.layers):
                self._copy(ours, theirs, [ours.self_attn, ours.cross_attn], [theirs.self_attn, theirs.multihead_attn])
            for ours, theirs in ((model.encoder, self.encoder), (model.decoder, self.decoder)):
                if c.norm_first:  # the pre-LN stacks' final LayerNorm
                    theirs.norm.weight.copy_(ours.norm.weight)
                    theirs.norm.bias.copy_(ours.norm.bias)

    @staticmethod
    def _copy(ours, theirs, our_attention, their_attention):
        for a, b in zip(our_attention, their_attention):
            b.in_proj_weight.copy_(a.w_qkv.weight)  # W^Q, W^K, W^V stacked as in_proj
            b.in_proj_bias.copy_(a.w_qkv.bias)
            b.out_proj.weight.copy_(a.w_o.weight)
            b.out_proj.bias.copy_(a.w_o.bias)
        for a, b in ((ours.feed_forward.w_1, theirs.linear1), (ours.feed_forward.w_2, theirs.linear2)):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
        norms = [theirs.norm1, theirs.norm2] + ([theirs.norm3] if hasattr(theirs, "norm3") else [])
        for sublayer, norm in zip(ours.sublayers, norms):
            norm.weight.copy_(sublayer.norm.weight)
            norm.bias.copy_(sublayer.norm.bias)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor) -> torch.Tensor:
        m = self.model
        src_pad = src == PAD
        memory = self.encoder(m.src_positions(m.src_embed(src)), src_key_padding_mask=src_pad)
        limits = ((~src_pad).sum(1) + 50).clamp(max=m.config.max_len)
        prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for t in range(1, int(limits.max()) + 1):
            causal = nn.Transformer.generate_square_subsequent_mask(t, device=src.device)
            x = self.decoder(m.tgt_positions(m.tgt_embed(prefix)), memory, tgt_mask=causal, tgt_is_causal=True,
                             memory_key_padding_mask=src_pad)
            logits = m.output(x[:, -1]).float()
            logits[:, [PAD, BOS]] = float("-inf")
            token = logits.argmax(-1).masked_fill(finished, PAD)
            prefix = torch.cat([prefix, token[:, None]], 1)
            finished |= (token == EOS) | (t >= limits)
            if finished.all():
                break
        return prefix[:, 1:]


def batches(ids: list[list[int]], size: int) -> list[torch.Tensor]:
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = []
    for start in range(0, len(order), size):
        chunk = [ids[i] for i in order[start:start + size]]
        src = torch.full((len(chunk), max(map(len, chunk))), PAD, dtype=torch.long)
        for row, sentence in enumerate(chunk):
            src[row, :len(sentence)] = torch.tensor(sentence)
        out.append(src)
    return out


def sentences_of(outputs: list[torch.Tensor]) -> list[tuple[int, ...]]:
    """Each sentence's tokens up to its <eos> (the rest is <pad>)."""
    return [tuple(t for t in row.tolist() if t != PAD) for batch in outputs for row in batch]


def variants(model: Transformer, peer: TorchGreedy) -> dict:
    return {
        "greedy, no cache": lambda s: greedy_decode(model, s, use_cache=False),
        "greedy, growing cache": lambda s: greedy_decode(model, s, static_cache=False),
        "greedy, static cache": lambda s: greedy_decode(model, s, static_cache=True),
        "beam 4, no cache": lambda s: beam_search(model, s, 4, use_cache=False).tokens[:, 0],
        "beam 4, growing cache": lambda s: beam_search(model, s, 4, static_cache=False).tokens[:, 0],
        "beam 4, static cache": lambda s: beam_search(model, s, 4, static_cache=True).tokens[:, 0],
        "nn.Transformer greedy": peer.greedy,
    }


def measure(decoders: dict, srcs: list[torch.Tensor], precision: str, repeats: int, device: torch.device):
    """Seconds of each decoder over srcs, `repeats` times (the decoders interleaved), and its
    sentences' tokens."""
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    seconds = {name: [] for name in decoders}
    outputs = {}
    with autocast:
        for decode in decoders.values():
            decode(srcs[0])  # warm-up: kernels chosen, memory pools grown
        for _ in range(repeats):
            for name, decode in decoders.items():
                start = time.perf_counter()
                outputs[name] = [decode(src).cpu() for src in srcs]  # .cpu() waits for a GPU
                seconds[name].append(time.perf_counter() - start)
    return seconds, {name: sentences_of(o) for name, o in outputs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="checkpoint file or training folder (default: an untrained small model)")
    parser.add_argument("--data", default="numbers", help="corpus whose test sentences are decoded")
    parser.add_argument("--sentences", type=int, default=1000, help="the most sentences a batch size decodes")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 128])
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = load_corpus(args.data)
    if args.checkpoint:
        path = Path(args.checkpoint)
        model, tokenizer = load_model(last_checkpoints(path, 1)[0] if path.is_dir() else path)
    else:
        torch.manual_seed(0)
        tokenizer = train_tokenizer(corpus.texts("train"), 200)
        vocab = tokenizer.get_vocab_size()
        model = Transformer(TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=256, n_heads=4,
                                              d_ff=1024, n_layers=3)).eval()
    sources = [s for s, _ in corpus.splits["test"][: args.sentences]]
    ids = [e.ids + [EOS] for e in tokenizer.encode_batch(sources, add_special_tokens=False)]
    device = torch.device(args.device)
    model = model.to(device).eval()
    decoders = variants(model, TorchGreedy(model).to(device).eval())
    results, same, tokens = {}, {}, {}
    for precision in args.precisions:
        for b in args.batch_sizes:
            n = min(len(ids), max(32, 8 * b))
            srcs = [src.to(device) for src in batches(ids[:n], b)]
            seconds, tokens[precision, b] = measure(decoders, srcs, precision, args.repeats, device)
            key = f"{precision}, batch {b}"
            results[key] = {"sentences": n}
            for name, times in seconds.items():
                results[key][name] = {"seconds": spread(times), "sentences_per_s": spread([n / s for s in times])}
                print(f"{key:16} {name:24} {n / min(times):8.1f} sentences/s (best of {len(times)})", flush=True)
            out = tokens[precision, b]
            same[key] = {name: sum(a != r for a, r in zip(out[name], out[reference]))
                         for name in decoders if name != (reference := f"{name.split(',')[0]}, no cache")
                         and not name.startswith("nn.")}
            same[key]["nn.Transformer greedy"] = sum(
                a != r for a, r in zip(out["nn.Transformer greedy"], out["greedy, no cache"]))
            print(f"{key}: sentences that differ from the uncached decoder's: {same[key]}", flush=True)
            if args.out:  # after every block, so that a run cut short leaves what it measured
                write_report(args.out, {"batch_sizes": args.batch_sizes, "precisions": args.precisions,
                                        "repeats": args.repeats, "complete": False,
                                        "parameters": sum(p.numel() for p in model.parameters()),
                                        "norm_first": model.config.norm_first, "results": results,
                                        "differ_from_uncached": same}, device)
    bf16_changes = {
        f"batch {b}": {name: sum(a != r for a, r in zip(tokens["bf16", b][name], tokens["fp32", b][name]))
                       for name in decoders}
        for b in args.batch_sizes if ("bf16", b) in tokens and ("fp32", b) in tokens
    }
    if bf16_changes:
        print(f"sentences bf16 changes from fp32's: {bf16_changes}")
    if args.out:
        write_report(args.out, {"batch_sizes": args.batch_sizes, "precisions": args.precisions,
                                "repeats": args.repeats, "complete": True,
                                "parameters": sum(p.numel() for p in model.parameters()),
                                "norm_first": model.config.norm_first, "results": results,
                                "differ_from_uncached": same, "bf16_changes": bf16_changes}, device)


if __name__ == "__main__":
    main()
