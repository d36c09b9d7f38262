"""Tests of transformer/fast.py (book/fast.md): each fast path against the reference it
replaces, and the switch that turns them off."""

import contextlib
import itertools
import platform
import resource

import pytest
import torch
import torch.nn.functional as F

import transformer.attention as attention_module
from transformer import MultiHeadAttention, Transformer, TransformerConfig, scaled_dot_product_attention
from transformer.attention import causal_mask, padding_mask, segment_mask
from transformer.fast import (
    Dropout,
    FastPaths,
    LayerNorm,
    attention_for_cpu_training,
    keep_freed_memory,
    output_loss,
    reference_paths,
)
from transformer.tokenizer import PAD


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def _attention_in_float64(q, k, v, mask):
    """Oracle: torch's composite kernel in float64."""
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)


def test_cpu_training_attention_equals_torch_forward_and_backward():
    segments = torch.tensor([[1, 1, 2, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 2]])
    keys = torch.tensor([[1, 2, 3, 4, 5, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
    masks = {"none": None, "padding": padding_mask(keys, 0), "causal": causal_mask(7),
             "packed": segment_mask(segments, segments) & causal_mask(7)}
    for name, mask in masks.items():
        q, k, v = (torch.randn(2, 4, 7, d, requires_grad=True) for d in (16, 16, 8))
        ours = attention_for_cpu_training(q, k, v, mask, 0.0)
        expected = _attention_in_float64(q, k, v, mask)
        torch.testing.assert_close(ours.double(), expected, atol=1e-5, rtol=1e-5, msg=name)
        g = torch.randn_like(ours)
        for a, b in zip(torch.autograd.grad(ours, (q, k, v), g),
                        torch.autograd.grad(expected, (q, k, v), g.double())):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("n_k", [1, 15, 16, 17, 40])
def test_cpu_training_attention_on_either_side_of_the_padded_softmax(n_k):
    """Rows of scores shorter than 16 are padded for the softmax and cut back; longer
    ones are not: the same values and gradients as float64 either way, and a query with
    no key to attend to still gets NaN."""
    q, k, v = (torch.randn(3, 2, n, 8, requires_grad=True) for n in (5, n_k, n_k))
    lengths = torch.tensor([n_k, max(1, n_k // 2), 1])
    mask = (torch.arange(n_k) < lengths[:, None])[:, None, None, :]
    ours = attention_for_cpu_training(q, k, v, mask, 0.0)
    expected = _attention_in_float64(q, k, v, mask)
    torch.testing.assert_close(ours.double(), expected, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), g),
                    torch.autograd.grad(expected, (q, k, v), g.double())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    no_key = torch.zeros(1, 1, 1, n_k, dtype=torch.bool)
    assert attention_for_cpu_training(q, k, v, no_key, 0.0).isnan().all()


def test_cpu_training_attention_under_bf16_autocast_is_close_to_float64():
    q, k, v = (torch.randn(3, 4, 9, 16, requires_grad=True) for _ in range(3))
    mask = padding_mask(torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 2 + [0] * 7]), 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = attention_for_cpu_training(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, 0.0)
    assert ours.dtype == torch.bfloat16
    expected = _attention_in_float64(q, k, v, mask)
    assert (ours.double() - expected).abs().max() < 0.05
    g = torch.randn_like(expected)
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), g.bfloat16()),
                    torch.autograd.grad(expected, (q, k, v), g)):
        assert (a - b).abs().max() < 0.05 * b.abs().max()


def test_cpu_training_attention_keeps_float64():
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = causal_mask(5)
    ours = attention_for_cpu_training(q, k, v, mask, 0.0)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, _attention_in_float64(q, k, v, mask), atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda *x: attention_for_cpu_training(*x, mask, 0.0), (q, k, v))


def test_cpu_training_attention_drops_weights_with_dropout():
    """Oracle: the written-out equation on the same dropout mask (the same seed)."""
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    torch.manual_seed(3)
    ours = attention_for_cpu_training(q, k, v, None, 0.5)
    torch.manual_seed(3)
    expected, _ = scaled_dot_product_attention(q, k, v, None, 0.5)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours, scaled_dot_product_attention(q, k, v)[0], atol=1e-3)


