"""C-VFL: parties exchange compressed embeddings once every Q local iterations (Algorithm 1).

Source: Castiglia, Das, Wang, Patterson, *Compressed-VFL: Communication-
Efficient Learning with Vertically Partitioned Data*, ICML 2022, Algorithm 1
(lines cited below) and §3.

Round r (t₀ = rQ) of :meth:`CVFL.step` on a mini-batch B:

* lines 3–7: each party m = 1..M computes h_m(θ_m; X_m^B) (B, P_m) and sends
  C_m(h_m) to the server;
* line 9: the server sends every party m the other parties' compressed
  embeddings Φ̂_{−m} and its compressed model C_0(θ_0) (the payloads it
  received are relayed unchanged: no re-encoding, the same bytes);
* lines 11–14: for Q local iterations every party m takes a block-coordinate
  SGD step on θ_m with ∇_m F_B(Φ̂_{−m}, h_m(θ_m^t; X_m^B); y^B) — its own
  embedding fresh, the others' and θ_0 stale and compressed — and the server
  takes one on θ_0 with ∇_0 F_B(θ_0^t, Φ̂_{−0}; y^B).

**Bytes.** Every payload goes through a :class:`~streamfl.vertical.wire.Wire`
and is counted by its length: per round, up Σ_m |C_m| and down
Σ_m (Σ_{j≠m} |C_j| + |C_0|) = (M−1)·up + M·|C_0|.

**One implementation.** :class:`CVFL` is M :class:`~streamfl.vertical.sides.PartySide`
and one :class:`~streamfl.vertical.sides.ServerSide` composed in one process:
:meth:`CVFL.step` calls their methods in Algorithm 1's order and passes every
payload through the wire. The Kafka roles run the same sides one per process,
so the two modes share every line of the sides' arithmetic.

**Cost.** Per round: M party forwards, M + 1 encodes and M + 1 decodes (the
parties' embeddings in one vectorised pass each way, each payload decoded once
for all its receivers: O(M·B·P + |θ_0|) numpy work). Per local iteration: M
party forward/backward passes on B rows (a loop over the M ≤ ~8 parties, each
one batched torch call: parties may have different input widths and
architectures), one forward/backward of the server architecture on the M
parties' views stacked along the batch axis (M·B rows;
:meth:`~streamfl.vertical.sides.PartySide.objective_all`), and one of the
server model on its B rows. Time grows linearly in the rounds R, in Q, and in
M·B; bytes grow in R, M²·B·P and M·|θ_0|, and not in Q. Models this small run
fastest with ``torch.set_num_threads(1)`` (intra-op threads only add overhead).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..compression import Compressor, NoCompression
from .data import VerticalBatch
from .sides import PartySide, PayloadDecoder, ServerSide, check_settings, cross_entropy, local_sgd
from .wire import Wire

__all__ = ["CVFL", "RoundReport", "cross_entropy"]


@dataclass(frozen=True)
class RoundReport:
    """What one C-VFL round (one streaming step) did.

    Attributes
    ----------
    round : int
        r = 0, 1, …; the round covers local iterations t = rQ … rQ + Q − 1.
    sample_losses : ndarray (B,)
        Prequential loss of each sample of the round: the server's loss
        l(θ_0^{t₀}, Φ̂^{t₀}; y) *before* any update of the round, from the
        compressed embeddings it received (what the deployed model predicts with).
    outputs : ndarray (B, …)
        The server's outputs behind those losses (logits for classification).
    bytes_up, bytes_down : int
        Bytes sent to / by the server in this round (payload lengths).
    bytes_up_total, bytes_down_total : int
        Cumulative over the run.
    compute_seconds : float
        Wall time of the round (embedding, compression, Q local iterations), measured.
    cpu_seconds : float
        CPU time of this process in the round (less disturbed than wall time by other
        load on the machine; equal to it when torch runs single-threaded on an idle core).
    """

    round: int
    sample_losses: np.ndarray
    outputs: np.ndarray
    bytes_up: int
    bytes_down: int
    bytes_up_total: int
    bytes_down_total: int
    compute_seconds: float
    cpu_seconds: float

    @property
    def loss(self) -> float:
        """Mean prequential loss of the round's samples."""
        return float(self.sample_losses.mean())


