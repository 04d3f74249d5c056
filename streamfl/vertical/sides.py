"""C-VFL's two sides: the parties' computation and the server's, each written once.

Source: Castiglia et al., *Compressed-VFL*, ICML 2022, Algorithm 1. A round is
cut where Algorithm 1 communicates:

* :meth:`PartySide.embed` — lines 5–7 for party m: h_m(θ_m; X_m^B) (B, P_m), compressed
  with the key (seed, m, r); returns the payload to send up;
* :meth:`ServerSide.relay` — line 9: from the M payloads received, the payload list each
  party m receives (the others' payloads, unchanged, then C_0(θ_0) with key (seed, 0, r));
* :meth:`PartySide.local_steps` and :meth:`ServerSide.local_steps` — lines 11–14, Q SGD steps
  on θ_m (own embedding fresh, the others' and θ_0 stale and decoded) and on θ_0.

Each side's lines 11–14 are a :class:`LocalObjective` (its parameters, η, and
its loss at iteration q), stepped by the one SGD loop :func:`local_sgd`.

The Kafka roles (``consumers/vertical_party.py``, ``consumers/vertical_server.py``)
run one side per process. :class:`~streamfl.vertical.cvfl.CVFL` composes M party
sides and the server side in one process, relaying the payloads through a
:class:`~streamfl.vertical.wire.Wire`. There it calls :meth:`PartySide.embed_all`
and :meth:`PartySide.objective_all`, the same arithmetic for several parties
at once (one encode of the M embeddings; one forward of the server
architecture on the M parties' views stacked along the batch axis), shares
one :class:`PayloadDecoder` (each payload decoded once), and steps the
parties' and the server's objectives in one :func:`local_sgd` (one backward
per iteration). :meth:`PartySide.embed` and :meth:`PartySide.local_steps` are
those calls for a group of one, so both modes run one implementation.

**Why composing changes no number.** Party m's view differs from the others'
only in its own slot, which holds its fresh embedding; θ_m reaches only its own
rows of the stack, and no party's loss reaches θ_0 (the parties use the
decoded copy C_0(θ_0)), nor the server's loss any θ_m (it uses the decoded
embeddings). So the gradient of the summed losses with respect to each block is
the gradient of that block's own loss (the backward of a mean is the same 1/B
whatever the reduction's rounding). Every compressor decodes a batch of
payloads to the arrays it decodes one at a time. ``tests/test_vertical_sides.py``
checks that a run through one-party sides equals :class:`~streamfl.vertical.cvfl.CVFL` exactly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ..compression import Compressor, NoCompression, dither_key
from ..compression.base import read_header


def cross_entropy(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample softmax cross-entropy (nats): outputs (N, K) logits, y (N,) class ids → (N,)."""
    return F.cross_entropy(outputs, y, reduction="none")


def learning_rate(lr: float | Callable[[int], float], r: int) -> float:
    """η^{t₀} of round r (Algorithm 1 line 13: fixed within a round): ``lr`` or ``lr(r)``.

    >>> learning_rate(0.1, 7), learning_rate(lambda r: 1 / (1 + r), 3)
    (0.1, 0.25)
    """
    return float(lr(r)) if callable(lr) else float(lr)


def check_settings(local_iterations, lr, server: nn.Module) -> None:
    """Refuse what no side can run: Q < 1, η ≤ 0, or a server model with buffers (only parameters are sent).

    Raises
    ------
    ValueError
        Naming the setting and the value.
    """
    if not isinstance(local_iterations, int) or isinstance(local_iterations, bool) or local_iterations < 1:
        raise ValueError(f"local_iterations (Q) must be an integer ≥ 1, got {local_iterations!r}")
    if not callable(lr) and not lr > 0:
        raise ValueError(f"lr (η) must be > 0, got {lr!r}")
    buffers = [name for name, _ in server.named_buffers()]
    if buffers:
        raise ValueError(f"the server model holds buffers ({', '.join(buffers)}); C-VFL sends only its "
                         f"parameters to the parties, so use a model without buffers (e.g. no BatchNorm)")