def test_dropout_on_a_cpu_is_dropout():
    """What Srivastava et al. define: each feature kept with probability 1 - p and scaled by
    1 / (1 - p), the gradient through the same mask; the identity in evaluation."""
    p = 0.3
    x = torch.rand(400, 500) + 1  # no zeros of its own
    x.requires_grad_()
    dropout = Dropout(p).train()
    out = dropout(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005  # 200,000 features: 5 standard deviations
    # four consecutive features share one 64-bit draw of the generator: any two of them are
    # dropped together as often as independent features are (p ** 2; 50,000 groups: 5 sd)
    groups = (~kept).flatten().view(-1, 4).float()
    for i, j in itertools.combinations(range(4), 2):
        assert abs((groups[:, i] * groups[:, j]).mean().item() - p**2) < 0.0065, (i, j)
    assert torch.allclose(out[kept], x[kept] / (1 - p))
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() / (1 - p))
    assert not torch.equal(dropout(x), out), "a new mask every call"
    assert torch.equal(dropout.eval()(x), x)
    low = x.detach().bfloat16()
    out = Dropout(p).train()(low)
    assert out.dtype == torch.bfloat16
    kept = out != 0  # the survivors scaled by 1 / (1 - p) rounded to bf16, as nn.Dropout's
    reference = torch.nn.functional.dropout(low, p)
    scale = {name: (y[y != 0].float() / low[y != 0].float()).mean().item()
             for name, y in (("ours", out), ("nn.Dropout", reference))}
    assert abs(scale["ours"] - scale["nn.Dropout"]) < 1e-4 * scale["nn.Dropout"], scale
    for extreme in (1e-6, 1 - 1e-6):  # p rounds to 0 or 1 in 16 bits: nn.Dropout's, finite
        assert torch.isfinite(Dropout(extreme).train()(x)).all()


def test_layer_norm_computes_in_fp32_under_autocast_and_returns_its_inputs_dtype():
    norm = LayerNorm(32)
    torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(norm.bias)
    x = torch.randn(4, 7, 32).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = norm(x)
    expected = torch.nn.functional.layer_norm(x.float(), (32,), norm.weight, norm.bias, 1e-5)
    assert y.dtype == torch.bfloat16 and torch.equal(y, expected.bfloat16())
    assert norm(x.float()).dtype == torch.float32


