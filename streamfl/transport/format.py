"""The binary wire format of every Kafka record of a streamfl run (version 1).

Every record value is one message::

    offset  size  field
    0       3     magic        b"SFL"
    3       1     version      uint8, currently 1
    4       1     type         uint8: 1 DATA, 2 LOSS, 3 UPDATE, 4 GLOBAL
    5       1     n_arrays     uint8, number of arrays carried
    6       ...   fields       type-specific fixed fields (below), little-endian
    ...           descriptors  per array: dtype code (uint8), ndim (uint8),
                               then ndim uint32 dimensions
    ...           payloads     the arrays' raw bytes, C order, little-endian,
                               in descriptor order, nothing in between

All integers are little-endian (``struct`` format ``<``). Dtype codes: 1 =
float64 (``<f8``), 2 = int64 (``<i8``). No JSON is involved; an array of N
float64 values costs exactly 8 N bytes plus its descriptor.

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
UPDATE    round int64 (1-based), worker int32,        model_sum float64 (d, K)
          n_clients int32
GLOBAL    round int64 (1-based)                       model float64 (d, K)
MODELS    round int64 (1-based), worker int32         clients int64 (q,), models float64 (q, d, K)
STATE     client int32, t int64 (≥ 0),                model float64 (d, K)
          offset int64 (≥ 0), loss_offset int64 (≥ 0)
========  ==========================================  ===============================================

MODELS (type 5) and STATE (type 6) were added for fault-tolerant group
membership (:mod:`consumers.worker`, :mod:`streamfl.transport.state`); the
first four types are unchanged.

:func:`decode` validates everything and raises :class:`FormatError`, whose
``reason`` is one of ``truncated``, ``bad_magic``, ``bad_version``,
``bad_type``, ``bad_dtype``, ``bad_field``, ``shape_mismatch``, ``non_finite``,
``trailing_bytes``. :func:`encode` checks structure (shapes, dtypes, field
ranges) but not finiteness, so that a diverging worker's NaN update still
reaches the aggregator, which rejects it with a reason.

>>> import numpy as np
>>> msg = Global(round=3, model=np.array([[0.5], [-1.0]]))
>>> raw = encode(msg)
>>> raw[:5], len(raw)
(b'SFL\\x01\\x04', 40)
>>> back = decode(raw)
>>> back.round, back.model.ravel().tolist()
(3, [0.5, -1.0])
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

MAGIC = b"SFL"
VERSION = 1

_PREFIX = struct.Struct("<3sBBB")            # magic, version, type, n_arrays
_DESC = struct.Struct("<BB")                 # dtype code, ndim
_DIM = struct.Struct("<I")
_DTYPES = {1: np.dtype("<f8"), 2: np.dtype("<i8")}
_CODES = {np.dtype("<f8"): 1, np.dtype("<i8"): 2}
MAX_NDIM = 8


class MsgType(IntEnum):
    """Message type byte."""

    DATA = 1
    LOSS = 2
    UPDATE = 3
    GLOBAL = 4
    MODELS = 5
    STATE = 6


class FormatError(ValueError):
    """A record is not a valid message.

    Attributes
    ----------
    reason : str
        Machine-readable cause: ``truncated``, ``bad_magic``, ``bad_version``,
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
    """A worker's contribution to round r (worker → aggregator).

    Attributes
    ----------
    round : int
        r = t / τ, 1-based.
    worker : int
    n_clients : int
        How many client models ``model_sum`` adds up (≥ 1).
    model_sum : ndarray (d, K) float64
        Σ_m x_{t,m} over the worker's clients, after local training at step t.
    """

    round: int
    worker: int
    n_clients: int
    model_sum: np.ndarray


@dataclass
class Global:
    """The averaged model of round r (aggregator → workers).

    Attributes
    ----------
    round : int
        r, 1-based.
    model : ndarray (d, K) float64
        (1/M) Σ_m x_{t,m}.
    """

    round: int
    model: np.ndarray


