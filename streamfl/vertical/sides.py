"""C-VFL split into its two sides: one party's computation and the server's, for separate processes.

Source: Castiglia et al., *Compressed-VFL*, ICML 2022, Algorithm 1. :class:`~streamfl.vertical.cvfl.CVFL`
runs all M parties and the server in one process; here the same round is cut
where Algorithm 1 communicates, so that each side can run in its own process
(the Kafka roles ``consumers/vertical_party.py`` and ``consumers/vertical_server.py``):

* :meth:`PartySide.embed` — lines 5–7 for party m: h_m(θ_m; X_m^B) (B, P_m), compressed
  with the key (seed, m, r); returns the payload to send up;
* :meth:`ServerSide.relay` — line 9: from the M payloads received, the payload list each
  party m receives (the others' payloads, unchanged, then C_0(θ_0) with key (seed, 0, r));
* :meth:`PartySide.local_steps` and :meth:`ServerSide.local_steps` — lines 11–14, Q SGD steps
  on θ_m (own embedding fresh, the others' and θ_0 stale and decoded) and on θ_0.

Given the same initial models, seed, batches and compressors, the two sides
compute what :meth:`CVFL.step` computes, number for number: each party's
gradient is that of its own loss term, and the server's gradient that of its
term (``tests/test_vertical_sides.py`` checks exact equality).
"""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from ..compression import Compressor, NoCompression, dither_key
from .cvfl import cross_entropy


def _eta(lr, r: int) -> float:
    return float(lr(r)) if callable(lr) else float(lr)


class PartySide:
    """Party m's side of C-VFL: its embedding model θ_m and its Q local steps.

    Parameters
    ----------
    m : int
        Party id, 1..M (the dither key's sender id).
    n_parties : int
        M.
    party : nn.Module
        h_m: (B, D_m) → (B, P_m); copied.
    server : nn.Module
        The server's architecture (its parameters are replaced by the decoded C_0(θ_0) each round).
    local_iterations, lr, compressor, server_compressor, loss, seed
        As in :class:`~streamfl.vertical.cvfl.CVFL`.
    """

    def __init__(self, m: int, n_parties: int, party: nn.Module, server: nn.Module, *, local_iterations: int,
                 lr, compressor: Compressor | None = None, server_compressor: Compressor | None = None,
                 loss: Callable | None = None, seed: int = 0):
        if not 1 <= m <= n_parties:
            raise ValueError(f"party id must be in 1..{n_parties}, got {m}")
        self.m, self.M = m, n_parties
        self.party = copy.deepcopy(party)
        self.server = copy.deepcopy(server)
        self.dtype = next(self.party.parameters()).dtype
        self.Q, self.lr, self.seed = local_iterations, lr, seed
        self.compressor = compressor if compressor is not None else NoCompression()
        self.server_compressor = server_compressor if server_compressor is not None else NoCompression()
        self.loss = loss if loss is not None else cross_entropy
        self._names = [n for n, _ in self.server.named_parameters()]
        self._shapes = [p.shape for p in self.server.parameters()]
        self._fresh: torch.Tensor | None = None

    def embed(self, r: int, X: np.ndarray) -> bytes:
        """Lines 5–7 of round r: C_m(h_m(θ_m; X)) for X (B, D_m); the fresh embedding is kept for iteration 0."""
        self._x = torch.as_tensor(X, dtype=self.dtype)
        self._fresh = self.party(self._x)
        key = dither_key(self.seed, self.m, r) if self.compressor.dithered else None
        return self.compressor.encode(self._fresh.detach().cpu().numpy(), key)

    def local_steps(self, r: int, payloads: Sequence[bytes], y: np.ndarray) -> None:
        """Lines 11–14 for party m: Q SGD steps on θ_m.

        ``payloads`` is what the server sent party m in round r: the other
        parties' payloads in party order (m's own left out), then C_0(θ_0).
        """
        if len(payloads) != self.M:
            raise ValueError(f"party {self.m} expects {self.M - 1} embeddings and the server model, got "
                             f"{len(payloads)} payloads")
        others = [j for j in range(1, self.M + 1) if j != self.m]
        stale = {}
        for j, p in zip(others, payloads[:-1]):
            key = dither_key(self.seed, j, r) if self.compressor.dithered else None
            stale[j] = torch.as_tensor(self.compressor.decode(p, key), dtype=self.dtype)
        key0 = dither_key(self.seed, 0, r) if self.server_compressor.dithered else None
        flat = torch.as_tensor(self.server_compressor.decode(payloads[-1], key0), dtype=self.dtype)
        parts = torch.split(flat, [int(np.prod(s)) for s in self._shapes])
        theta0 = {n: t.view(s) for n, t, s in zip(self._names, parts, self._shapes)}
        y = torch.as_tensor(y)
        eta = _eta(self.lr, r)
        params = list(self.party.parameters())
        fresh = self._fresh
        for q in range(self.Q):
            if q:
                fresh = self.party(self._x)
            view = [fresh if j == self.m else stale[j] for j in range(1, self.M + 1)]
            loss = self.loss(functional_call(self.server, theta0, (view,)), y).mean()
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    if g is not None:
                        p.sub_(eta * g)
        self._fresh = None