class CVFL:
    """M parties with local embedding models h_m(θ_m; ·) and a server fusion model θ_0, trained by C-VFL.

    Parameters
    ----------
    parties : sequence of M torch modules
        Party m's embedding model: (B, D_m) → (B, P_m). Copied: the trained
        models are ``self.parties`` (the caller's modules are not changed).
        With a quantizer of fixed range, end the model in a bounded activation
        (e.g. ``nn.Tanh()`` for the range (−1, 1)).
    server : torch module
        The fusion model θ_0, any architecture: called as ``server([E_1, …, E_M])``
        with E_m of shape (B, P_m); see :class:`~streamfl.vertical.models.ConcatFusion`.
        It must treat samples independently (no batch statistics) and hold no
        buffers: only its parameters are sent to the parties. Copied like ``parties``.
    local_iterations : int
        Q ≥ 1, local iterations per round.
    lr : float or callable
        η, or η(r) for round r (η^{t₀} in line 13 is fixed within a round).
    compressor : Compressor, default NoCompression (float32, b = 32)
        C_m for the party embeddings (each (B, P_m) payload).
    server_compressor : Compressor, default NoCompression (float32)
        C_0 for the server model (the flat vector of its parameters).
    loss : callable, default :func:`cross_entropy`
        ``loss(outputs, y) -> (N,)`` per-sample loss l.
    seed : int
        Run seed; the dither of sender s in round r uses the key (seed, s, r)
        (:func:`~streamfl.compression.dither_key`), which encoder and decoder both know.
    wire : Wire, optional
        Where payloads go and are counted (default: a new in-process :class:`Wire`).

    Raises
    ------
    ValueError
        On no parties, Q < 1, η ≤ 0, a server model with buffers, or parameters of mixed dtypes.

    Examples
    --------
    >>> from streamfl.vertical import ConcatFusion, split_columns
    >>> from streamfl.compression import UniformScalarQuantizer
    >>> _ = torch.manual_seed(0)
    >>> data = split_columns(np.random.default_rng(0).normal(size=(64, 4)), np.arange(64) % 2, [[0, 1], [2, 3]])
    >>> model = CVFL([nn.Sequential(nn.Linear(2, 3), nn.Tanh()) for _ in range(2)],
    ...              ConcatFusion(nn.Linear(6, 2)), local_iterations=5, lr=0.1,
    ...              compressor=UniformScalarQuantizer(bits=2))
    >>> report = model.step(data)
    >>> report.bytes_up, report.bytes_down        # up 2 × (6 + 64·3·2/8); down 2 × (54 + 5 + 4·14)
    (108, 230)
    """

    def __init__(self, parties: Sequence[nn.Module], server: nn.Module, *, local_iterations: int = 1,
                 lr: float | Callable[[int], float] = 0.01, compressor: Compressor | None = None,
                 server_compressor: Compressor | None = None,
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 seed: int = 0, wire: Wire | None = None):
        if len(parties) < 1:
            raise ValueError("C-VFL needs at least one party")
        check_settings(local_iterations, lr, server)
        dtypes = {p.dtype for h in [*parties, server] for p in h.parameters()}
        if len(dtypes) != 1:
            raise ValueError(f"all party and server parameters must share one float dtype, got {sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop()
        self.Q = local_iterations
        self.lr = lr
        self.compressor = compressor if compressor is not None else NoCompression()
        self.server_compressor = server_compressor if server_compressor is not None else NoCompression()
        self.loss = loss if loss is not None else cross_entropy
        self.seed = seed
        self.wire = wire if wire is not None else Wire()
        self.round = 0
        M = len(parties)
        common = dict(local_iterations=local_iterations, lr=lr, compressor=self.compressor,
                      server_compressor=self.server_compressor, loss=self.loss, seed=seed,
                      decoder=PayloadDecoder(self.compressor, seed, self.dtype))     # each embedding decoded once per round
        self.party_sides = [PartySide(m, M, h, server, **common) for m, h in enumerate(parties, start=1)]
        self.server_side = ServerSide(M, server, **common)
        # the sides' own modules (copies of the caller's): training them trains these
        self.parties = nn.ModuleList([s.party for s in self.party_sides])
        self.server = self.server_side.server

    @property
    def n_parties(self) -> int:
        """M."""
        return len(self.parties)

    def parameters(self) -> list[torch.nn.Parameter]:
        """θ_1, …, θ_M then θ_0 (the global model Θ's blocks)."""
        return [p for h in self.parties for p in h.parameters()] + list(self.server.parameters())

    def step(self, batch: VerticalBatch) -> RoundReport:
        """One round of Algorithm 1 on ``batch`` (the round's mini-batch B^{t₀}): communicate, then Q local iterations.

        Round-based training passes a sampled mini-batch (line 4); the
        streaming variant passes the samples that just arrived, so
        ``sample_losses`` is their prequential (test-then-train) loss.

        Parameters
        ----------
        batch : VerticalBatch
            B samples: M feature slices (B, D_m) and labels (B,).

        Raises
        ------
        ValueError
            If the batch holds another number of parties' features than the model has parties.
        """
        if batch.n_parties != self.n_parties:
            raise ValueError(f"the batch has {batch.n_parties} parties' features; the model has {self.n_parties} parties")
        start, cpu_start = time.perf_counter(), time.process_time()
        r, wire = self.round, self.wire
        up0, down0 = wire.bytes_up, wire.bytes_down
        # lines 5-7: each party m sends C_m(h_m(θ_m; X_m^B)) to the server
        payloads = PartySide.embed_all(self.party_sides, r, batch.parts)
        up = [wire.send(r, m, 0, p) for m, p in enumerate(payloads, start=1)]
        # line 9: the server relays Φ̂_{-m} and sends C_0(θ_0) to every party
        received = [[wire.send(r, 0, m, p) for p in ps] for m, ps in enumerate(self.server_side.relay(r, up), start=1)]
        # lines 11-14: Q local iterations of every party and of the server (each on its own loss)
        local_sgd([PartySide.objective_all(self.party_sides, r, received, batch.y),
                   self.server_side.objective(r, batch.y)], self.Q)
        losses, outputs = self.server_side.prequential
        self.round += 1
        return RoundReport(round=r, sample_losses=losses, outputs=outputs,
                           bytes_up=wire.bytes_up - up0, bytes_down=wire.bytes_down - down0,
                           bytes_up_total=wire.bytes_up, bytes_down_total=wire.bytes_down,
                           compute_seconds=time.perf_counter() - start,
                           cpu_seconds=time.process_time() - cpu_start)

    @torch.no_grad()
    def predict(self, parts: Sequence[np.ndarray]) -> torch.Tensor:
        """Server outputs of the global model Θ on the parties' features, embeddings uncompressed: (N, …)."""
        xs = [torch.as_tensor(X, dtype=self.dtype) for X in parts]
        return self.server([h(x) for h, x in zip(self.parties, xs)])

    def evaluate(self, data: VerticalBatch) -> dict[str, float]:
        """Mean loss and accuracy (argmax of the outputs) of the global model on ``data``, without compression.

        Evaluation is not training traffic: it sends nothing through the wire.
        """
        out = self.predict(data.parts)
        y = torch.as_tensor(data.y)
        return {"loss": float(self.loss(out, y).mean()),
                "accuracy": float((out.argmax(dim=1) == y).double().mean())}
