"""Decoding speed: greedy and beam search, with and without the key/value cache, and a greedy
decoder built on torch.nn.TransformerEncoder/Decoder (which has no cache) with the same weights,
on the same sentences, in one run. Each variant's output is checked against ours.

    python benchmarks/decoding_speed.py --checkpoint runs/m30k --data ../shared/data/multi30k \
        --sentences 200 --out benchmarks/results/decoding_cpu.json

Without --checkpoint it times an untrained model of the small preset's size on the number corpus
(untrained, it writes to the maximum length, input + 50 tokens).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from report import write_report
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
from transformer.data import BOS, EOS, PAD


class TorchGreedy(nn.Module):
    """Our embeddings and output layer around nn.TransformerEncoder/Decoder with our weights."""

    def __init__(self, model: Transformer):
        super().__init__()
        c = model.config
        if c.norm_first or c.activation != "relu" or c.d_k is not None or c.d_v is not None:
            raise ValueError("the peer needs a post-LN ReLU model with d_k = d_v = d_model / h")
        make = dict(d_model=c.d_model, nhead=c.n_heads, dim_feedforward=c.d_ff, dropout=0.0, batch_first=True,
                    layer_norm_eps=c.layer_norm_eps)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**make), c.n_layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**make), c.n_layers)
        self.model = model
        with torch.no_grad():
            for ours, theirs in zip(model.encoder.layers, self.encoder.layers):
                self._copy(ours, theirs, [ours.self_attn], [theirs.self_attn])
            for ours, theirs in zip(model.decoder.layers, self.decoder.layers):
                self._copy(ours, theirs, [ours.self_attn, ours.cross_attn], [theirs.self_attn, theirs.multihead_attn])

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


def timed(decode, srcs: list[torch.Tensor]) -> tuple[float, list[torch.Tensor]]:
    start = time.perf_counter()
    outputs = [decode(src).cpu() for src in srcs]  # .cpu() waits for a GPU to finish
    return time.perf_counter() - start, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="checkpoint file or training folder (default: an untrained small model)")
    parser.add_argument("--data", default="numbers", help="corpus whose test sentences are decoded")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = load_corpus(args.data)
    sources = [s for s, _ in corpus.splits["test"][: args.sentences]]
    if args.checkpoint:
        path = Path(args.checkpoint)
        model, tokenizer = load_model(last_checkpoints(path, 1)[0] if path.is_dir() else path)
    else:
        torch.manual_seed(0)
        tokenizer = train_tokenizer(corpus.texts("train"), 200)
        vocab = tokenizer.get_vocab_size()
        model = Transformer(TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=256, n_heads=4,
                                              d_ff=1024, n_layers=3)).eval()
    ids = [e.ids + [EOS] for e in tokenizer.encode_batch(sources, add_special_tokens=False)]
    device = torch.device(args.device)
    model = model.to(device)
    srcs = [src.to(device) for src in batches(ids, args.batch_size)]
    peer = TorchGreedy(model).to(device).eval()
    variants = {
        "greedy, cache": lambda s: greedy_decode(model, s),
        "greedy, no cache": lambda s: greedy_decode(model, s, use_cache=False),
        "beam 4, cache": lambda s: beam_search(model, s, 4).tokens[:, 0],
        "beam 4, no cache": lambda s: beam_search(model, s, 4, use_cache=False).tokens[:, 0],
        "nn.Transformer greedy (no cache)": peer.greedy,
    }
    greedy_decode(model, srcs[0][:2])  # warm-up
    results, outputs = {}, {}
    for name, decode in variants.items():
        seconds, outputs[name] = timed(decode, srcs)
        tokens = sum(int(((o != PAD) & (o != EOS)).sum()) for o in outputs[name])
        results[name] = {"seconds": seconds, "sentences_per_s": len(sources) / seconds,
                         "output_tokens_per_s": tokens / seconds}
        print(f"{name:34} {seconds:7.2f} s  {len(sources) / seconds:7.1f} sentences/s  "
              f"{tokens / seconds:8.0f} tokens/s", flush=True)
    same = {
        "greedy: cache == no cache": all(torch.equal(a, b) for a, b in zip(outputs["greedy, cache"], outputs["greedy, no cache"])),
        "beam 4: cache == no cache": all(torch.equal(a, b) for a, b in zip(outputs["beam 4, cache"], outputs["beam 4, no cache"])),
        "greedy: ours == nn.Transformer": all(torch.equal(a, b) for a, b in zip(outputs["greedy, cache"], outputs["nn.Transformer greedy (no cache)"])),
    }
    speedups = {
        "greedy: cache / no cache": results["greedy, no cache"]["seconds"] / results["greedy, cache"]["seconds"],
        "beam 4: cache / no cache": results["beam 4, no cache"]["seconds"] / results["beam 4, cache"]["seconds"],
        "greedy: ours (cache) / nn.Transformer": results["nn.Transformer greedy (no cache)"]["seconds"] / results["greedy, cache"]["seconds"],
    }
    for name, value in same.items():
        print(f"{name}: {'same tokens' if value else 'DIFFERENT tokens'}")
    for name, value in speedups.items():
        print(f"speed-up {name}: {value:.2f}x")
    if args.out:
        write_report(args.out, {"sentences": len(sources), "batch_size": args.batch_size,
                                "parameters": sum(p.numel() for p in model.parameters()), "results": results,
                                "same_output": same, "speedups": speedups}, device)
    if not all(same.values()):
        raise SystemExit("outputs differ")


if __name__ == "__main__":
    main()
