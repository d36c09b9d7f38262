# Generated from book/fast.md by tools/export.py: edit the chapter.
"""The fast paths of a training step, each beside the reference it replaces, and the
switch that turns them off (reference_paths)."""

from __future__ import annotations

import contextlib
import ctypes
import math
import platform
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FastPaths:
    """Whether the package takes its fast paths (True unless reference_paths() is
    on)."""

    enabled = True


@contextlib.contextmanager
def reference_paths() -> Iterator[None]:
    """Within the block, every idea runs by its reference path: PyTorch's attention
    kernels, nn.Dropout, nn.LayerNorm, the loss on the logits, glibc's allocator."""
    before, FastPaths.enabled = FastPaths.enabled, False
    try:
        yield
    finally:
        FastPaths.enabled = before


def attention_for_cpu_training(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, dropout_p: float
) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + B) V, B = 0 where `mask` allows, -inf elsewhere: the
    matrix products in the inputs' dtype, the softmax in fp32 (or float64). A query with
    no key to attend to gets NaN."""
    scores = query @ key.transpose(-2, -1)
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    scores = scores / math.sqrt(query.size(-1))
    if mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
        scores = scores + bias.masked_fill_(~mask, float("-inf"))
    n_k = scores.size(-1)
    if n_k < 16:  # PyTorch's CPU softmax is far slower over rows shorter than 16
        scores = F.pad(scores, (0, 16 - n_k), value=float("-inf"))
    weights = scores.softmax(dim=-1)[..., :n_k]  # the padding's weights are 0
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights.to(value.dtype) @ value


class Dropout(nn.Dropout):
    """nn.Dropout; on a CPU its mask compares 16 random bits a feature, four features
    a 64-bit draw of the generator, with p rounded to 1/65536."""

    def forward(self, x: Tensor) -> Tensor:
        n, dropped = x.numel(), round(self.p * 2**16)  # of 2**16 equally likely values
        usual = not self.training or x.device.type != "cpu" or not 0 < dropped < 2**16
        if usual or not FastPaths.enabled:
            return super().forward(x)
        draws = torch.empty(-(-n // 4), dtype=torch.int64, device=x.device)
        draws.random_(-(2**63), 2**63 - 1)
        bits = draws.view(torch.int16)[:n].view(x.shape)  # uniform on [-2**15, 2**15)
        # 1 where kept, 0 where dropped: written in x's dtype at once (converting a
        # boolean mask afterwards costs more than the comparison); the scale in x's
        # dtype too, as nn.Dropout's mask on a CPU (bf16 rounds 1 / 0.7 to 1.4297)
        keep = torch.ge(bits, dropped - 2**15, out=torch.empty_like(x))
        return x * keep.mul_(2**16 / (2**16 - dropped))


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm that returns its input's dtype (under autocast nn.LayerNorm
    computes in fp32 and returns fp32)."""

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)
        return y.to(x.dtype) if FastPaths.enabled else y


class _OutputLoss(torch.autograd.Function):
    """Summed label-smoothed loss of hidden @ weight.T, its gradients computed in the
    forward pass, `rows` rows of logits at a time; the weight's gradient from `blocks`
    such blocks at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, target, epsilon, rows, blocks, dtype):
        k, n, span = weight.size(0), hidden.size(0), rows * blocks
        w, h_all = weight.to(dtype), hidden.to(dtype)
        grad_hidden = torch.empty(hidden.shape, dtype=dtype, device=hidden.device)
        grad_weight = torch.zeros_like(weight, dtype=torch.float32)
        grads = torch.empty(min(n, span), k, dtype=dtype, device=hidden.device)
        # a row's loss: lse - (1 - eps) z_y - eps / k sum_j z_j, as log p_j = z_j - lse;
        # sum_j z_j = h . sum_j w_j, one product for all rows
        loss = -epsilon / k * (hidden.float() @ weight.float().sum(0)).sum()
        for first in range(0, n, span):
            last = min(n, first + span)
            for start in range(first, last, rows):
                stop = start + rows
                h, y = h_all[start:stop], target[start:stop, None]
                z = (h @ w.T).float()
                p = z.softmax(-1)
                # lse from the largest logit, whose p (>= 1 / k) cannot underflow
                lse = z.amax(-1) - p.amax(-1).log()
                loss += lse.sum() - (1 - epsilon) * z.gather(1, y).sum()
                # p - q: q's smoothed mass eps / k everywhere, its one-hot part at y
                p.scatter_add_(1, y, torch.full_like(y, epsilon - 1, dtype=p.dtype))
                grad = grads[start - first : start - first + len(y)]
                grad.copy_(p.sub_(epsilon / k))
                torch.mm(grad, w, out=grad_hidden[start:stop])
            grad_weight += grads[: last - first].T @ h_all[first:last]
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = hidden.dtype, weight.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return (
            (grad_hidden * grad_loss).to(hidden_dtype),
            (grad_weight * grad_loss).to(weight_dtype),
            None, None, None, None, None,
        )


def output_loss(
    hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float, pad_id: int = 0,
    rows: int = 128, blocks: int = 16,
) -> Tensor:
    """label_smoothed_loss(hidden @ weight.T, target, epsilon) without the logits:
    hidden (batch, m, d_model) from Transformer(..., project=False), weight (K,
    d_model) the output projection's, target (batch, m); logits `rows` rows at a time,
    the weight's gradient from `blocks` blocks of their gradients at a time. Under
    autocast the products run in its dtype, as nn.Linear's would. pad_id: the data
    chapter's <pad>, 0."""
    device = hidden.device.type
    dtype = (
        torch.get_autocast_dtype(device)
        if torch.is_autocast_enabled(device) else hidden.dtype
    )
    # the rows of real tokens, by index: index_select's backward copies their gradients
    # back in parallel, where a boolean index's adds them one number at a time
    keep = (target.flatten() != pad_id).nonzero().squeeze(1)
    with torch.autocast(device, enabled=False):
        return _OutputLoss.apply(
            hidden.flatten(0, 1).index_select(0, keep), weight, target.flatten()[keep],
            epsilon, rows, blocks, dtype,
        )


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the large blocks a training step frees, for the next
    step. Returns False, changing nothing, where the C library is not glibc (macOS,
    musl)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
    return bool(libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**30))


__all__ = [
    'FastPaths',
    'reference_paths',
    'attention_for_cpu_training',
    'Dropout',
    'LayerNorm',
    'output_loss',
    'keep_freed_memory',
]