class PayloadDecoder:
    """Decodes the payloads of one compressor to tensors; within a round, each distinct (sender, payload) once.

    A payload decodes to the same array wherever it is decoded (same bytes,
    same dither key (seed, sender, r)), so sides composed in one process share
    one decoder and the M embeddings are decoded once per round, not once by
    each of their M receivers. Payloads of one shape are decoded in one
    vectorised pass (:meth:`~streamfl.compression.Compressor.decode_batch`).
    Memory: the decoded tensors of the current round only. The tensors are
    shared by their receivers, which read them and never write them.

    Parameters
    ----------
    compressor : Compressor
    seed : int
        The run seed of the dither keys.
    dtype : torch.dtype
        Of the tensors returned (the models' parameters' dtype).

    Examples
    --------
    >>> from streamfl.compression import UniformScalarQuantizer
    >>> c = UniformScalarQuantizer(bits=8)
    >>> p = c.encode(np.array([[0.5, -0.25]]), dither_key(3, 1, 0))
    >>> d = PayloadDecoder(c, seed=3, dtype=torch.float32)
    >>> a, b = d.decode(0, [(1, p), (1, p)])
    >>> a is b, a.shape, bool((a - torch.tensor([[0.5, -0.25]])).abs().max() < 1 / 127)
    (True, torch.Size([1, 2]), True)
    """

    def __init__(self, compressor: Compressor, seed: int, dtype: torch.dtype):
        self.compressor, self.seed, self.dtype = compressor, seed, dtype
        self._round: int | None = None
        self._memo: dict[tuple[int, bytes], torch.Tensor] = {}

    def key(self, sender: int, r: int):
        """The dither key of ``sender``'s payload in round r (None for an undithered compressor)."""
        return dither_key(self.seed, sender, r) if self.compressor.dithered else None

    def decode(self, r: int, items: Sequence[tuple[int, bytes]]) -> list[torch.Tensor]:
        """The tensors (the encoded shapes, ``dtype``) of ``items`` = (sender, payload) pairs of round r.

        Raises
        ------
        ValueError
            On a malformed payload or one of another compressor (see :meth:`Compressor.decode`).
        """
        if r != self._round:
            self._round, self._memo = r, {}
        by_shape: dict[tuple, list[tuple[int, bytes]]] = {}
        for item in dict.fromkeys(item for item in items if item not in self._memo):
            by_shape.setdefault(read_header(item[1])[2], []).append(item)
        for group in by_shape.values():
            decoded = self.compressor.decode_batch([p for _, p in group], [self.key(j, r) for j, _ in group])
            self._memo.update((item, torch.as_tensor(a, dtype=self.dtype)) for item, a in zip(group, decoded))
        return [self._memo[item] for item in items]


@dataclass
class LocalObjective:
    """One side's part of lines 11–14 in a round: the parameters it steps and the loss of iteration q.

    Attributes
    ----------
    params : list of Parameter
        The block(s) of Θ this side updates (θ_m of its parties, or θ_0).
    eta : float
        η^{t₀} of the round.
    loss : callable q -> scalar tensor
        The side's loss at local iteration q = 0..Q−1, computed from the current ``params``;
        its gradient with respect to ``params`` is the side's gradient (and zero for any other side's).
    """

    params: list
    eta: float
    loss: Callable[[int], torch.Tensor]


