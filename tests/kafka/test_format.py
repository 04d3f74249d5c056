"""The binary wire format: exact round trips and one reason per malformed case (no broker needed)."""

import struct

import numpy as np
import pytest

from streamfl.transport.format import (MAGIC, Data, FormatError, Global, Loss, MsgType, Update, decode, encode)

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
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_is_exact(msg):
    back = decode(encode(msg))
    _same(msg, back)
    back_arrays = [v for v in vars(back).values() if isinstance(v, np.ndarray)]
    assert all(a.flags.writeable for a in back_arrays)


def test_header_layout():
    raw = encode(Update(round=5, worker=3, clients=np.array([4, 7]), model_sum=np.zeros((2, 1)), n_participants=2))
    assert raw[:3] == MAGIC and raw[3] == 2 and raw[4] == MsgType.UPDATE and raw[5] == 2
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
    assert _reason(GOOD[:3] + bytes([3]) + GOOD[4:]) == "bad_version"


def test_unknown_type():
    assert _reason(GOOD[:4] + bytes([9]) + GOOD[5:]) == "bad_type"
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
