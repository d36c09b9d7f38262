"""Tests of transformer/embeddings.py (book/embeddings.md)."""

import math

import pytest
import torch

from transformer.embeddings import Embeddings, OutputProjection


def test_embeddings_are_the_table_times_sqrt_d_model():
    embed = Embeddings(50, 64)
    ids = torch.tensor([[3, 7, 49]])
    torch.testing.assert_close(embed(ids), embed.embedding.weight[ids] * math.sqrt(64))


def test_shared_output_projection_uses_the_same_tensor_and_accumulates_gradients():
    embed = Embeddings(50, 64)
    project = OutputProjection(64, 50, shared=embed)
    assert project.linear.weight is embed.embedding.weight
    logits = project(embed(torch.tensor([[1, 2]])))
    assert logits.shape == (1, 2, 50)
    logits.sum().backward()
    # rows 1 and 2 get gradient from the lookup and the projection; every row from the projection
    assert embed.embedding.weight.grad.abs().sum(1).gt(0).all()
    assert len(list(torch.nn.ModuleList([embed, project]).parameters())) == 1


def test_sharing_requires_matching_shapes():
    with pytest.raises(ValueError, match=r"shared embedding must be \(vocab_size, d_model\) = \(40, 64\); got \(50, 64\)"):
        OutputProjection(64, 40, shared=Embeddings(50, 64))


@pytest.mark.parametrize("bad", [[[0, 50]], [[-1, 3]]])
def test_out_of_range_ids_raise(bad):
    with pytest.raises(ValueError, match=r"token ids in \[0, 50\)"):
        Embeddings(50, 8)(torch.tensor(bad))


def test_float_ids_raise():
    with pytest.raises(TypeError, match="integer token ids"):
        Embeddings(50, 8)(torch.tensor([[1.0, 2.0]]))