@pytest.mark.parametrize("rows, blocks", [(1, 1), (4, 1), (2, 2), (4, 3), (5, 2), (1000, 8)])
def test_output_loss_equals_cross_entropy_on_the_logits(rows, blocks):
    """Oracle: torch's F.cross_entropy with label_smoothing on the full logits."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (3, 5))
    target[0, 2:] = 0  # padding
    target[2, 4] = 0
    expected = torch.nn.functional.cross_entropy(
        (hidden @ weight.T).flatten(0, 1), target.flatten(), ignore_index=0, label_smoothing=0.2,
        reduction="sum")
    got = output_loss(hidden, weight, target, 0.2, rows=rows, blocks=blocks)
    assert torch.allclose(got.double(), expected, rtol=1e-6)
    scale = 0.37  # the backward pass scales the gradients kept by the forward pass
    want = torch.autograd.grad(expected * scale, (hidden, weight))
    have = torch.autograd.grad(got * scale, (hidden, weight))
    for a, b in zip(want, have):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)  # the logits in fp32, as ever
    assert not have[0][0, 2:].any(), "padding positions get no gradient"


def test_output_loss_is_exact_where_the_target_probability_underflows():
    """Rows so confident (margins of hundreds) that exp(log p_y) is 0 in fp32: the loss
    takes log-sum-exp from the largest logit, so it stays finite and exact. Oracle:
    cross_entropy in float64 on the logits."""
    torch.manual_seed(0)
    hidden = torch.randn(6, 4) * 60
    weight = torch.randn(9, 4)
    target = torch.randint(1, 9, (6,))
    logits = (hidden @ weight.T).double()
    assert (logits.log_softmax(-1).gather(1, target[:, None]) < -120).any()
    expected = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1, reduction="sum")
    got = output_loss(hidden[None], weight, target[None], 0.1, pad_id=0, rows=4)
    assert torch.isfinite(got) and abs(got.item() - expected.item()) <= 1e-5 * expected.item()


def test_output_loss_under_bf16_autocast_is_the_logits_path_in_bf16():
    torch.manual_seed(0)
    hidden = torch.randn(4, 6, 16, requires_grad=True)
    weight = torch.randn(40, 16, requires_grad=True)
    target = torch.randint(0, 40, (4, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.nn.functional.cross_entropy(
            torch.nn.functional.linear(hidden, weight).flatten(0, 1).float(), target.flatten(),
            ignore_index=0, label_smoothing=0.1, reduction="sum")
        got = output_loss(hidden, weight, target, 0.1, rows=7)
    assert got.dtype == torch.float32
    assert torch.allclose(got, expected, rtol=1e-3)
    want, have = (torch.autograd.grad(loss, (hidden, weight)) for loss in (expected, got))
    assert have[1].dtype == torch.float32  # the fp32 master weights get fp32 gradients
    for a, b in zip(want, have):
        assert torch.allclose(a, b, rtol=0.02, atol=0.02 * a.abs().max().item())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_lets_repeated_steps_reuse_freed_pages():
    """A block of 48 MB allocated, filled and freed again and again, as a training step does with
    its logits: glibc's default maps it afresh every time (12,288 pages of 4 KiB faulted in);
    after keep_freed_memory the heap settles and the repeats fault in (almost) nothing."""
    assert keep_freed_memory()

    def fill_and_free() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.ones(12 * 2**20)  # 48 MB of float32, freed at once
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults = [fill_and_free() for _ in range(20)]
    assert max(faults[-5:]) < 1000, faults



def test_reference_paths_switch_every_fast_path_off_and_back_on(monkeypatch):
    """Under reference_paths: PyTorch's attention kernel, nn.Dropout's mask, nn.LayerNorm's
    fp32; after the block, the fast paths again (also when the block raised)."""
    calls = []
    monkeypatch.setattr(attention_module, "attention_for_cpu_training",
                        lambda *args: calls.append(1) or attention_for_cpu_training(*args))
    layer, x = MultiHeadAttention(16, 2), torch.randn(2, 3, 16)
    with reference_paths():
        assert not FastPaths.enabled
        layer(x, x, x, is_causal=True)
        torch.manual_seed(3)
        ours = Dropout(0.5).train()(torch.ones(8, 8))
        x_norm = torch.randn(2, 4).bfloat16()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            normed, reference = LayerNorm(4)(x_norm), torch.nn.LayerNorm(4)(x_norm)
        assert normed.dtype == reference.dtype and torch.equal(normed, reference)
    torch.manual_seed(3)
    assert calls == [] and torch.equal(ours, torch.nn.Dropout(0.5).train()(torch.ones(8, 8)))
    layer(x, x, x, is_causal=True)
    assert calls == [1] and FastPaths.enabled
    with pytest.raises(RuntimeError), reference_paths():
        raise RuntimeError
    assert FastPaths.enabled


def test_a_model_trains_to_the_same_loss_by_either_path():
    """Oracle: the reference path. The same model and batch, with dropout off (the masks
    differ by design), give the same loss and gradients by the fast and reference paths."""
    config = TransformerConfig(40, 40, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    model = Transformer(config).train()
    src, tgt = torch.randint(4, 40, (3, 9)), torch.randint(4, 40, (3, 8))
    tgt[0, 5:] = PAD
    results = []
    for fast in (True, False):
        model.zero_grad()
        with contextlib.nullcontext() if fast else reference_paths():
            hidden = model(src, tgt[:, :-1], project=False)
            if fast:
                loss = output_loss(hidden, model.output.linear.weight, tgt[:, 1:], 0.1)
            else:
                logits = model.output(hidden)
                loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD,
                                       label_smoothing=0.1, reduction="sum")
            loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (fast_loss, fast_grads), (ref_loss, ref_grads) = results
    torch.testing.assert_close(fast_loss, ref_loss, atol=1e-4, rtol=1e-5)
    for a, b in zip(fast_grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