class ServerSide:
    """The server's side of C-VFL: the fusion model θ_0, the relay of payloads, and its Q local steps.

    Parameters are those of :class:`~streamfl.vertical.cvfl.CVFL` without the parties
    (``n_parties`` = M).
    """

    def __init__(self, n_parties: int, server: nn.Module, *, local_iterations: int, lr,
                 compressor: Compressor | None = None, server_compressor: Compressor | None = None,
                 loss: Callable | None = None, seed: int = 0):
        self.M = n_parties
        self.server = copy.deepcopy(server)
        self.dtype = next(self.server.parameters()).dtype
        self.Q, self.lr, self.seed = local_iterations, lr, seed
        self.compressor = compressor if compressor is not None else NoCompression()
        self.server_compressor = server_compressor if server_compressor is not None else NoCompression()
        self.loss = loss if loss is not None else cross_entropy

    def relay(self, r: int, payloads: Sequence[bytes]) -> list[list[bytes]]:
        """Line 9 of round r: for each party m = 1..M, the payloads it receives (others' then C_0(θ_0))."""
        if len(payloads) != self.M:
            raise ValueError(f"the server expects {self.M} party payloads, got {len(payloads)}")
        key0 = dither_key(self.seed, 0, r) if self.server_compressor.dithered else None
        vector = torch.nn.utils.parameters_to_vector(self.server.parameters()).detach().cpu().numpy()
        p0 = self.server_compressor.encode(vector, key0)
        self._payloads = list(payloads)
        return [[payloads[j - 1] for j in range(1, self.M + 1) if j != m] + [p0] for m in range(1, self.M + 1)]

    def local_steps(self, r: int, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lines 11–14 for the server: Q SGD steps on θ_0 with the decoded embeddings of round r.

        Returns the prequential sample losses (B,) and outputs (B, …) before the first step.
        """
        stale = [torch.as_tensor(self.compressor.decode(p, dither_key(self.seed, j, r) if self.compressor.dithered
                                                        else None), dtype=self.dtype)
                 for j, p in enumerate(self._payloads, start=1)]
        y = torch.as_tensor(y)
        eta = _eta(self.lr, r)
        params = list(self.server.parameters())
        for q in range(self.Q):
            outputs = self.server(stale)
            losses = self.loss(outputs, y)
            if q == 0:
                first = losses.detach().cpu().numpy(), outputs.detach().cpu().numpy()
            grads = torch.autograd.grad(losses.mean(), params, allow_unused=True)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    if g is not None:
                        p.sub_(eta * g)
        return first
