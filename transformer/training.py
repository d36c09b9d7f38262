# Generated from book/training.md by tools/export.py: edit the chapter.
"""Adam with the warm-up schedule and label smoothing (§5.3-5.4 of the paper)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.devices import default_fused_adam
from transformer.presets import PAPER
from transformer.tokenizer import PAD


def learning_rate(step: int, d_model: int, warmup_steps: int = PAPER.warmup_steps,
                  scale: float = 1.0) -> float:
    """The rate of training step `step` >= 1:
    scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    if step < 1:
        raise ValueError(f"steps are counted from 1; got step={step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def adam(model: nn.Module) -> torch.optim.Adam:
    """Adam(0.9, 0.98, 1e-9) over the model's parameters, at rate 1 until one is set."""
    return torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
        fused=default_fused_adam(next(model.parameters()).device),
    )


def make_optimizer(
    model: nn.Module, d_model: int, warmup_steps: int = PAPER.warmup_steps,
    scale: float = 1.0,
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam and the schedule above; call schedule.step() after each update."""
    optimizer = adam(model)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: learning_rate(done + 1, d_model, warmup_steps, scale)
    )
    return optimizer, schedule


def label_smoothed_loss(
    logits: Tensor, target: Tensor, epsilon: float, pad_id: int = PAD
) -> Tensor:
    """Summed cross-entropy against (1 - eps) one-hot + eps / K; logits (batch, m, K),
    target (batch, m)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ignore_index=pad_id,
        label_smoothing=epsilon,
        reduction="sum",
    )


__all__ = [
    'learning_rate',
    'adam',
    'make_optimizer',
    'label_smoothed_loss',
]