@dataclass
class RoundModels:
    """Some clients' models at the end of round r, one per client (worker → aggregator).

    Sent instead of :class:`Update` by workers under consumer-group
    membership: the aggregator keys contributions by client, so a client
    re-sent after a rebalance (replayed from the last checkpoint, hence the
    same model) is ignored, and the average is summed in client order — the
    same numbers whichever worker owned which client.

    Attributes
    ----------
    round : int
        r = t / τ, 1-based.
    worker : int
        Sender (for logs only).
    clients : ndarray (q,) int64
        Distinct client ids m (≥ 0).
    models : ndarray (q, d, K) float64
        x_{t,m} after local training at step t = rτ, row i for ``clients[i]``.
    """

    round: int
    worker: int
    clients: np.ndarray
    models: np.ndarray


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


Message = Data | Loss | Update | Global | RoundModels | ClientState

_FIELDS = {
    MsgType.DATA: struct.Struct("<qiB"),
    MsgType.LOSS: struct.Struct("<qi"),
    MsgType.UPDATE: struct.Struct("<qii"),
    MsgType.GLOBAL: struct.Struct("<q"),
    MsgType.MODELS: struct.Struct("<qi"),
    MsgType.STATE: struct.Struct("<iqqq"),
}
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _array(name: str, a, dtype: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "fiub":
        raise FormatError("bad_dtype", f"{name} has dtype {a.dtype}, expected a numeric array")
    return np.ascontiguousarray(a, dtype=np.dtype(dtype))


def _need(cond: bool, reason: str, detail: str):
    if not cond:
        raise FormatError(reason, detail)


def _check_shapes(kind: MsgType, arrays: list[np.ndarray], flags: int = 0):
    """Shape rules shared by encode and decode."""
    shapes = [a.shape for a in arrays]
    if kind == MsgType.DATA:
        has_opt = bool(flags & 2)
        _need(len(arrays) == (3 if has_opt else 2), "shape_mismatch",
              f"DATA carries {len(arrays)} arrays, expected {3 if has_opt else 2} (optimum flag {has_opt})")
        X, y = shapes[0], shapes[1]
        _need(len(X) == 2, "shape_mismatch", f"DATA X must be (b, d), got {X}")
        _need(y == (X[0],), "shape_mismatch", f"DATA y must be (b,) = ({X[0]},), got {y}")
        _need(X[0] >= 1 and X[1] >= 1, "shape_mismatch", f"DATA X must be non-empty, got {X}")
        if has_opt:
            _need(shapes[2] == (X[1],), "shape_mismatch", f"DATA optimum must be (d,) = ({X[1]},), got {shapes[2]}")
    elif kind == MsgType.MODELS:
        _need(len(arrays) == 2, "shape_mismatch", f"MODELS carries {len(arrays)} arrays, expected 2")
        c, m = shapes
        _need(len(c) == 1 and c[0] >= 1, "shape_mismatch", f"MODELS clients must be (q,) with q ≥ 1, got {c}")
        _need(len(m) == 3 and m[0] == c[0], "shape_mismatch", f"MODELS models must be ({c[0]}, d, K), got {m}")
    elif kind == MsgType.LOSS:
        _need(len(arrays) == 3, "shape_mismatch", f"LOSS carries {len(arrays)} arrays, expected 3")
        c, l, p = shapes
        _need(len(c) == 1 and c[0] >= 1, "shape_mismatch", f"LOSS clients must be (k,) with k ≥ 1, got {c}")
        _need(l == c, "shape_mismatch", f"LOSS losses must be {c}, got {l}")
        _need(len(p) == 3 and p[0] == c[0], "shape_mismatch", f"LOSS played must be ({c[0]}, d, K), got {p}")
    else:
        name = {MsgType.UPDATE: "UPDATE model_sum", MsgType.STATE: "STATE model"}.get(kind, "GLOBAL model")
        _need(len(arrays) == 1, "shape_mismatch", f"{kind.name} carries {len(arrays)} arrays, expected 1")
        _need(len(shapes[0]) == 2, "shape_mismatch", f"{name} must be (d, K), got {shapes[0]}")


def _check_range(name, v, bounds, low=None):
    _need(isinstance(v, (int, np.integer)) and not isinstance(v, bool), "bad_field", f"{name} must be an int, got {v!r}")
    lo = bounds[0] if low is None else low
    _need(lo <= v <= bounds[1], "bad_field", f"{name} must be in [{lo}, {bounds[1]}], got {v}")


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
        _check_range("n_clients", msg.n_clients, _INT32, 1)
        arrays = [_array("model_sum", msg.model_sum, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.round), int(msg.worker), int(msg.n_clients))
    elif isinstance(msg, Global):
        kind, flags = MsgType.GLOBAL, 0
        _check_range("round", msg.round, _INT64, 1)
        arrays = [_array("model", msg.model, "<f8")]
        fields = _FIELDS[kind].pack(int(msg.round))
    elif isinstance(msg, RoundModels):
        kind, flags = MsgType.MODELS, 0
        _check_range("round", msg.round, _INT64, 1)
        _check_range("worker", msg.worker, _INT32, 0)
        arrays = [_array("clients", msg.clients, "<i8"), _array("models", msg.models, "<f8")]
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
        raise TypeError(f"encode() takes a Data, Loss, Update, Global, RoundModels or ClientState message, "
                        f"got {type(msg).__name__}")
    _check_shapes(kind, arrays, flags)
    parts = [_PREFIX.pack(MAGIC, VERSION, int(kind), len(arrays)), fields]
    for a in arrays:
        _need(a.ndim <= MAX_NDIM, "shape_mismatch", f"arrays have at most {MAX_NDIM} dimensions, got {a.ndim}")
        parts.append(_DESC.pack(_CODES[a.dtype], a.ndim))
        parts.extend(_DIM.pack(n) for n in a.shape)
    parts.extend(a.tobytes() for a in arrays)
    return b"".join(parts)


def decode(raw: bytes) -> Message:
    """Parse and validate one record value.

    Returns
    -------
    Data, Loss, Update or Global
        Arrays are fresh, writable, native-endian copies.

    Raises
    ------
    FormatError
        With ``reason``: ``truncated`` (shorter than its header or arrays say),
        ``bad_magic``, ``bad_version`` (not 1), ``bad_type``, ``bad_dtype``
        (unknown dtype code), ``bad_field`` (step/round/client/count out of
        range), ``shape_mismatch`` (arrays inconsistent with each other or the
        type), ``non_finite`` (NaN or ±inf in a float array),
        ``trailing_bytes``.
    """
    raw = bytes(raw) if not isinstance(raw, (bytes, bytearray, memoryview)) else raw
    buf = memoryview(raw)
    n = len(buf)
    _need(n >= 3, "truncated", f"{n} bytes is shorter than the magic")
    _need(bytes(buf[:3]) == MAGIC, "bad_magic", f"expected {MAGIC!r}, got {bytes(buf[:3])!r}")
    _need(n >= _PREFIX.size, "truncated", f"{n} bytes is shorter than the {_PREFIX.size}-byte prefix")
    _, version, type_byte, n_arrays = _PREFIX.unpack_from(buf, 0)
    _need(version == VERSION, "bad_version", f"version {version} is not supported (this reader speaks {VERSION})")
    try:
        kind = MsgType(type_byte)
    except ValueError:
        raise FormatError("bad_type", f"unknown message type {type_byte}") from None
    pos = _PREFIX.size
    fs = _FIELDS[kind]
    _need(n >= pos + fs.size, "truncated", f"{kind.name} fields need {fs.size} bytes, {n - pos} left")
    fields = fs.unpack_from(buf, pos)
    pos += fs.size
    descs = []
    for i in range(n_arrays):
        _need(n >= pos + _DESC.size, "truncated", f"array {i} descriptor cut off")
        code, ndim = _DESC.unpack_from(buf, pos)
        pos += _DESC.size
        _need(code in _DTYPES, "bad_dtype", f"array {i} has unknown dtype code {code}")
        _need(ndim <= MAX_NDIM, "shape_mismatch", f"array {i} has {ndim} dimensions (max {MAX_NDIM})")
        _need(n >= pos + ndim * _DIM.size, "truncated", f"array {i} shape cut off")
        shape = tuple(_DIM.unpack_from(buf, pos + j * _DIM.size)[0] for j in range(ndim))
        pos += ndim * _DIM.size
        descs.append((_DTYPES[code], shape))
    arrays = []
    for i, (dtype, shape) in enumerate(descs):
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        _need(n >= pos + size, "truncated", f"array {i} {shape} needs {size} bytes, {n - pos} left")
        a = np.frombuffer(buf, dtype=dtype, count=size // dtype.itemsize, offset=pos).reshape(shape)
        arrays.append(a.astype(dtype.newbyteorder("="), copy=True))
        pos += size
    _need(pos == n, "trailing_bytes", f"{n - pos} bytes after the last array")

    flags = fields[2] if kind == MsgType.DATA else 0
    _check_shapes(kind, arrays, flags)
    expected = {MsgType.DATA: ["f", "f", "f"], MsgType.LOSS: ["i", "f", "f"],
                MsgType.UPDATE: ["f"], MsgType.GLOBAL: ["f"], MsgType.MODELS: ["i", "f"],
                MsgType.STATE: ["f"]}[kind]
    for i, (a, k) in enumerate(zip(arrays, expected)):
        _need(a.dtype.kind == k, "bad_dtype", f"{kind.name} array {i} must be {'float64' if k == 'f' else 'int64'}, got {a.dtype}")
        if k == "f" and not np.isfinite(a).all():
            bad = int(np.size(a) - np.isfinite(a).sum())
            raise FormatError("non_finite", f"{kind.name} array {i} has {bad} NaN/inf value(s)")

    if kind == MsgType.DATA:
        t, client, flags = fields
        _need(t >= 1, "bad_field", f"DATA step t must be ≥ 1, got {t}")
        _need(client >= 0, "bad_field", f"DATA client must be ≥ 0, got {client}")
        _need(flags <= 3, "bad_field", f"DATA flags {flags:#x} has unknown bits")
        return Data(t=t, client=client, X=arrays[0], y=arrays[1], present=bool(flags & 1),
                    optimum=arrays[2] if flags & 2 else None)
    if kind == MsgType.LOSS:
        t, worker = fields
        _need(t >= 1, "bad_field", f"LOSS step t must be ≥ 1, got {t}")
        _need(worker >= 0, "bad_field", f"LOSS worker must be ≥ 0, got {worker}")
        _need(bool((arrays[0] >= 0).all()), "bad_field", "LOSS client ids must be ≥ 0")
        return Loss(t=t, worker=worker, clients=arrays[0], losses=arrays[1], played=arrays[2])
    if kind == MsgType.UPDATE:
        r, worker, count = fields
        _need(r >= 1, "bad_field", f"UPDATE round must be ≥ 1, got {r}")
        _need(worker >= 0, "bad_field", f"UPDATE worker must be ≥ 0, got {worker}")
        _need(count >= 1, "bad_field", f"UPDATE n_clients must be ≥ 1, got {count}")
        return Update(round=r, worker=worker, n_clients=count, model_sum=arrays[0])
    if kind == MsgType.MODELS:
        r, worker = fields
        _need(r >= 1, "bad_field", f"MODELS round must be ≥ 1, got {r}")
        _need(worker >= 0, "bad_field", f"MODELS worker must be ≥ 0, got {worker}")
        _need(bool((arrays[0] >= 0).all()), "bad_field", "MODELS client ids must be ≥ 0")
        _need(len(np.unique(arrays[0])) == len(arrays[0]), "bad_field", "MODELS client ids must be distinct")
        return RoundModels(round=r, worker=worker, clients=arrays[0], models=arrays[1])
    if kind == MsgType.STATE:
        client, t, offset, loss_offset = fields
        _need(client >= 0 and t >= 0 and offset >= 0 and loss_offset >= 0, "bad_field",
              f"STATE fields must be ≥ 0, got client {client}, t {t}, offset {offset}, loss_offset {loss_offset}")
        return ClientState(client=client, t=t, offset=offset, loss_offset=loss_offset, model=arrays[0])
    (r,) = fields
    _need(r >= 1, "bad_field", f"GLOBAL round must be ≥ 1, got {r}")
    return Global(round=r, model=arrays[0])