def local_sgd(objectives: Sequence[LocalObjective], local_iterations: int) -> None:
    """Lines 11–14: Q block-coordinate SGD steps, each side's parameters by the gradient of its own loss.

    The sides' losses are summed and differentiated in one backward pass per
    iteration: no side's loss reaches another side's parameters (each uses the
    others' stale, decoded values), so each block gets exactly the gradient
    of its own loss, as if the sides stepped in separate processes.
    """
    params = [p for o in objectives for p in o.params]
    for q in range(local_iterations):
        losses = [o.loss(q) for o in objectives]
        total = losses[0]
        for term in losses[1:]:
            total = total + term
        grads = iter(torch.autograd.grad(total, params, allow_unused=True))
        with torch.no_grad():
            for o in objectives:
                for p in o.params:
                    g = next(grads)
                    if g is not None:
                        p.sub_(o.eta * g)


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
        The server's architecture (its parameters are replaced by the decoded C_0(θ_0) each round); copied.
    local_iterations, lr, compressor, server_compressor, loss, seed
        As in :class:`~streamfl.vertical.cvfl.CVFL`.
    decoder : PayloadDecoder, optional
        Decodes the other parties' embeddings (default: a new one for ``compressor``);
        sides in one process may share one.

    Raises
    ------
    ValueError
        On m outside 1..M, Q < 1, η ≤ 0, or a server model with buffers.
    """

    def __init__(self, m: int, n_parties: int, party: nn.Module, server: nn.Module, *, local_iterations: int,
                 lr, compressor: Compressor | None = None, server_compressor: Compressor | None = None,
                 loss: Callable | None = None, seed: int = 0, decoder: PayloadDecoder | None = None):
        if not 1 <= m <= n_parties:
            raise ValueError(f"party id must be in 1..{n_parties}, got {m}")
        check_settings(local_iterations, lr, server)
        self.m, self.M = m, n_parties
        self.party = copy.deepcopy(party)
        self.server = copy.deepcopy(server)
        self.dtype = next(self.party.parameters()).dtype
        self.Q, self.lr, self.seed = local_iterations, lr, seed
        self.compressor = compressor if compressor is not None else NoCompression()
        self.server_compressor = server_compressor if server_compressor is not None else NoCompression()
        self.loss = loss if loss is not None else cross_entropy
        self.decoder = decoder if decoder is not None else PayloadDecoder(self.compressor, seed, self.dtype)
        self._names = [n for n, _ in self.server.named_parameters()]
        self._shapes = [p.shape for p in self.server.parameters()]
        self._x: torch.Tensor | None = None
        self._fresh: torch.Tensor | None = None

    def embed(self, r: int, X: np.ndarray) -> bytes:
        """Lines 5–7 of round r: C_m(h_m(θ_m; X)) for X (B, D_m); the fresh embedding is kept for iteration 0."""
        return PartySide.embed_all([self], r, [X])[0]

    def local_steps(self, r: int, payloads: Sequence[bytes], y: np.ndarray) -> None:
        """Lines 11–14 for party m: Q SGD steps on θ_m.

        ``payloads`` is what the server sent party m in round r: the other
        parties' payloads in party order (m's own left out), then C_0(θ_0).

        Raises
        ------
        ValueError
            On a wrong number of payloads, a local step before :meth:`embed`, or a payload that does not decode.
        """
        local_sgd([PartySide.objective_all([self], r, [payloads], y)], self.Q)

    @staticmethod
    def embed_all(sides: Sequence["PartySide"], r: int, xs: Sequence[np.ndarray]) -> list[bytes]:
        """:meth:`embed` for several parties of one run in one process: ``xs[i]`` (B, D_m) for ``sides[i]``.

        The embeddings of one shape, compressed by one compressor, are encoded in
        one vectorised pass, still one payload (and dither key) per party.
        """
        embeddings = []
        for s, X in zip(sides, xs, strict=True):
            s._x = torch.as_tensor(X, dtype=s.dtype)
            s._fresh = s.party(s._x)
            embeddings.append(s._fresh.detach().cpu().numpy())
        keys = [dither_key(s.seed, s.m, r) if s.compressor.dithered else None for s in sides]
        c = sides[0].compressor
        if all(s.compressor is c for s in sides) and len({e.shape for e in embeddings}) == 1:
            return c.encode_batch(np.stack(embeddings), keys)
        return [s.compressor.encode(e, k) for s, e, k in zip(sides, embeddings, keys)]

    @staticmethod
    def objective_all(sides: Sequence["PartySide"], r: int, received: Sequence[Sequence[bytes]],
                      y: np.ndarray) -> LocalObjective:
        """The local objective of several parties of one run in one process (``received[i]`` for ``sides[i]``).

        Its loss at iteration q is Σ_m (mean loss of party m's view), computed by
        one forward of the server architecture (with the decoded C_0(θ_0)) on the
        G parties' views stacked along the batch axis (G·B rows); each θ_m
        reaches only its own rows, so its gradient is that of its own mean loss.
        For one party this is :meth:`local_steps`' objective.

        Raises
        ------
        ValueError
            If the parties are not of one run (M, Q, seed, the server model received), repeat a party,
            did not embed this round, or got a wrong number of payloads.
        """
        first = sides[0]
        if len({(s.M, s.Q, s.seed) for s in sides}) != 1 or len({s.m for s in sides}) != len(sides):
            raise ValueError("parties stepped together must be distinct parties of one run (same M, Q and seed)")
        for s, payloads in zip(sides, received, strict=True):
            if len(payloads) != s.M:
                raise ValueError(f"party {s.m} expects {s.M - 1} embeddings and the server model, got "
                                 f"{len(payloads)} payloads")
            if s._fresh is None:
                raise ValueError(f"party {s.m} has not sent its embedding of round {r} (call embed first)")
        if len({payloads[-1] for payloads in received}) != 1:
            raise ValueError("parties stepped together must have received the same server model C_0(θ_0)")
        M, G = first.M, len(sides)
        # what each party received, by sender: the others' embeddings, decoded once per distinct payload
        items = [list(zip((j for j in range(1, M + 1) if j != s.m), payloads[:-1]))
                 for s, payloads in zip(sides, received)]
        stale: list[dict[int, torch.Tensor]] = [{} for _ in sides]
        for decoder in {id(s.decoder): s.decoder for s in sides}.values():     # one vectorised decode per decoder
            group = [g for g, s in enumerate(sides) if s.decoder is decoder]
            tensors = iter(decoder.decode(r, [it for g in group for it in items[g]]))
            for g in group:
                stale[g] = {j: next(tensors) for j, _ in items[g]}
        key0 = dither_key(first.seed, 0, r) if first.server_compressor.dithered else None
        flat = torch.as_tensor(first.server_compressor.decode(received[0][-1], key0), dtype=first.dtype)
        theta0 = {n: t.view(shape) for n, t, shape in
                  zip(first._names, torch.split(flat, [int(np.prod(sh)) for sh in first._shapes]), first._shapes)}
        y = torch.as_tensor(y)
        y_all = y.repeat((G,) + (1,) * (y.dim() - 1))          # the labels of the G stacked views
        fresh = [s._fresh for s in sides]
        for s in sides:
            s._fresh = None

        def loss(q: int) -> torch.Tensor:
            # lines 12-13 for party m: Φ̂_m^t = {Φ̂_{-m}^{t0}; h_m(θ_m^t)} with the stale C_0(θ_0^{t0})
            own = fresh if q == 0 else [s.party(s._x) for s in sides]
            views = [torch.cat([own[g] if s.m == j else stale[g][j] for g, s in enumerate(sides)])
                     for j in range(1, M + 1)]
            losses = first.loss(functional_call(first.server, theta0, (views,)), y_all).view(G, -1)
            return losses.mean(dim=1).sum()

        return LocalObjective([p for s in sides for p in s.party.parameters()], learning_rate(first.lr, r), loss)


class ServerSide:
    """The server's side of C-VFL: the fusion model θ_0, the relay of payloads, and its Q local steps.

    Parameters are those of :class:`~streamfl.vertical.cvfl.CVFL` without the parties
    (``n_parties`` = M), and ``decoder`` as in :class:`PartySide`.

    Raises
    ------
    ValueError
        On Q < 1, η ≤ 0, or a server model with buffers.
    """

    def __init__(self, n_parties: int, server: nn.Module, *, local_iterations: int, lr,
                 compressor: Compressor | None = None, server_compressor: Compressor | None = None,
                 loss: Callable | None = None, seed: int = 0, decoder: PayloadDecoder | None = None):
        check_settings(local_iterations, lr, server)
        self.M = n_parties
        self.server = copy.deepcopy(server)
        self.dtype = next(self.server.parameters()).dtype
        self.Q, self.lr, self.seed = local_iterations, lr, seed
        self.compressor = compressor if compressor is not None else NoCompression()
        self.server_compressor = server_compressor if server_compressor is not None else NoCompression()
        self.loss = loss if loss is not None else cross_entropy
        self.decoder = decoder if decoder is not None else PayloadDecoder(self.compressor, seed, self.dtype)
        self._payloads: list[bytes] | None = None
        self.prequential: tuple[np.ndarray, np.ndarray] | None = None

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

        Raises
        ------
        ValueError
            Before :meth:`relay` of this round.
        """
        local_sgd([self.objective(r, y)], self.Q)
        return self.prequential

    def objective(self, r: int, y: np.ndarray) -> LocalObjective:
        """The server's local objective in round r: mean loss of θ_0^t on the decoded embeddings Φ̂_{−0}.

        Its iteration 0 sets ``prequential``: the sample losses (B,) and outputs (B, …)
        before any update of the round.

        Raises
        ------
        ValueError
            Before :meth:`relay` of this round.
        """
        if self._payloads is None:
            raise ValueError(f"the server has not relayed round {r} (call relay first)")
        stale = self.decoder.decode(r, list(enumerate(self._payloads, start=1)))
        self._payloads = self.prequential = None
        y = torch.as_tensor(y)

        def loss(q: int) -> torch.Tensor:
            # lines 12-13 for the server m = 0: Φ̂_0^t = {Φ̂_{-0}^{t0}; θ_0^t}
            outputs = self.server(stale)
            losses = self.loss(outputs, y)
            if q == 0:
                self.prequential = losses.detach().cpu().numpy(), outputs.detach().cpu().numpy()
            return losses.mean()

        return LocalObjective(list(self.server.parameters()), learning_rate(self.lr, r), loss)
