"""The binary wire format of every Kafka record of a streamfl run (versions 3, 4 and 5).

Every record value is one message::

    offset  size  field
    0       3     magic        b"SFL"
    3       1     version      uint8: 5 for the streaming GMF types (9-12), 4 for
                               COMPRESSED_UPDATE, 3 for the other types (2 is
                               still read)
    4       1     type         uint8: 1 DATA, 2 LOSS, 3 UPDATE, 4 GLOBAL, 6 STATE,
                               7 SPARSE_UPDATE (version ≥ 3), 8 COMPRESSED_UPDATE
                               (version ≥ 4), 9 RANKED_LOSS, 10 GMF_UPDATE,
                               11 GMF_GLOBAL, 12 GMF_STATE (version 5)
    5       1     n_arrays     uint8, number of arrays carried
    6       ...   fields       type-specific fixed fields (below), little-endian
    ...           descriptors  per array: dtype code (uint8), ndim (uint8),
                               then ndim uint32 dimensions
    ...           payloads     the arrays' raw bytes, C order, little-endian,
                               in descriptor order, nothing in between

All integers are little-endian (``struct`` format ``<``). Dtype codes: 1 =
float64 (``<f8``), 2 = int64 (``<i8``), 3 = uint8 (raw bytes; COMPRESSED_UPDATE
only). No JSON is involved; an array of N float64 values costs exactly 8 N
bytes plus its descriptor.

Type-specific fields and arrays (d features, b samples per step, K = 1 except
for softmax, k clients of one worker):

========  ==========================================  ===============================================
type      fields                                      arrays
========  ==========================================  ===============================================
DATA      t int64 (step, 1-based), client int32,      X float64 (b, d), y float64 (b,),
          flags uint8 (bit 0: present, bit 1:          optimum float64 (d,) iff flag bit 1
          optimum carried)
LOSS      t int64 (step, 1-based), worker int32       clients int64 (k,), losses float64 (k,),
                                                      played float64 (k, d, K)
UPDATE    round int64 (1-based), worker int32,        clients int64 (q,), model_sum float64 (d, K)
          n_participants int32 (0 ≤ n ≤ q)
GLOBAL    round int64 (1-based),                      model float64 (d, K)
          n_participants int32 (≥ 0)
STATE     client int32, t int64 (≥ 0),                model float64 (d, K)
          offset int64 (≥ 0), loss_offset int64 (≥ 0)
SPARSE_   round int64 (1-based), worker int32,        clients int64 (q,), n_samples int64 (q,),
UPDATE    table int32 (≥ 0)                           n_rows int64 (q,), ids int64 (n,),
                                                      rows float64 (n, k), counts int64 (n,)
COMPRES-  round int64 (1-based), worker int32         clients int64 (q,), lengths int64 (q,),
SED_UPD.                                              payloads uint8 (Σ lengths,)
RANKED_   t int64 (step, 1-based), worker int32       clients int64 (k,), losses float64 (k,),
LOSS                                                  ranks int64 (k,), negatives int64 (k, N)
GMF_      round int64 (1-based), worker int32         the six SPARSE_UPDATE arrays (item table, row
UPDATE                                                width D), then h float64 (q, D), b float64 (q,)
GMF_      round int64 (1-based),                      ids int64 (u,), rows float64 (u, D),
GLOBAL    n_participants int32 (≥ 0)                  h float64 (D,), b float64 (1,)
GMF_      client int32, t int64, offset int64,        p float64 (D,), h float64 (D,), b float64 (1,),
STATE     loss_offset int64 (all ≥ 0)                 seen int64 (s,)
========  ==========================================  ===============================================

The four version-5 types carry streaming FedNCF GMF
(:mod:`streamfl.models.streaming_gmf`, :mod:`consumers.gmf`): RANKED_LOSS
is a GMF worker's LOSS (each client's loss, the rank of its arriving
positive among the evaluation negatives — 0 for a client without a sample —
and its N training negatives, −1 without a sample); GMF_UPDATE is a round's
upload of q clients (their touched item rows in the SPARSE_UPDATE layout,
deltas against the round's starting table, then each client's prediction
layer h, b); GMF_GLOBAL the round's MF-FedAvg item-row deltas (sorted,
distinct ids) and averaged h, b (empty/zero with n_participants 0: nobody
took part, nothing is loaded); GMF_STATE a client's checkpoint (user
embedding p, h, b and the sorted ids of the items seen so far).

COMPRESSED_UPDATE carries the compressed uploads of q clients of one worker
for round r when the run sets ``learner.compression``: client ``clients[j]``
sent the compressor payload (:mod:`streamfl.compression`) of
``lengths[j]`` bytes that follows the previous clients' payloads, the
encoding of C(x_m − x̄), its model change since the last global model; a
length of 0 means the client took no part in the round (no sample) and sent
nothing. The payloads are the exact bytes the embedded engine counts, so the
aggregator decodes what the embedded server decodes.

SPARSE_UPDATE carries the sparse updates of q clients of one worker for one
table of the model (``table`` numbers the model's tables; 0 for a model with
one): client ``clients[j]`` learned from ``n_samples[j]`` samples and touched
the ``n_rows[j]`` rows that follow the previous clients' rows (Σ n_rows = n),
each with its id, its delta and how many of the client's samples involved it
(the layout of :class:`~streamfl.aggregation.sparse.SparseRound`; see
:meth:`SparseRoundUpdate.to_round`). Its size grows with the touched rows n,
not with the table.

Version history: 5 — adds the streaming GMF types 9-12; the other types
keep their layouts and versions, so readers of version 4 keep reading linear
runs, and a record of types 9-12 that says version ≤ 4 is refused
(``bad_type``). 4 — adds COMPRESSED_UPDATE (type 8) and the uint8 dtype
code 3; records of the other types are still written as version 3 (their
layout is unchanged), so readers of version 3 keep reading runs without
compression. 3 — adds SPARSE_UPDATE (type 7); the other types keep
their version-2 layout, so version-2 records are still decoded (a version-2
record of type 7 is refused, ``bad_type``). 2 — UPDATE names the clients it sums (so that the
aggregator can tell a contribution re-sent after a rebalance) and how many of
them took part in the round, GLOBAL says how many clients it averages, and
type 5 (per-client round models) is retired; STATE (type 6) stores client
checkpoints (:mod:`streamfl.transport.state`). A reader refuses records of
any other version (``bad_version``).

:func:`decode` validates everything and raises :class:`FormatError`, whose
``reason`` is one of ``null_value``, ``truncated``, ``bad_magic``, ``bad_version``,
``bad_type``, ``bad_dtype``, ``bad_field``, ``shape_mismatch``, ``non_finite``,
``trailing_bytes``. (Whether a COMPRESSED_UPDATE's payloads decode is checked
by the aggregator, which knows the compressor.) :func:`encode` checks structure (shapes, dtypes, field
ranges) but not finiteness, so that a diverging worker's NaN update still
reaches the aggregator, which rejects it with a reason.

>>> import numpy as np
>>> msg = Global(round=3, model=np.array([[0.5], [-1.0]]), n_participants=8)
>>> raw = encode(msg)
>>> raw[:5], len(raw)
(b'SFL\\x03\\x04', 44)
>>> back = decode(raw)
>>> back.round, back.model.ravel().tolist()
(3, [0.5, -1.0])
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

MAGIC = b"SFL"
VERSION = 3                  # written for every type but COMPRESSED_UPDATE and the GMF types
READABLE_VERSIONS = (2, 3, 4, 5)   # layouts of types 1-7 are the same in all four

_PREFIX = struct.Struct("<3sBBB")            # magic, version, type, n_arrays
_DESC = struct.Struct("<BB")                 # dtype code, ndim
_DTYPES = {1: np.dtype("<f8"), 2: np.dtype("<i8"), 3: np.dtype("u1")}
_NATIVE = {code: dtype.newbyteorder("=") for code, dtype in _DTYPES.items()}
_CODES = {np.dtype("<f8"): 1, np.dtype("<i8"): 2, np.dtype("u1"): 3}
MAX_NDIM = 8
_DIMS = [struct.Struct(f"<{k}I") for k in range(MAX_NDIM + 1)]     # an array's ndim uint32 dimensions


class MsgType(IntEnum):
    """Message type byte."""

    DATA = 1
    LOSS = 2
    UPDATE = 3
    GLOBAL = 4
    STATE = 6         # 5 is retired (per-client round models of version 1)
    SPARSE_UPDATE = 7  # version 3
    COMPRESSED_UPDATE = 8  # version 4
    RANKED_LOSS = 9        # version 5 (streaming GMF)
    GMF_UPDATE = 10        # version 5
    GMF_GLOBAL = 11        # version 5
    GMF_STATE = 12         # version 5


#: the first version that has each message type (records are written at it)
MIN_VERSION = {MsgType.SPARSE_UPDATE: 3, MsgType.COMPRESSED_UPDATE: 4, MsgType.RANKED_LOSS: 5,
               MsgType.GMF_UPDATE: 5, MsgType.GMF_GLOBAL: 5, MsgType.GMF_STATE: 5}


class FormatError(ValueError):
    """A record is not a valid message.

    Attributes
    ----------
    reason : str
        Machine-readable cause: ``null_value``, ``truncated``, ``bad_magic``, ``bad_version``,
        ``bad_type``, ``bad_dtype``, ``bad_field``, ``shape_mismatch``,
        ``non_finite`` or ``trailing_bytes``.
    detail : str
        Human-readable explanation.
    """

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass
class Data:
    """One client's mini-batch at one step (producer → workers).

    Attributes
    ----------
    t : int
        Step, 1-based (the engine's t, which indexes η_t).
    client : int
        Client id m, 0 ≤ m < M.
    X : ndarray (b, d) float64
        Features.
    y : ndarray (b,) float64
        Labels (targets, {0,1} or class indices).
    present : bool
        False when the client has no sample at this step (the chunk's mask).
    optimum : ndarray (d,) float64 or None
        x*_{t,m} for synthetic streams.
    """

    t: int
    client: int
    X: np.ndarray
    y: np.ndarray
    present: bool = True
    optimum: np.ndarray | None = None


@dataclass
class Loss:
    """A worker's test losses and played models at one step (worker → tracker).

    Attributes
    ----------
    t : int
        Step, 1-based.
    worker : int
        Worker id.
    clients : ndarray (k,) int64
        The worker's client ids, in the row order of ``losses``/``played``.
    losses : ndarray (k,) float64
        f(x_{t,m}, ξ_{t,m}), mini-batch mean loss before the update (nats; 0 if
        the client had no sample).
    played : ndarray (k, d, K) float64
        x_{t,m}, the models the clients played at step t (before training).
    """

    t: int
    worker: int
    clients: np.ndarray
    losses: np.ndarray
    played: np.ndarray


@dataclass
class Update:
    """A worker's pre-summed contribution to round r (worker → aggregator).

    FedSEA (paper 002, Algorithm 1) averages x_{rτ,m} over the clients; a
    worker adds up its own clients' models so that one record per worker and
    round travels, and names the clients it covers, so that a client whose
    contribution is re-sent after a rebalance is recognised.

    Attributes
    ----------
    round : int
        r = t / τ, 1-based.
    worker : int
        Sender (for logs only).
    clients : ndarray (q,) int64
        Distinct client ids m ≥ 0 this record covers.
    model_sum : ndarray (d, K) float64
        Σ x_{rτ,m} over the covered clients that took part in the round (saw
        at least one sample in steps (r−1)τ+1 … rτ), after local training.
    n_participants : int or None
        How many covered clients took part, 0 ≤ n ≤ q; None means all q.
    """

    round: int
    worker: int
    clients: np.ndarray
    model_sum: np.ndarray
    n_participants: int | None = None

    def __post_init__(self):
        if self.n_participants is None:
            self.n_participants = int(np.size(self.clients))


@dataclass
class Global:
    """The averaged model of round r (aggregator → workers).

    Attributes
    ----------
    round : int
        r, 1-based.
    model : ndarray (d, K) float64
        (1/n) Σ x_{rτ,m} over the n clients that took part in the round
        (all M on a synthetic stream: FedSEA's uniform average).
    n_participants : int
        n ≥ 0. When 0 no client saw a sample in the round: the clients keep
        their own models (``model`` is zeros and is not loaded), as the
        embedded :class:`~streamfl.aggregation.FedAvg` does.
    """

    round: int
    model: np.ndarray
    n_participants: int


@dataclass
class ClientState:
    """One client's checkpoint on the run's compacted state topic (worker → worker).

    Attributes
    ----------
    client : int
        m (the record key).
    t : int
        Last completed step (0 = nothing done yet).
    offset : int
        Data-topic offset (in partition m mod P) from which the client's
        records of steps > t are to be read.
    loss_offset : int
        Loss-topic offset before which no LOSS record reports a step > t of
        this client (where a new owner starts looking for already reported steps).
    model : ndarray (d, K) float64
        x_{t,m} (after loading the global model when t is a round boundary).
    """

    client: int
    t: int
    offset: int
    loss_offset: int
    model: np.ndarray


@dataclass
class SparseRoundUpdate:
    """Sparse updates of one table from q clients of a worker in round r (worker → aggregator).

    The wire form of :class:`~streamfl.aggregation.sparse.SparseRound`: only
    the rows each client touched travel, with their ids and counts, so a
    record costs O(touched rows), not O(table). The aggregator concatenates
    the records of a round and applies the same pure rule as the embedded
    engine (:mod:`streamfl.aggregation.sparse`).

    Attributes
    ----------
    round : int
        r, 1-based.
    worker : int
        Sender (for logs only).
    table : int
        Which table of the model (0-based; 0 for a model with one sparse table).
    clients : ndarray (q,) int64
        Distinct client ids m ≥ 0, q ≥ 1.
    n_samples : ndarray (q,) int64
        Samples each client learned from in the round (≥ 0).
    n_rows : ndarray (q,) int64
        Rows each client touched (≥ 0); client j's rows are the block
        after the first Σ_{i<j} n_rows[i] rows.
    ids : ndarray (n,) int64
        Row ids (≥ 0, distinct within one client's block).
    rows : ndarray (n, k) float64
        Deltas Δ (the client's row after training minus the global row).
    counts : ndarray (n,) int64
        Samples of the client that involved each row (≥ 0).
    """

    round: int
    worker: int
    table: int
    clients: np.ndarray
    n_samples: np.ndarray
    n_rows: np.ndarray
    ids: np.ndarray
    rows: np.ndarray
    counts: np.ndarray

    @classmethod
    def from_round(cls, r, *, round: int, worker: int, clients, table: int = 0) -> "SparseRoundUpdate":
        """Wire form of a :class:`~streamfl.aggregation.sparse.SparseRound` whose K clients have ids ``clients``."""
        order = np.argsort(r.client, kind="stable")
        return cls(round=round, worker=worker, table=table, clients=np.asarray(clients, dtype=np.int64),
                   n_samples=np.asarray(r.n_samples, dtype=np.int64),
                   n_rows=np.bincount(r.client, minlength=r.n_clients).astype(np.int64),
                   ids=r.ids[order], rows=r.rows[order], counts=r.counts[order])

    def to_round(self):
        """The :class:`~streamfl.aggregation.sparse.SparseRound` (client i = ``clients[i]``), validated."""
        from ..aggregation.sparse import SparseRound
        owner = np.repeat(np.arange(len(self.clients), dtype=np.int64), self.n_rows)
        return SparseRound(client=owner, ids=self.ids, rows=self.rows, counts=self.counts,
                           n_samples=self.n_samples).validate()


@dataclass
class CompressedUpdate:
    """The compressed uploads of q clients of a worker in round r (worker → aggregator).

    Client m that took part in round r sends the payload ``C.encode(x_{rτ,m}
    − x̄, key=(seed, m + 1, r − 1))`` (:class:`~streamfl.runtime.learners.Federated`,
    the embedded engine's upload; x̄ the last global model loaded, zeros before
    the first); the aggregator decodes each and averages x̄ + Ĉ(·) over the
    clients that took part. Bytes up are the payloads' lengths.

    Attributes
    ----------
    round : int
        r, 1-based.
    worker : int
        Sender (for logs only).
    clients : ndarray (q,) int64
        Distinct client ids m ≥ 0, q ≥ 1: the clients this record covers.
    lengths : ndarray (q,) int64
        Payload length of each client in bytes (≥ 0; 0: the client took no part).
    payloads : ndarray (Σ lengths,) uint8
        The payloads one after another, in the order of ``clients``.
    """

    round: int
    worker: int
    clients: np.ndarray
    lengths: np.ndarray
    payloads: np.ndarray

    @classmethod
    def pack(cls, *, round: int, worker: int, clients, payloads: list) -> "CompressedUpdate":
        """The record of ``clients`` whose payloads are ``payloads`` (bytes, or None / b"" for a client without part)."""
        chunks = [bytes(p or b"") for p in payloads]
        return cls(round=round, worker=worker, clients=np.asarray(clients, dtype=np.int64),
                   lengths=np.array([len(c) for c in chunks], dtype=np.int64),
                   payloads=np.frombuffer(b"".join(chunks), dtype=np.uint8).copy())

    @property
    def n_participants(self) -> int:
        """How many covered clients took part (sent a payload)."""
        return int(np.count_nonzero(self.lengths))

    def split(self) -> list[tuple[int, bytes]]:
        """(client id, payload bytes) of the clients that took part, in record order."""
        raw = self.payloads.tobytes()
        ends = np.cumsum(self.lengths)
        return [(int(c), raw[int(e - n):int(e)]) for c, n, e in zip(self.clients, self.lengths, ends) if n > 0]


@dataclass
class RankedLoss:
    """A worker's test losses and ranks of streaming GMF clients at one step (worker → tracker).

    The LOSS of a ranking model (:class:`~streamfl.models.streaming_gmf.StreamingGMF`):
    what :class:`~streamfl.regret.ranking.RankingTracker` needs from the
    clients, instead of the played (d, K) models of a linear LOSS.

    Attributes
    ----------
    t : int
        Step, 1-based.
    worker : int
        Worker id.
    clients : ndarray (k,) int64
        The clients reported, in the row order of the other arrays.
    losses : ndarray (k,) float64
        Mean BCE (nats) of the played model over the arriving positive and its
        training negatives (0 for a client without a sample).
    ranks : ndarray (k,) int64
        Rank of the arriving positive among the evaluation negatives
        (1 = best; 0 for a client without a sample).
    negatives : ndarray (k, N) int64
        The N training negatives drawn (item ids; −1 for a client without a sample).
    """

    t: int
    worker: int
    clients: np.ndarray
    losses: np.ndarray
    ranks: np.ndarray
    negatives: np.ndarray


@dataclass
class GMFUpdate(SparseRoundUpdate):
    """Round r's upload of q streaming GMF clients of a worker (worker → aggregator).

    The item table's rows in the SPARSE_UPDATE layout (the fields of
    :class:`SparseRoundUpdate`, table 0, deltas against the global table the
    clients started the round from), followed by each client's dense
    prediction layer: what :meth:`~streamfl.models.streaming_gmf.StreamingGMF.upload`
    gives the embedded server, restricted to these clients.

    Attributes
    ----------
    h : ndarray (q, D) float64
        Each client's prediction weights h_m after local training.
    b : ndarray (q,) float64
        Each client's bias b_m.
    """

    h: np.ndarray = None
    b: np.ndarray = None

    @property
    def n_participants(self) -> int:
        """How many covered clients took part (learned from a sample in the round)."""
        return int(np.count_nonzero(self.n_samples))


@dataclass
class GMFGlobal:
    """Round r's global update of streaming GMF (aggregator → workers).

    Attributes
    ----------
    round : int
        r, 1-based.
    n_participants : int
        Clients that took part; 0: nobody did, the clients keep their models
        (the arrays are then empty / zero and are not loaded).
    ids : ndarray (u,) int64
        Sorted, distinct item ids the round moved.
    rows : ndarray (u, D) float64
        The global delta of those rows (MF-FedAvg, FedNCF §3.3): the new table is old + delta.
    h : ndarray (D,) float64
        The averaged prediction weights.
    b : ndarray (1,) float64
        The averaged bias.
    """

    round: int
    n_participants: int
    ids: np.ndarray
    rows: np.ndarray
    h: np.ndarray
    b: np.ndarray


@dataclass
class GMFState:
    """A streaming GMF client's checkpoint on the state topic (worker → worker).

    Written at round boundaries (after the global update is loaded, so the
    client's round submodel is empty) and at t = T.

    Attributes
    ----------
    client, t, offset, loss_offset : int
        As in :class:`ClientState`.
    p : ndarray (D,) float64
        The private user embedding p_m.
    h : ndarray (D,) float64
        Prediction weights h_m.
    b : ndarray (1,) float64
        Bias b_m.
    seen : ndarray (s,) int64
        Sorted ids of the items the user has interacted with so far (never drawn as training negatives).
    """

    client: int
    t: int
    offset: int
    loss_offset: int
    p: np.ndarray
    h: np.ndarray
    b: np.ndarray
    seen: np.ndarray


Message = Data | Loss | Update | Global | ClientState | SparseRoundUpdate | CompressedUpdate | RankedLoss | \
    GMFUpdate | GMFGlobal | GMFState

_FIELDS = {
    MsgType.DATA: struct.Struct("<qiB"),
    MsgType.LOSS: struct.Struct("<qi"),
    MsgType.UPDATE: struct.Struct("<qii"),
    MsgType.GLOBAL: struct.Struct("<qi"),
    MsgType.STATE: struct.Struct("<iqqq"),
    MsgType.SPARSE_UPDATE: struct.Struct("<qii"),
    MsgType.COMPRESSED_UPDATE: struct.Struct("<qi"),
    MsgType.RANKED_LOSS: struct.Struct("<qi"),
    MsgType.GMF_UPDATE: struct.Struct("<qi"),
    MsgType.GMF_GLOBAL: struct.Struct("<qi"),
    MsgType.GMF_STATE: struct.Struct("<iqqq"),
}
_KINDS = {int(k): k for k in MsgType}
_ARRAY_KINDS = {MsgType.DATA: "fff", MsgType.LOSS: "iff", MsgType.UPDATE: "if", MsgType.GLOBAL: "f",
                MsgType.STATE: "f", MsgType.SPARSE_UPDATE: "iiiifi", MsgType.COMPRESSED_UPDATE: "iiu",
                MsgType.RANKED_LOSS: "ifii", MsgType.GMF_UPDATE: "iiiififf", MsgType.GMF_GLOBAL: "ifff",
                MsgType.GMF_STATE: "fffi"}        # numpy kind of each array, in order
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _array(name: str, a, dtype: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fiub" or (dtype == "u1" and a.dtype.kind not in "ub"):
        raise FormatError("bad_dtype", f"{name} has dtype {a.dtype}, expected a numeric array")
    return np.ascontiguousarray(a, dtype=np.dtype(dtype))


def _n_arrays(kind: MsgType, arrays: list, n: int) -> None:
    """Refuse a record of ``kind`` that does not carry exactly n arrays (``shape_mismatch``)."""
    if len(arrays) != n:
        raise FormatError("shape_mismatch", f"{kind.name} carries {len(arrays)} arrays, expected {n}")


def _clients(kind: MsgType, shape: tuple, letter: str) -> None:
    """Refuse a clients array that is not (q,) with q ≥ 1 (``shape_mismatch``; ``letter`` names q in the message)."""
    if not (len(shape) == 1 and shape[0] >= 1):
        raise FormatError("shape_mismatch", f"{kind.name} clients must be ({letter},) with {letter} ≥ 1, got {shape}")


def _sparse_shapes(kind: MsgType, arrays: list) -> None:
    """Shape rules of the SPARSE_UPDATE layout (the first six arrays of SPARSE_UPDATE and GMF_UPDATE)."""
    c, ns, nr, ids, rows, counts = (a.shape for a in arrays[:6])
    name = kind.name
    _clients(kind, c, "q")
    if ns != c or nr != c:
        raise FormatError("shape_mismatch", f"{name} n_samples and n_rows must be {c}, got {ns} and {nr}")
    if len(ids) != 1:
        raise FormatError("shape_mismatch", f"{name} ids must be (n,), got {ids}")
    if not (len(rows) == 2 and rows[0] == ids[0] and rows[1] >= 1):
        raise FormatError("shape_mismatch", f"{name} rows must be ({ids[0]}, k) with k ≥ 1, got {rows}")
    if counts != ids:
        raise FormatError("shape_mismatch", f"{name} counts must be {ids}, got {counts}")
    if int(arrays[2].sum()) != ids[0]:
        raise FormatError("shape_mismatch", f"{name} n_rows sum to {int(arrays[2].sum())} but {ids[0]} rows are carried")


def _check_shapes(kind: MsgType, arrays: list[np.ndarray], flags: int = 0):
    """Shape rules shared by encode and decode."""
    shapes = [a.shape for a in arrays]
    if kind == MsgType.DATA:
        has_opt = bool(flags & 2)
        if len(arrays) != (3 if has_opt else 2):
            raise FormatError("shape_mismatch", f"DATA carries {len(arrays)} arrays, expected {3 if has_opt else 2} (optimum flag {has_opt})")
        X, y = shapes[0], shapes[1]
        if len(X) != 2:
            raise FormatError("shape_mismatch", f"DATA X must be (b, d), got {X}")
        if y != (X[0],):
            raise FormatError("shape_mismatch", f"DATA y must be (b,) = ({X[0]},), got {y}")
        if not (X[0] >= 1 and X[1] >= 1):
            raise FormatError("shape_mismatch", f"DATA X must be non-empty, got {X}")
        if has_opt:
            if shapes[2] != (X[1],):
                raise FormatError("shape_mismatch", f"DATA optimum must be (d,) = ({X[1]},), got {shapes[2]}")
    elif kind == MsgType.UPDATE:
        _n_arrays(kind, arrays, 2)
        c, m = shapes
        _clients(kind, c, "q")
        if len(m) != 2:
            raise FormatError("shape_mismatch", f"UPDATE model_sum must be (d, K), got {m}")
    elif kind == MsgType.COMPRESSED_UPDATE:
        _n_arrays(kind, arrays, 3)
        c, lengths, payloads = shapes
        _clients(kind, c, "q")
        if lengths != c:
            raise FormatError("shape_mismatch", f"COMPRESSED_UPDATE lengths must be {c}, got {lengths}")
        if len(payloads) != 1:
            raise FormatError("shape_mismatch", f"COMPRESSED_UPDATE payloads must be (n,), got {payloads}")
        if arrays[1].dtype.kind == "i" and int(arrays[1].sum()) != payloads[0]:
            raise FormatError("shape_mismatch", f"COMPRESSED_UPDATE lengths sum to {int(arrays[1].sum())} but "
                                                f"{payloads[0]} payload bytes are carried")
    elif kind == MsgType.SPARSE_UPDATE:
        _n_arrays(kind, arrays, 6)
        _sparse_shapes(kind, arrays)
    elif kind == MsgType.GMF_UPDATE:
        _n_arrays(kind, arrays, 8)
        _sparse_shapes(kind, arrays)
        c, k, h, b = shapes[0], shapes[4][1], shapes[6], shapes[7]
        if h != (c[0], k) or b != c:
            raise FormatError("shape_mismatch", f"GMF_UPDATE h must be ({c[0]}, {k}) and b {c}, got {h} and {b}")
    elif kind == MsgType.RANKED_LOSS:
        _n_arrays(kind, arrays, 4)
        c, l, r, n = shapes
        _clients(kind, c, "k")
        if l != c or r != c:
            raise FormatError("shape_mismatch", f"RANKED_LOSS losses and ranks must be {c}, got {l} and {r}")
        if not (len(n) == 2 and n[0] == c[0]):
            raise FormatError("shape_mismatch", f"RANKED_LOSS negatives must be ({c[0]}, N), got {n}")
    elif kind == MsgType.GMF_GLOBAL:
        _n_arrays(kind, arrays, 4)
        ids, rows, h, b = shapes
        if not (len(ids) == 1 and len(h) == 1 and h[0] >= 1 and rows == (ids[0], h[0]) and b == (1,)):
            raise FormatError("shape_mismatch", f"GMF_GLOBAL needs ids (u,), rows (u, D), h (D,) and b (1,), got "
                                                f"{ids}, {rows}, {h} and {b}")
    elif kind == MsgType.GMF_STATE:
        _n_arrays(kind, arrays, 4)
        p, h, b, seen = shapes
        if not (len(p) == 1 and p[0] >= 1 and h == p and b == (1,) and len(seen) == 1):
            raise FormatError("shape_mismatch", f"GMF_STATE needs p (D,), h (D,), b (1,) and seen (s,), got "
                                                f"{p}, {h}, {b} and {seen}")
    elif kind == MsgType.LOSS:
        _n_arrays(kind, arrays, 3)
        c, l, p = shapes
        _clients(kind, c, "k")
        if l != c:
            raise FormatError("shape_mismatch", f"LOSS losses must be {c}, got {l}")
        if not (len(p) == 3 and p[0] == c[0]):
            raise FormatError("shape_mismatch", f"LOSS played must be ({c[0]}, d, K), got {p}")
    else:
        name = "STATE model" if kind == MsgType.STATE else "GLOBAL model"
        _n_arrays(kind, arrays, 1)
        if len(shapes[0]) != 2:
            raise FormatError("shape_mismatch", f"{name} must be (d, K), got {shapes[0]}")


def _check_range(name, v, bounds, low=None):
    if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool)):
        raise FormatError("bad_field", f"{name} must be an int, got {v!r}")
    lo = bounds[0] if low is None else low
    if not (lo <= v <= bounds[1]):
        raise FormatError("bad_field", f"{name} must be in [{lo}, {bounds[1]}], got {v}")


def encode(msg: Message) -> bytes:
    """Serialise a message to bytes (see the module doc for the layout).

    Arrays are converted to the wire dtype (float64 / int64) and C order.

    Raises
    ------
    FormatError
        ``bad_field`` (a step/round/count out of range), ``bad_dtype`` or
        ``shape_mismatch``. Non-finite values are *not* checked here.
    TypeError
        If ``msg`` is not a :class:`Data`, :class:`Loss`, :class:`Update` or
        :class:`Global`.
    """
    if isinstance(msg, Data):
        kind = MsgType.DATA
        _check_range("t", msg.t, _INT64, 1)
        _check_range("client", msg.client, _INT32, 0)
        arrays = [_array("X", msg.X, "<f8"), _array("y", msg.y, "<f8")]
        flags = int(bool(msg.present))
        if msg.optimum is not None:
            arrays.append(_array("optimum", msg.optimum, "<f8"))
            flags |= 2
        fields = _FIELDS[kind].pack(int(msg.t), int(msg.client), flags)
    elif isinstance(msg, Loss):
        kind, flags = MsgType.LOSS, 0
        _check_range("t", msg.t, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("losses", msg.losses, "<f8"),
                  _array("played", msg.played, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.t), int(msg.worker))
    elif isinstance(msg, Update):
        kind, flags = MsgType.UPDATE, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("model_sum", msg.model_sum, "<f8")]
        _check_range("n_participants", msg.n_participants, _INT32, 0)
        if msg.n_participants > arrays[0].size:
            raise FormatError("bad_field", f"UPDATE n_participants {msg.n_participants} exceeds its "
                                           f"{arrays[0].size} client(s)")
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.worker), int(msg.n_participants))
    elif isinstance(msg, Global):
        kind, flags = MsgType.GLOBAL, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("n_participants", msg.n_participants, _INT32, 0)
        arrays = [_array("model", msg.model, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.n_participants))
    elif isinstance(msg, GMFUpdate):                      # before SparseRoundUpdate: a subclass of it
        kind, flags = MsgType.GMF_UPDATE, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("n_samples", msg.n_samples, "<i8"),
                  _array("n_rows", msg.n_rows, "<i8"), _array("ids", msg.ids, "<i8"),
                  _array("rows", msg.rows, "<f8"), _array("counts", msg.counts, "<i8"),
                  _array("h", msg.h, "<f8"), _array("b", msg.b, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.worker))
    elif isinstance(msg, RankedLoss):
        kind, flags = MsgType.RANKED_LOSS, 0
        _check_range("t", msg.t, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("losses", msg.losses, "<f8"),
                  _array("ranks", msg.ranks, "<i8"), _array("negatives", msg.negatives, "<i8")]
        fields = _FIELDS[kind].pack(int(msg.t), int(msg.worker))
    elif isinstance(msg, GMFGlobal):
        kind, flags = MsgType.GMF_GLOBAL, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("n_participants", msg.n_participants, _INT32, 0)
        arrays = [_array("ids", msg.ids, "<i8"), _array("rows", msg.rows, "<f8"), _array("h", msg.h, "<f8"),
                  _array("b", msg.b, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.n_participants))
    elif isinstance(msg, GMFState):
        kind, flags = MsgType.GMF_STATE, 0
        _check_range("client", msg.client, _INT32, 0)
        _check_range("t", msg.t, _INT64, 0)
        _check_range("offset", msg.offset, _INT64, 0)
        _check_range("loss_offset", msg.loss_offset, _INT64, 0)
        arrays = [_array("p", msg.p, "<f8"), _array("h", msg.h, "<f8"), _array("b", msg.b, "<f8"),
                  _array("seen", msg.seen, "<i8")]
        fields = _FIELDS[kind].pack(int(msg.client), int(msg.t), int(msg.offset), int(msg.loss_offset))
    elif isinstance(msg, SparseRoundUpdate):
        kind, flags = MsgType.SPARSE_UPDATE, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        _check_range("table", msg.table, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("n_samples", msg.n_samples, "<i8"),
                  _array("n_rows", msg.n_rows, "<i8"), _array("ids", msg.ids, "<i8"),
                  _array("rows", msg.rows, "<f8"), _array("counts", msg.counts, "<i8")]
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.worker), int(msg.table))
    elif isinstance(msg, CompressedUpdate):
        kind, flags = MsgType.COMPRESSED_UPDATE, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("lengths", msg.lengths, "<i8"),
                  _array("payloads", msg.payloads, "u1")]
        if (arrays[1] < 0).any():
            raise FormatError("bad_field", "COMPRESSED_UPDATE lengths must be ≥ 0")
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.worker))
    elif isinstance(msg, ClientState):
        kind, flags = MsgType.STATE, 0
        _check_range("client", msg.client, _INT32, 0)
        _check_range("t", msg.t, _INT64, 0)
        _check_range("offset", msg.offset, _INT64, 0)
        _check_range("loss_offset", msg.loss_offset, _INT64, 0)
        arrays = [_array("model", msg.model, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.client), int(msg.t), int(msg.offset), int(msg.loss_offset))
    else:
        raise TypeError(f"encode() takes a Data, Loss, Update, Global, ClientState, SparseRoundUpdate, "
                        f"CompressedUpdate, RankedLoss, GMFUpdate, GMFGlobal or GMFState message, got "
                        f"{type(msg).__name__}")
    _check_shapes(kind, arrays, flags)
    parts = [_PREFIX.pack(MAGIC, MIN_VERSION.get(kind, VERSION), int(kind), len(arrays)), fields]
    for a in arrays:
        if a.ndim > MAX_NDIM:
            raise FormatError("shape_mismatch", f"arrays have at most {MAX_NDIM} dimensions, got {a.ndim}")
        parts.append(_DESC.pack(_CODES[a.dtype], a.ndim))
        parts.append(_DIMS[a.ndim].pack(*a.shape))
    parts.extend(a.tobytes() for a in arrays)
    return b"".join(parts)


def _sparse_message(kind: MsgType, fields: tuple, arrays: list) -> SparseRoundUpdate:
    """The value checks of the SPARSE_UPDATE layout; ``fields`` (round, worker, table)."""
    r, worker, table = fields
    clients, n_samples, n_rows, ids, rows, counts = arrays
    name = kind.name
    if r < 1:
        raise FormatError("bad_field", f"{name} round must be ≥ 1, got {r}")
    if worker < 0 or table < 0:
        raise FormatError("bad_field", f"{name} worker and table must be ≥ 0, got {worker} and {table}")
    if (clients < 0).any() or len(np.unique(clients)) != len(clients):
        raise FormatError("bad_field", f"{name} client ids must be ≥ 0 and distinct")
    for field, a in (("n_samples", n_samples), ("n_rows", n_rows), ("ids", ids), ("counts", counts)):
        if (a < 0).any():
            raise FormatError("bad_field", f"{name} {field} must be ≥ 0, got {int(a.min())}")
    owner = np.repeat(np.arange(len(clients)), n_rows)
    order = np.lexsort((ids, owner))
    if ((owner[order][1:] == owner[order][:-1]) & (ids[order][1:] == ids[order][:-1])).any():
        raise FormatError("bad_field", f"{name} ids must be distinct within each client's rows")
    return SparseRoundUpdate(round=r, worker=worker, table=table, clients=clients, n_samples=n_samples,
                             n_rows=n_rows, ids=ids, rows=rows, counts=counts)


def decode(raw: bytes) -> Message:
    """Parse and validate one record value.

    Returns
    -------
    Message
        Data, Loss, Update, Global, ClientState, SparseRoundUpdate, CompressedUpdate, RankedLoss,
        GMFUpdate, GMFGlobal or GMFState. Arrays are fresh, writable, native-endian copies.

    Raises
    ------
    FormatError
        With ``reason``: ``null_value`` (a record without a value), ``truncated`` (shorter than its header or arrays say),
        ``bad_magic``, ``bad_version`` (not 2 to 5), ``bad_type`` (unknown, or
        a type in a record older than its version, e.g. SPARSE_UPDATE at version 2), ``bad_dtype``
        (unknown dtype code), ``bad_field`` (step/round/client/count out of
        range), ``shape_mismatch`` (arrays inconsistent with each other or the
        type), ``non_finite`` (NaN or ±inf in a float array),
        ``trailing_bytes``.
    """
    if raw is None:
        raise FormatError("null_value", "the record has no value (a null / tombstone record)")
    raw = bytes(raw) if not isinstance(raw, (bytes, bytearray, memoryview)) else raw
    buf = memoryview(raw)
    n = len(buf)
    if n < 3:
        raise FormatError("truncated", f"{n} bytes is shorter than the magic")
    if bytes(buf[:3]) != MAGIC:
        raise FormatError("bad_magic", f"expected {MAGIC!r}, got {bytes(buf[:3])!r}")
    if n < _PREFIX.size:
        raise FormatError("truncated", f"{n} bytes is shorter than the {_PREFIX.size}-byte prefix")
    _, version, type_byte, n_arrays = _PREFIX.unpack_from(buf, 0)
    if version not in READABLE_VERSIONS:
        raise FormatError("bad_version", f"version {version} is not supported (this reader speaks "
                                         f"{', '.join(map(str, READABLE_VERSIONS[:-1]))} and "
                                         f"{READABLE_VERSIONS[-1]})")
    kind = _KINDS.get(type_byte)
    if kind is None:
        raise FormatError("bad_type", f"unknown message type {type_byte}")
    if version < MIN_VERSION.get(kind, 2):
        raise FormatError("bad_type", f"message type {type_byte} ({kind.name}) needs version "
                                      f"{MIN_VERSION[kind]}, the record says {version}")
    pos = _PREFIX.size
    fs = _FIELDS[kind]
    if n < pos + fs.size:
        raise FormatError("truncated", f"{kind.name} fields need {fs.size} bytes, {n - pos} left")
    fields = fs.unpack_from(buf, pos)
    pos += fs.size
    descs = []
    for i in range(n_arrays):
        if n < pos + _DESC.size:
            raise FormatError("truncated", f"array {i} descriptor cut off")
        code, ndim = _DESC.unpack_from(buf, pos)
        pos += _DESC.size
        if code not in _DTYPES:
            raise FormatError("bad_dtype", f"array {i} has unknown dtype code {code}")
        if ndim > MAX_NDIM:
            raise FormatError("shape_mismatch", f"array {i} has {ndim} dimensions (max {MAX_NDIM})")
        dims = _DIMS[ndim]
        if n < pos + dims.size:
            raise FormatError("truncated", f"array {i} shape cut off")
        shape = dims.unpack_from(buf, pos)
        pos += dims.size
        descs.append((code, shape))
    arrays = []
    for i, (code, shape) in enumerate(descs):
        count = math.prod(shape)
        size = count * _DTYPES[code].itemsize
        if n < pos + size:
            raise FormatError("truncated", f"array {i} {shape} needs {size} bytes, {n - pos} left")
        a = np.frombuffer(buf, dtype=_DTYPES[code], count=count, offset=pos).reshape(shape)
        arrays.append(a.astype(_NATIVE[code]))           # a fresh, writable, native-endian copy
        pos += size
    if pos != n:
        raise FormatError("trailing_bytes", f"{n - pos} bytes after the last array")

    flags = fields[2] if kind == MsgType.DATA else 0
    _check_shapes(kind, arrays, flags)
    for i, (a, k) in enumerate(zip(arrays, _ARRAY_KINDS[kind])):
        if a.dtype.kind != k:
            raise FormatError("bad_dtype", f"{kind.name} array {i} must be "
                                           f"{ {'f': 'float64', 'i': 'int64', 'u': 'uint8'}[k]}, got {a.dtype}")
        if k == "f" and not np.isfinite(a).all():
            bad = int(np.size(a) - np.isfinite(a).sum())
            raise FormatError("non_finite", f"{kind.name} array {i} has {bad} NaN/inf value(s)")

    if kind == MsgType.DATA:
        t, client, flags = fields
        if t < 1:
            raise FormatError("bad_field", f"DATA step t must be ≥ 1, got {t}")
        if client < 0:
            raise FormatError("bad_field", f"DATA client must be ≥ 0, got {client}")
        if flags > 3:
            raise FormatError("bad_field", f"DATA flags {flags:#x} has unknown bits")
        return Data(t=t, client=client, X=arrays[0], y=arrays[1], present=bool(flags & 1),
                    optimum=arrays[2] if flags & 2 else None)
    if kind == MsgType.LOSS:
        t, worker = fields
        if t < 1:
            raise FormatError("bad_field", f"LOSS step t must be ≥ 1, got {t}")
        if worker < 0:
            raise FormatError("bad_field", f"LOSS worker must be ≥ 0, got {worker}")
        if (arrays[0] < 0).any():
            raise FormatError("bad_field", "LOSS client ids must be ≥ 0")
        return Loss(t=t, worker=worker, clients=arrays[0], losses=arrays[1], played=arrays[2])
    if kind == MsgType.UPDATE:
        r, worker, count = fields
        if r < 1:
            raise FormatError("bad_field", f"UPDATE round must be ≥ 1, got {r}")
        if worker < 0:
            raise FormatError("bad_field", f"UPDATE worker must be ≥ 0, got {worker}")
        if (arrays[0] < 0).any():
            raise FormatError("bad_field", "UPDATE client ids must be ≥ 0")
        if len(np.unique(arrays[0])) != len(arrays[0]):
            raise FormatError("bad_field", "UPDATE client ids must be distinct")
        if not 0 <= count <= len(arrays[0]):
            raise FormatError("bad_field", f"UPDATE n_participants must be in [0, {len(arrays[0])}], got {count}")
        return Update(round=r, worker=worker, clients=arrays[0], model_sum=arrays[1], n_participants=count)
    if kind == MsgType.SPARSE_UPDATE:
        return _sparse_message(kind, fields, arrays)
    if kind == MsgType.RANKED_LOSS:
        t, worker = fields
        if t < 1 or worker < 0:
            raise FormatError("bad_field", f"RANKED_LOSS step t must be ≥ 1 and worker ≥ 0, got {t} and {worker}")
        if (arrays[0] < 0).any() or len(np.unique(arrays[0])) != len(arrays[0]):
            raise FormatError("bad_field", "RANKED_LOSS client ids must be ≥ 0 and distinct")
        if (arrays[2] < 0).any() or (arrays[3] < -1).any():
            raise FormatError("bad_field", "RANKED_LOSS ranks must be ≥ 0 and negatives ≥ −1")
        return RankedLoss(t=t, worker=worker, clients=arrays[0], losses=arrays[1], ranks=arrays[2],
                          negatives=arrays[3])
    if kind == MsgType.GMF_UPDATE:
        r, worker = fields
        sparse = _sparse_message(kind, (r, worker, 0), arrays[:6])
        return GMFUpdate(**{f: getattr(sparse, f) for f in SparseRoundUpdate.__dataclass_fields__},
                         h=arrays[6], b=arrays[7])
    if kind == MsgType.GMF_GLOBAL:
        r, count = fields
        ids = arrays[0]
        if r < 1 or count < 0:
            raise FormatError("bad_field", f"GMF_GLOBAL round must be ≥ 1 and n_participants ≥ 0, got {r} and {count}")
        if (ids < 0).any() or (np.diff(ids) <= 0).any():
            raise FormatError("bad_field", "GMF_GLOBAL ids must be ≥ 0, sorted and distinct")
        return GMFGlobal(round=r, n_participants=count, ids=ids, rows=arrays[1], h=arrays[2], b=arrays[3])
    if kind == MsgType.GMF_STATE:
        client, t, offset, loss_offset = fields
        seen = arrays[3]
        if not (client >= 0 and t >= 0 and offset >= 0 and loss_offset >= 0):
            raise FormatError("bad_field", f"GMF_STATE fields must be ≥ 0, got client {client}, t {t}, offset "
                                           f"{offset}, loss_offset {loss_offset}")
        if (seen < 0).any() or (np.diff(seen) <= 0).any():
            raise FormatError("bad_field", "GMF_STATE seen ids must be ≥ 0, sorted and distinct")
        return GMFState(client=client, t=t, offset=offset, loss_offset=loss_offset, p=arrays[0], h=arrays[1],
                        b=arrays[2], seen=seen)
    if kind == MsgType.COMPRESSED_UPDATE:
        r, worker = fields
        clients, lengths, payloads = arrays
        if r < 1:
            raise FormatError("bad_field", f"COMPRESSED_UPDATE round must be ≥ 1, got {r}")
        if worker < 0:
            raise FormatError("bad_field", f"COMPRESSED_UPDATE worker must be ≥ 0, got {worker}")
        if (clients < 0).any() or len(np.unique(clients)) != len(clients):
            raise FormatError("bad_field", "COMPRESSED_UPDATE client ids must be ≥ 0 and distinct")
        if (lengths < 0).any():
            raise FormatError("bad_field", "COMPRESSED_UPDATE lengths must be ≥ 0")
        return CompressedUpdate(round=r, worker=worker, clients=clients, lengths=lengths, payloads=payloads)
    if kind == MsgType.STATE:
        client, t, offset, loss_offset = fields
        if not (client >= 0 and t >= 0 and offset >= 0 and loss_offset >= 0):
            raise FormatError("bad_field", f"STATE fields must be ≥ 0, got client {client}, t {t}, offset {offset}, loss_offset {loss_offset}")
        return ClientState(client=client, t=t, offset=offset, loss_offset=loss_offset, model=arrays[0])
    r, count = fields
    if r < 1:
        raise FormatError("bad_field", f"GLOBAL round must be ≥ 1, got {r}")
    if count < 0:
        raise FormatError("bad_field", f"GLOBAL n_participants must be ≥ 0, got {count}")
    return Global(round=r, model=arrays[0], n_participants=count)
