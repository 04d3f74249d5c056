"""Small building blocks for C-VFL models: a concatenating fusion head and a bounded party embedding."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class ConcatFusion(nn.Module):
    """Server model θ_0 that concatenates the M embeddings and applies ``head``: [E_1, …, E_M] → head([E_1 … E_M]).

    Parameters
    ----------
    head : nn.Module
        Maps (B, Σ_m P_m) to the outputs (e.g. logits (B, K)).

    >>> f = ConcatFusion(nn.Identity())
    >>> f([torch.zeros(2, 1), torch.ones(2, 2)]).tolist()
    [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
    """

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.head(torch.cat(list(embeddings), dim=-1))


def tanh_embedding(d_in: int, d_out: int, hidden: int | None = None) -> nn.Sequential:
    """Party embedding h_m: Linear(d_in → hidden) + ReLU (if ``hidden``) then Linear(→ d_out) + Tanh.

    The Tanh keeps every embedding component in (−1, 1), the fixed range of
    the quantizers, so no embedding is clipped.
    """
    layers: list[nn.Module] = []
    if hidden:
        layers += [nn.Linear(d_in, hidden), nn.ReLU()]
        d_in = hidden
    return nn.Sequential(*layers, nn.Linear(d_in, d_out), nn.Tanh())
