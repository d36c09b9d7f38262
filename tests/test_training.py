"""Tests of transformer/training.py (book/training.md): the schedule and label smoothing."""

import math

import pytest
import torch

from transformer import label_smoothed_loss, learning_rate, make_optimizer


def test_schedule_follows_the_formula_through_the_optimizer():
    for step in (1, 100, 4000, 4001, 50_000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert math.isclose(learning_rate(step, 512), expected)
    optimizer, schedule = make_optimizer(torch.nn.Linear(2, 2), d_model=64, warmup_steps=5, scale=2.0)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for step in range(1, 12):
        assert math.isclose(optimizer.param_groups[0]["lr"], learning_rate(step, 64, 5, 2.0))
        optimizer.step()
        schedule.step()
    with pytest.raises(ValueError, match="steps are counted from 1"):
        learning_rate(0, 512)


def test_label_smoothed_loss_equals_the_definition_and_ignores_padding():
    torch.manual_seed(0)
    logits, target, epsilon = torch.randn(2, 3, 7), torch.tensor([[4, 2, 0], [1, 6, 5]]), 0.1
    log_p = logits.log_softmax(-1)
    expected = 0.0
    for b in range(2):
        for t in range(3):
            if target[b, t] == 0:  # padding
                continue
            q = torch.full((7,), epsilon / 7)
            q[target[b, t]] += 1 - epsilon
            expected += -(q * log_p[b, t]).sum()
    assert torch.allclose(label_smoothed_loss(logits, target, epsilon), expected)
    assert torch.allclose(label_smoothed_loss(logits, target, 0.0), torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), target.flatten(), ignore_index=0, reduction="sum"))
