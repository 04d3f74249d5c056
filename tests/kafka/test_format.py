"""The binary wire format: exact round trips and one reason per malformed case (no broker needed)."""

import struct

import numpy as np
import pytest

from streamfl.aggregation.sparse import SparseRound, SparseUpdate, mf_fedavg
from streamfl.transport.format import (MAGIC, CompressedUpdate, Data, FormatError, Global, Loss, MsgType,
                                       SparseRoundUpdate, Update, decode, encode)

rng = np.random.default_rng(0)


def _same(a, b):
    assert type(a) is type(b)
    for k, v in vars(a).items():
        w = getattr(b, k)
        if isinstance(v, np.ndarray):
            assert w.shape == v.shape and w.dtype == v.dtype
            assert np.array_equal(v, w) and v.tobytes() == w.tobytes()     # bit for bit
        else:
            assert v == w


MESSAGES = [
    Data(t=1, client=0, X=rng.standard_normal((3, 5)), y=rng.integers(0, 2, 3).astype(float), present=True,
         optimum=rng.standard_normal(5)),
    Data(t=2**40, client=7, X=rng.standard_normal((1, 2)), y=np.array([0.25]), present=False, optimum=None),
    Loss(t=9, worker=2, clients=np.array([4, 5, 6]), losses=np.array([0.1, 1e-300, 7.5]),
         played=rng.standard_normal((3, 4, 2))),
    Update(round=3, worker=1, clients=np.array([5, 2]), model_sum=rng.standard_normal((4, 1)), n_participants=1),
    Global(round=12, model=np.array([[np.nextafter(1.0, 2.0)], [-0.0], [5e-324]]), n_participants=3),
    SparseRoundUpdate(round=4, worker=1, table=2, clients=np.array([9, 3, 5]), n_samples=np.array([10, 0, 7]),
                      n_rows=np.array([2, 0, 1]), ids=np.array([10**12, 4, 4]), rows=rng.standard_normal((3, 12)),
                      counts=np.array([3, 1, 0])),
    SparseRoundUpdate(round=1, worker=0, table=0, clients=np.array([0]), n_samples=np.array([5]),
                      n_rows=np.array([0]), ids=np.zeros(0, np.int64), rows=np.zeros((0, 4)),
                      counts=np.zeros(0, np.int64)),
    CompressedUpdate(round=2, worker=1, clients=np.array([3, 0, 8]), lengths=np.array([3, 0, 2]),
                     payloads=np.array([1, 0, 255, 7, 9], dtype=np.uint8)),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_is_exact(msg):
    back = decode(encode(msg))
    _same(msg, back)
    back_arrays = [v for v in vars(back).values() if isinstance(v, np.ndarray)]
    assert all(a.flags.writeable for a in back_arrays)


def test_header_layout():
    raw = encode(Update(round=5, worker=3, clients=np.array([4, 7]), model_sum=np.zeros((2, 1)), n_participants=2))
    assert raw[:3] == MAGIC and raw[3] == 3 and raw[4] == MsgType.UPDATE and raw[5] == 2
    assert struct.unpack_from("<qii", raw, 6) == (5, 3, 2)
    assert struct.unpack_from("<BBI", raw, 22) == (2, 1, 2)          # int64, 1-D, (2,)
    assert struct.unpack_from("<BBII", raw, 28) == (1, 2, 2, 1)     # float64, 2-D, (2, 1)
    assert struct.unpack_from("<2q", raw, 38) == (4, 7)
    assert len(raw) == 22 + 6 + 10 + 16 + 16


def test_update_participants_are_checked():
    with pytest.raises(FormatError, match="n_participants 3 exceeds its 2 client"):
        encode(Update(round=1, worker=0, clients=np.array([0, 1]), model_sum=np.zeros((1, 1)), n_participants=3))
    raw = bytearray(encode(Update(round=1, worker=0, clients=np.array([0, 1]), model_sum=np.zeros((1, 1)))))
    struct.pack_into("<i", raw, 18, 3)
    assert _reason(bytes(raw)) == "bad_field"
    dup = encode(Update(round=1, worker=0, clients=np.array([1, 1]), model_sum=np.zeros((1, 1))))
    assert _reason(dup) == "bad_field"
    assert Update(round=1, worker=0, clients=np.array([0, 1, 2]), model_sum=np.zeros((1, 1))).n_participants == 3


def _reason(raw):
    with pytest.raises(FormatError) as info:
        decode(raw)
    assert str(info.value).startswith(info.value.reason + ": ") and info.value.detail
    return info.value.reason


GOOD = encode(Data(t=3, client=1, X=np.ones((2, 3)), y=np.zeros(2), optimum=np.ones(3)))


def test_wrong_magic():
    assert _reason(b"XYZ" + GOOD[3:]) == "bad_magic"


def test_wrong_version():
    assert _reason(GOOD[:3] + bytes([1]) + GOOD[4:]) == "bad_version"      # version 1 records are refused
    assert _reason(GOOD[:3] + bytes([6]) + GOOD[4:]) == "bad_version"
    with pytest.raises(FormatError, match="version 6 is not supported \\(this reader speaks 2, 3, 4 and 5\\)"):
        decode(GOOD[:3] + bytes([6]) + GOOD[4:])
    _same(decode(GOOD), decode(GOOD[:3] + bytes([4]) + GOOD[4:]))          # version 4 keeps the other layouts
    _same(decode(GOOD), decode(GOOD[:3] + bytes([5]) + GOOD[4:]))          # and so does version 5


@pytest.mark.parametrize("msg", [m for m in MESSAGES if not isinstance(m, (SparseRoundUpdate, CompressedUpdate))],
                         ids=lambda m: type(m).__name__)
def test_version_2_records_are_still_decoded(msg):
    raw = encode(msg)
    assert raw[3] == 3
    _same(msg, decode(raw[:3] + bytes([2]) + raw[4:]))     # types 1-6 kept their version-2 layout


def test_sparse_update_needs_version_3():
    raw = encode(MESSAGES[-2])
    with pytest.raises(FormatError, match="type 7 \\(SPARSE_UPDATE\\) needs version 3, the record says 2") as info:
        decode(raw[:3] + bytes([2]) + raw[4:])
    assert info.value.reason == "bad_type"


def test_compressed_update_layout_and_checks():
    """Version 4, type 8: fields round, worker; arrays clients, lengths, payloads (uint8, dtype code 3)."""
    msg = CompressedUpdate.pack(round=5, worker=3, clients=[4, 7], payloads=[b"\x01\x02\x03", None])
    raw = encode(msg)
    assert raw[:6] == MAGIC + bytes([4, 8, 3])
    assert struct.unpack_from("<qi", raw, 6) == (5, 3)
    assert struct.unpack_from("<BBI", raw, 18) == (2, 1, 2)          # clients int64 (2,)
    assert struct.unpack_from("<BBI", raw, 24) == (2, 1, 2)          # lengths int64 (2,)
    assert struct.unpack_from("<BBI", raw, 30) == (3, 1, 3)          # payloads uint8 (3,)
    assert raw[-3:] == b"\x01\x02\x03" and len(raw) == 36 + 16 + 16 + 3
    back = decode(raw)
    assert back.split() == [(4, b"\x01\x02\x03")] and back.n_participants == 1
    with pytest.raises(FormatError, match="type 8 \\(COMPRESSED_UPDATE\\) needs version 4, the record says 3"):
        decode(raw[:3] + bytes([3]) + raw[4:])
    short = bytearray(raw)
    struct.pack_into("<q", short, 52, 4)                               # lengths say 4 + 0 bytes, 3 are carried
    assert _reason(bytes(short)) == "shape_mismatch"
    assert _reason(raw[:-1]) == "truncated"
    with pytest.raises(FormatError, match="lengths must be ≥ 0"):
        encode(CompressedUpdate(round=1, worker=0, clients=np.array([0, 1]), lengths=np.array([-1, 1]),
                                payloads=np.zeros(0, np.uint8)))


def test_unknown_type():
    assert _reason(GOOD[:4] + bytes([13]) + GOOD[5:]) == "bad_type"
    assert _reason(GOOD[:4] + bytes([5]) + GOOD[5:]) == "bad_type"          # retired in version 2


@pytest.mark.parametrize("cut", [0, 2, 4, 7, 20, 30, len(GOOD) - 1])
def test_truncated(cut):
    assert _reason(GOOD[:cut]) == "truncated"


def test_trailing_bytes():
    assert _reason(GOOD + b"\x00") == "trailing_bytes"


def test_unknown_dtype_code():
    raw = bytearray(GOOD)
    raw[6 + 13] = 7                     # first descriptor's dtype code (after the 13 DATA field bytes)
    assert _reason(bytes(raw)) == "bad_dtype"


def test_int_array_where_float_expected():
    raw = bytearray(GOOD)
    raw[6 + 13] = 2                     # X declared int64: same size, wrong kind
    assert _reason(bytes(raw)) == "bad_dtype"


def test_shape_mismatch_between_X_and_y():
    raw = encode(Data(t=3, client=1, X=np.ones((2, 3)), y=np.zeros(2)))
    # y's descriptor: dims (2,) → (3,) and append 8 bytes so sizes stay consistent
    desc_y = 6 + 13 + 2 + 8             # after X's descriptor (code, ndim, 2 dims)
    assert struct.unpack_from("<BBI", raw, desc_y) == (1, 1, 2)
    bad = bytearray(raw)
    struct.pack_into("<I", bad, desc_y + 2, 3)
    assert _reason(bytes(bad) + bytes(8)) == "shape_mismatch"


def test_shape_mismatch_optimum_flag_without_array():
    raw = bytearray(encode(Data(t=3, client=1, X=np.ones((2, 3)), y=np.zeros(2))))
    raw[6 + 12] |= 2                    # claims an optimum that is not there
    assert _reason(bytes(raw)) == "shape_mismatch"


def test_loss_shape_mismatch_is_refused_on_encode_too():
    with pytest.raises(FormatError) as info:
        encode(Loss(t=1, worker=0, clients=np.array([0, 1]), losses=np.zeros(3), played=np.zeros((2, 1, 1))))
    assert info.value.reason == "shape_mismatch"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite(bad):
    model = np.array([[1.0], [bad]])
    raw = encode(Update(round=1, worker=0, clients=np.array([0]), model_sum=model))   # encode lets it through
    assert _reason(raw) == "non_finite"
    X = np.ones((2, 3))
    X[1, 2] = bad
    assert _reason(encode(Data(t=1, client=0, X=X, y=np.zeros(2)))) == "non_finite"


def test_bad_fields():
    raw = bytearray(encode(Global(round=1, model=np.zeros((1, 1)), n_participants=1)))
    struct.pack_into("<q", raw, 6, 0)
    assert _reason(bytes(raw)) == "bad_field"
    struct.pack_into("<qi", raw, 6, 1, -1)
    assert _reason(bytes(raw)) == "bad_field"
    with pytest.raises(FormatError) as info:
        encode(Update(round=0, worker=0, clients=np.array([0]), model_sum=np.zeros((1, 1))))
    assert info.value.reason == "bad_field"


def test_encode_rejects_other_objects():
    with pytest.raises(TypeError):
        encode({"t": 1})


def test_a_record_without_value_is_refused_with_a_reason():
    assert _reason(None) == "null_value"                    # a Kafka tombstone: no bytes at all


SPARSE = SparseRoundUpdate(round=2, worker=0, table=0, clients=np.array([7, 8]), n_samples=np.array([150, 170]),
                           n_rows=np.array([1, 1]), ids=np.array([0, 5]), rows=np.array([[0.007], [0.5]]),
                           counts=np.array([1, 2]))


def test_sparse_update_layout_and_size_grows_with_touched_rows_only():
    raw = encode(SPARSE)
    assert raw[:6] == MAGIC + bytes([3, MsgType.SPARSE_UPDATE, 6])
    assert struct.unpack_from("<qii", raw, 6) == (2, 0, 0)
    descriptors = 5 * (2 + 4) + (2 + 8)                     # five 1-D arrays and one 2-D array
    assert len(raw) == 6 + 16 + descriptors + 8 * (2 + 2 + 2 + 2 + 2 + 2)
    wider = SparseRoundUpdate(round=2, worker=0, table=0, clients=np.array([7]), n_samples=np.array([1]),
                              n_rows=np.array([3]), ids=np.array([1, 2, 10**9]), rows=np.ones((3, 1)),
                              counts=np.ones(3, np.int64))
    assert len(encode(wider)) - 6 - 16 - descriptors == 8 * (1 + 1 + 1 + 3 + 3 + 3)    # ids up to 1e9 cost nothing more


def test_sparse_update_round_trip_through_the_aggregation_round():
    """The worker's SparseRound → record → aggregator's SparseRound gives the same rule output (FedNCF's example)."""
    r = SparseRound.from_updates([
        SparseUpdate(ids=np.array([5, 0]), rows=np.array([[0.5], [0.007]]), counts=np.array([2, 1]), n_samples=150),
        SparseUpdate(ids=np.array([], dtype=np.int64), rows=np.zeros((0, 1)), counts=np.array([], dtype=np.int64),
                     n_samples=170)])
    msg = SparseRoundUpdate.from_round(r, round=3, worker=1, clients=[11, 12])
    back = decode(encode(msg))
    assert back.n_rows.tolist() == [2, 0] and back.clients.tolist() == [11, 12]
    r2 = back.to_round()
    assert np.array_equal(mf_fedavg(r2).rows, mf_fedavg(r).rows)
    assert 0.04 + mf_fedavg(r2).rows[0, 0] == pytest.approx(0.047, abs=1e-15)


def _sparse_raw(**change):
    fields = dict(vars(SPARSE))
    fields.update(change)
    return encode(SparseRoundUpdate(**fields))


def test_malformed_sparse_updates_are_refused_with_a_reason():
    with pytest.raises(FormatError, match="n_rows sum to 3 but 2 rows are carried") as info:
        _sparse_raw(n_rows=np.array([1, 2]))
    assert info.value.reason == "shape_mismatch"
    with pytest.raises(FormatError, match="SPARSE_UPDATE counts must be \\(2,\\), got \\(1,\\)"):
        _sparse_raw(counts=np.array([1]))
    with pytest.raises(FormatError, match="rows must be \\(2, k\\) with k ≥ 1"):
        _sparse_raw(rows=np.zeros((2, 0)))
    assert _reason(_sparse_raw(ids=np.array([-1, 5]))) == "bad_field"
    assert _reason(_sparse_raw(counts=np.array([1, -2]))) == "bad_field"
    assert _reason(_sparse_raw(clients=np.array([7, 7]))) == "bad_field"
    assert _reason(_sparse_raw(n_rows=np.array([2, 0]), ids=np.array([5, 5]))) == "bad_field"   # one client, row 5 twice
    _same(decode(_sparse_raw(n_rows=np.array([1, 1]), ids=np.array([5, 5]))),     # two clients may share a row
          SparseRoundUpdate(**{**vars(SPARSE), "ids": np.array([5, 5])}))
    assert _reason(_sparse_raw(rows=np.array([[np.nan], [0.0]]))) == "non_finite"
    raw = bytearray(encode(SPARSE))
    struct.pack_into("<i", raw, 18, -1)                    # table
    assert _reason(bytes(raw)) == "bad_field"


# ---- version 5: the streaming GMF records ---------------------------------------------------------------------
from streamfl.transport.format import GMFGlobal, GMFState, GMFUpdate, RankedLoss  # noqa: E402

GMF_MESSAGES = [
    RankedLoss(t=7, worker=1, clients=np.array([3, 0]), losses=np.array([0.7, 0.0]), ranks=np.array([12, 0]),
               negatives=np.array([[5, 9, 1, 2], [-1, -1, -1, -1]])),
    GMFUpdate(round=2, worker=0, table=0, clients=np.array([4, 8]), n_samples=np.array([3, 0]),
              n_rows=np.array([2, 0]), ids=np.array([17, 3]), rows=rng.standard_normal((2, 5)),
              counts=np.array([1, 4]), h=rng.standard_normal((2, 5)), b=np.array([0.5, -0.25])),
    GMFGlobal(round=3, n_participants=2, ids=np.array([3, 17]), rows=rng.standard_normal((2, 5)),
              h=rng.standard_normal(5), b=np.array([0.125])),
    GMFGlobal(round=4, n_participants=0, ids=np.zeros(0, np.int64), rows=np.zeros((0, 5)), h=np.zeros(5),
              b=np.zeros(1)),
    GMFState(client=6, t=30, offset=29, loss_offset=11, p=rng.standard_normal(5), h=rng.standard_normal(5),
             b=np.array([-0.0]), seen=np.array([0, 4, 1681])),
]


@pytest.mark.parametrize("msg", GMF_MESSAGES, ids=lambda m: type(m).__name__)
def test_gmf_records_round_trip_at_version_5_and_are_refused_at_4(msg):
    raw = encode(msg)
    assert raw[:5] == MAGIC + bytes([5, int({RankedLoss: 9, GMFUpdate: 10, GMFGlobal: 11, GMFState: 12}[type(msg)])])
    _same(msg, decode(raw))
    with pytest.raises(FormatError, match=f"type {raw[4]} \\({MsgType(raw[4]).name}\\) needs version 5, the record "
                                          f"says 4") as info:
        decode(raw[:3] + bytes([4]) + raw[4:])          # a version-4 reader never wrote these types
    assert info.value.reason == "bad_type"


def test_gmf_update_is_the_sparse_layout_followed_by_h_and_b():
    msg = GMF_MESSAGES[1]
    raw = encode(msg)
    assert struct.unpack_from("<qiB", raw, 6)[:2] == (2, 0) and raw[5] == 8          # round, worker; 8 arrays
    sparse = SparseRoundUpdate(**{f: getattr(msg, f) for f in SparseRoundUpdate.__dataclass_fields__})
    assert decode(raw).to_round().ids.tolist() == sparse.to_round().ids.tolist() == [17, 3]
    assert decode(raw).n_participants == 1


def test_malformed_gmf_records_are_refused_with_a_reason():
    u = GMF_MESSAGES[1]
    with pytest.raises(FormatError, match="GMF_UPDATE h must be \\(2, 5\\) and b \\(2,\\), got \\(2, 4\\)") as info:
        encode(GMFUpdate(**{**vars(u), "h": np.zeros((2, 4))}))
    assert info.value.reason == "shape_mismatch"
    with pytest.raises(FormatError, match="GMF_UPDATE n_rows sum to 3 but 2 rows are carried"):
        encode(GMFUpdate(**{**vars(u), "n_rows": np.array([2, 1])}))
    assert _reason(encode(GMFUpdate(**{**vars(u), "ids": np.array([-4, 3])}))) == "bad_field"
    assert _reason(encode(GMFUpdate(**{**vars(u), "b": np.array([np.inf, 0.0])}))) == "non_finite"
    loss = GMF_MESSAGES[0]
    assert _reason(encode(RankedLoss(**{**vars(loss), "clients": np.array([3, 3])}))) == "bad_field"
    assert _reason(encode(RankedLoss(**{**vars(loss), "negatives": np.array([[5, 9, 1, -2], [0, 0, 0, 0]])}))) \
        == "bad_field"
    with pytest.raises(FormatError, match="RANKED_LOSS negatives must be \\(2, N\\)"):
        encode(RankedLoss(**{**vars(loss), "negatives": np.zeros(2, np.int64)}))
    g = GMF_MESSAGES[2]
    assert _reason(encode(GMFGlobal(**{**vars(g), "ids": np.array([17, 3])}))) == "bad_field"     # not sorted
    with pytest.raises(FormatError, match="GMF_GLOBAL needs ids \\(u,\\), rows \\(u, D\\), h \\(D,\\) and b \\(1,\\)"):
        encode(GMFGlobal(**{**vars(g), "b": np.zeros(2)}))
    st = GMF_MESSAGES[4]
    assert _reason(encode(GMFState(**{**vars(st), "seen": np.array([4, 4])}))) == "bad_field"
    with pytest.raises(FormatError, match="GMF_STATE needs p \\(D,\\), h \\(D,\\)"):
        encode(GMFState(**{**vars(st), "h": np.zeros(4)}))
