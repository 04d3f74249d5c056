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

**Cost.** Per round: M party forwards, M + 1 encodes and decodes
(O(M·B·P + |θ_0|) numpy work). Per local iteration: M party forward/backward
passes on B rows (a loop over the M ≤ ~8 parties, each one batched torch call:
parties may have different input widths and architectures), one forward/backward
of the server model on the M parties' views stacked along the batch axis
(M·B rows; party m's rows hold its fresh embedding and the others' stale ones,
and since each θ_m reaches only its own rows, one backward of the summed
losses gives every party its own gradient), and one on the server's B rows.
Time grows linearly in the rounds R, in Q, and in M·B; bytes grow in R, M²·B·P
and M·|θ_0|, and not in Q. Models this small run fastest with
``torch.set_num_threads(1)`` (intra-op threads only add overhead).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ..compression import Compressor, NoCompression, dither_key
from .data import VerticalBatch
from .wire import Wire


def cross_entropy(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample softmax cross-entropy (nats): outputs (N, K) logits, y (N,) class ids → (N,)."""
    return F.cross_entropy(outputs, y, reduction="none")


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
        if not isinstance(local_iterations, int) or local_iterations < 1:
            raise ValueError(f"local_iterations (Q) must be an integer ≥ 1, got {local_iterations!r}")
        if not callable(lr) and not lr > 0:
            raise ValueError(f"lr (η) must be > 0, got {lr!r}")
        buffers = [name for name, _ in server.named_buffers()]
        if buffers:
            raise ValueError(f"the server model holds buffers ({', '.join(buffers)}); C-VFL sends only its "
                             f"parameters to the parties, so use a model without buffers (e.g. no BatchNorm)")
        self.parties = nn.ModuleList(copy.deepcopy(list(parties)))
        self.server = copy.deepcopy(server)
        dtypes = {p.dtype for p in self.parameters()}
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
        self._names = [n for n, _ in self.server.named_parameters()]
        self._shapes = [p.shape for p in self.server.parameters()]

    @property
    def n_parties(self) -> int:
        """M."""
        return len(self.parties)

    def parameters(self) -> list[torch.nn.Parameter]:
        """θ_1, …, θ_M then θ_0 (the global model Θ's blocks)."""
        return [p for h in self.parties for p in h.parameters()] + list(self.server.parameters())

    def _eta(self) -> float:
        return float(self.lr(self.round)) if callable(self.lr) else float(self.lr)

    def _tensors(self, batch: VerticalBatch) -> tuple[list[torch.Tensor], torch.Tensor]:
        if batch.n_parties != self.n_parties:
            raise ValueError(f"the batch has {batch.n_parties} parties' features; the model has {self.n_parties} parties")
        xs = [torch.as_tensor(X, dtype=self.dtype) for X in batch.parts]
        return xs, torch.as_tensor(batch.y)

    def _server_vector(self) -> np.ndarray:
        return torch.nn.utils.parameters_to_vector(self.server.parameters()).detach().cpu().numpy()

    def _server_params(self, vector: np.ndarray) -> dict[str, torch.Tensor]:
        flat = torch.as_tensor(vector, dtype=self.dtype)
        parts = torch.split(flat, [int(np.prod(s)) for s in self._shapes])
        return {n: t.view(s) for n, t, s in zip(self._names, parts, self._shapes)}

    def step(self, batch: VerticalBatch) -> RoundReport:
        """One round of Algorithm 1 on ``batch`` (the round's mini-batch B^{t₀}): communicate, then Q local iterations.

        Round-based training passes a sampled mini-batch (line 4); the
        streaming variant passes the samples that just arrived, so
        ``sample_losses`` is their prequential (test-then-train) loss.

        Parameters
        ----------
        batch : VerticalBatch
            B samples: M feature slices (B, D_m) and labels (B,).
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        xs, y = self._tensors(batch)
        r, M, B = self.round, self.n_parties, len(batch)
        up0, down0 = self.wire.bytes_up, self.wire.bytes_down
        eta = self._eta()

        # lines 5-7: each party sends C_m(h_m(θ_m; X_m^B)); the fresh embeddings also serve local iteration 0
        fresh = [h(x) for h, x in zip(self.parties, xs)]
        keys = [dither_key(self.seed, m, r) if self.compressor.dithered else None for m in range(1, M + 1)]
        embeddings = [e.detach().cpu().numpy() for e in fresh]
        same_shape = len({e.shape for e in embeddings}) == 1
        if same_shape:      # one vectorised pass over the parties, still one payload (and key) per party
            payloads = self.compressor.encode_batch(np.stack(embeddings), keys)
        else:
            payloads = [self.compressor.encode(e, k) for e, k in zip(embeddings, keys)]
        up = [self.wire.send(r, m, 0, p) for m, p in enumerate(payloads, start=1)]
        # line 9: the server relays Φ̂_{-m} and sends C_0(θ_0) to every party
        key0 = dither_key(self.seed, 0, r) if self.server_compressor.dithered else None
        p0 = self.server_compressor.encode(self._server_vector(), key0)
        for m in range(1, M + 1):
            for j in range(1, M + 1):
                if j != m:
                    self.wire.send(r, 0, m, up[j - 1])
            self.wire.send(r, 0, m, p0)
        # every receiver decodes a payload to the same values (same bytes, same key): decode each once
        decoded = self.compressor.decode_batch(up, keys) if same_shape else [
            self.compressor.decode(p, k) for p, k in zip(up, keys)]
        stale = [torch.as_tensor(d, dtype=self.dtype) for d in decoded]
        theta0 = self._server_params(self.server_compressor.decode(p0, key0))

        params = self.parameters()
        y_parties = y.repeat((M,) + (1,) * (y.dim() - 1))      # the labels of the M stacked party views
        for q in range(self.Q):
            if q:
                fresh = [h(x) for h, x in zip(self.parties, xs)]
            # lines 12-13 for parties m = 1..M: Φ̂_m^t = {Φ̂_{-m}^{t0}; h_m(θ_m^t)} with the stale C_0(θ_0^{t0})
            views = [torch.cat([fresh[j] if m == j else stale[j] for m in range(M)]) for j in range(M)]
            party_losses = self.loss(functional_call(self.server, theta0, (views,)), y_parties).view(M, B)
            # lines 12-13 for the server m = 0: Φ̂_0^t = {Φ̂_{-0}^{t0}; θ_0^t}
            outputs = self.server(stale)
            server_losses = self.loss(outputs, y)
            if q == 0:
                prequential, first_outputs = server_losses.detach(), outputs.detach()
            grads = torch.autograd.grad(party_losses.mean(dim=1).sum() + server_losses.mean(), params,
                                        allow_unused=True)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    if g is not None:
                        p.sub_(eta * g)
        self.round += 1
        return RoundReport(round=r, sample_losses=prequential.cpu().numpy(), outputs=first_outputs.cpu().numpy(),
                           bytes_up=self.wire.bytes_up - up0, bytes_down=self.wire.bytes_down - down0,
                           bytes_up_total=self.wire.bytes_up, bytes_down_total=self.wire.bytes_down,
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
