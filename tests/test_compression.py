"""Compressors: unbiasedness, error bounds, round trips, saturation, nearest lattice point, top-k ties, bytes."""

import math

import numpy as np
import pytest

from streamfl.compression import (ErrorFeedback, HexagonalLatticeQuantizer, NoCompression, TopK,
                                  UniformScalarQuantizer, dither_key, make_compressor, nearest_hex_point)
from streamfl.compression.bitpack import unpack_codes
from streamfl.compression.lattice import hex_point

KEYS = [dither_key(0, 1, r) for r in range(4000)]


def _mean_decoded(q, x, keys=KEYS):
    X = np.tile(x, (len(keys), 1))
    return q.decode_batch(q.encode_batch(X, keys), keys)


@pytest.mark.parametrize("bits", [2, 3])
def test_scalar_quantizer_with_dither_is_unbiased(bits):
    # E[Q(x)] = x: error is uniform on [−Δ/2, Δ/2], so over N draws the mean error has standard
    # error Δ/√(12N); tolerance 5 standard errors, over points that include both ends of the range.
    q = UniformScalarQuantizer(bits, range=(-1.0, 1.0))
    x = np.concatenate([[-1.0, 1.0, 0.0, 0.1, -0.77], np.linspace(-1, 1, 37)])
    Y = _mean_decoded(q, x)
    se = q.step() / math.sqrt(12 * len(KEYS))
    assert np.max(np.abs(Y.mean(axis=0) - x)) < 5 * se
    assert np.var(Y - x) == pytest.approx(q.step() ** 2 / 12, rel=0.05)     # Var = Δ²/12
    # without dither the same quantizer is biased at 0.1 (it always returns the level 1/3 for b = 2)
    plain = UniformScalarQuantizer(2, range=(-1.0, 1.0), dither=False)
    assert plain.decode(plain.encode([0.1]))[0] == pytest.approx(1 / 3)


@pytest.mark.parametrize("bits", [2, 3])
def test_lattice_quantizer_with_dither_is_unbiased(bits):
    # per-component error variance of the uniform hexagon is 5a²/72; tolerance 5 standard errors
    q = HexagonalLatticeQuantizer(bits, range=(-1.0, 1.0))
    x = np.array([-1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 0.3, -0.6, 0.0, 0.05, 0.99, -0.2, 0.5])
    Y = _mean_decoded(q, x)
    sd = q.scale() * math.sqrt(5 / 72)
    assert np.max(np.abs(Y.mean(axis=0) - x)) < 5 * sd / math.sqrt(len(KEYS))
    assert np.var(Y - x) == pytest.approx(sd ** 2, rel=0.05)


def test_scalar_error_within_half_a_step_of_the_clipped_input():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, 5000)
    for bits in (1, 2, 3, 4, 8):
        for dither in (True, False):
            q = UniformScalarQuantizer(bits, range=(-1.0, 1.0), dither=dither)
            y = q.decode(q.encode(x, (3,)), (3,))
            assert np.max(np.abs(y - np.clip(x, -1, 1))) <= q.step() / 2 + 1e-12
    # scale by max: the range is [−s, s] with s = max |x|; s travels in the payload (4 bytes)
    q = UniformScalarQuantizer(3, range=None)
    y = q.decode(q.encode(x, (4,)), (4,))
    assert np.max(np.abs(y - x)) <= q.step(np.abs(x).max()) / 2 + 1e-6
    assert len(q.encode(x, (4,))) == len(UniformScalarQuantizer(3).encode(x, (4,))) + 4


def test_lattice_error_within_the_circumradius():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1.5, 1.5, 6000)
    for bits in (1, 2, 3, 4):
        for dither in (True, False):
            q = HexagonalLatticeQuantizer(bits, range=(-1.0, 1.0), dither=dither)
            e = (q.decode(q.encode(x, (5,)), (5,)) - np.clip(x, -1, 1)).reshape(-1, 2)
            assert np.max(np.hypot(e[:, 0], e[:, 1])) <= q.scale() / math.sqrt(3) + 1e-12
            assert np.max(np.abs(e[:, 0])) <= q.scale() / 2 + 1e-12


def test_nearest_hex_point_equals_brute_force():
    rng = np.random.default_rng(3)
    P = rng.uniform(-12, 12, (5000, 2))
    for a in (1.0, 0.37):
        i, j = nearest_hex_point(P * a, a)
        ii, jj = np.meshgrid(np.arange(-20, 21), np.arange(-20, 21), indexing="ij")
        lattice = hex_point(ii.ravel(), jj.ravel(), a)                        # 1681 lattice points
        d = ((P[:, None, :] * a - lattice[None]) ** 2).sum(-1)
        best = d.argmin(axis=1)
        assert np.array_equal(i, ii.ravel()[best]) and np.array_equal(j, jj.ravel()[best])


def test_lattice_codeword_is_the_nearest_of_the_codebook():
    # undithered: decode(encode(x)) is the nearest of the 2^{2b} codewords, found by brute force
    q = HexagonalLatticeQuantizer(2, range=(-1.0, 1.0), dither=False)
    book = q.codebook()
    assert book.shape == (16, 2)
    x = np.random.default_rng(4).uniform(-1, 1, (3000, 2))
    y = q.decode(q.encode(x)).reshape(-1, 2)
    brute = book[((x[:, None, :] - book[None]) ** 2).sum(-1).argmin(axis=1)]
    assert np.allclose(y, brute, atol=1e-12)


def test_out_of_range_values_saturate_and_never_wrap():
    x = [1.5, -3.0, 1.0]
    plain = UniformScalarQuantizer(2, range=(-1.0, 1.0), dither=False)
    assert plain.decode(plain.encode(x)).tolist() == [1.0, -1.0, 1.0]
    # with dither the codes are still the end levels (3, 0, 3) for every key: the range's maximum is the top level
    q = UniformScalarQuantizer(2, range=(-1.0, 1.0))
    for key in KEYS[:200]:
        payload = q.encode(x, key)
        assert unpack_codes(payload[5:], 3, 2).tolist() == [3, 0, 3]
        assert np.max(np.abs(q.decode(payload, key) - [1.0, -1.0, 1.0])) <= q.step() / 2
    lat = HexagonalLatticeQuantizer(2, range=(-1.0, 1.0), dither=False)
    y = lat.decode(lat.encode([1.5, -3.0, 9.0, 9.0]))
    assert np.hypot(*(y[:2] - [1, -1])) <= lat.scale() / math.sqrt(3)
    assert np.hypot(*(y[2:] - [1, 1])) <= lat.scale() / math.sqrt(3)


def test_round_trips_keep_shape_and_exact_values():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    assert np.array_equal(NoCompression().decode(NoCompression().encode(x)), x)
    x64 = rng.normal(size=(7,))
    assert np.array_equal(NoCompression("float64").decode(NoCompression("float64").encode(x64)), x64)
    # levels themselves are reproduced exactly by the undithered quantizers; top-k with k = P is lossless
    levels = np.linspace(-1, 1, 8)
    q = UniformScalarQuantizer(3, dither=False)
    assert np.allclose(q.decode(q.encode(levels.reshape(2, 4))), levels.reshape(2, 4), atol=1e-15)
    assert np.array_equal(TopK(32).decode(TopK(32).encode(x)), x)
    lat = HexagonalLatticeQuantizer(3, dither=False)
    book = lat.codebook()
    inside = book[np.all(np.abs(book) <= 1, axis=1)].ravel()      # codewords outside the range get clipped
    assert inside.size >= 60
    assert np.allclose(lat.decode(lat.encode(inside)), inside, atol=1e-12)
    for c in (UniformScalarQuantizer(2), HexagonalLatticeQuantizer(2), TopK(4, axis=-1)):
        assert c.decode(c.encode(x, (1, 2, 3)), (1, 2, 3)).shape == (3, 4, 5)


def test_the_decoder_needs_the_encoders_key():
    q = UniformScalarQuantizer(3)
    x = np.linspace(-1, 1, 50)
    p = q.encode(x, dither_key(9, 2, 7))
    assert np.array_equal(q.decode(p, (9, 2, 7)), q.decode(p, (9, 2, 7)))
    assert not np.allclose(q.decode(p, (9, 2, 8)), q.decode(p, (9, 2, 7)))
    with pytest.raises(ValueError, match="needs a dither key"):
        q.encode(x)


def test_decoding_another_compressors_payload_is_refused():
    p = UniformScalarQuantizer(3).encode([0.1], (1,))
    with pytest.raises(ValueError, match="kind 1 with b=3; this decoder is lattice"):
        HexagonalLatticeQuantizer(3).decode(p, (1,))
    with pytest.raises(ValueError, match="with b=3; this decoder is scalar .* with b=2"):
        UniformScalarQuantizer(2).decode(p, (1,))
    with pytest.raises(ValueError, match="holds 0 bytes where 1 codes of 3 bits need 1"):
        UniformScalarQuantizer(3).decode(p[:-1], (1,))
    with pytest.raises(ValueError, match="1 non-finite value"):
        TopK(2).encode([1.0, float("nan")])


def test_topk_keeps_largest_magnitudes_and_breaks_ties_by_lower_index():
    t = TopK(13)                                   # k = ⌊5·13/32⌋ = 2
    assert t.k(5) == 2
    assert t.decode(t.encode([3.0, -5.0, 3.0, 3.0, 1.0])).tolist() == [3.0, -5.0, 0.0, 0.0, 0.0]
    assert TopK(2).decode(TopK(2).encode([-9.0, 1.0, 2.0])).tolist() == [-9.0, 0.0, 0.0]
    rows = TopK(8, axis=-1)                        # k = 1 of 4 in each row
    X = np.array([[1.0, -2.0, 0.5, 2.0], [0.0, 0.0, 0.0, -0.1]])
    assert rows.decode(rows.encode(X)).tolist() == [[0.0, -2.0, 0.0, 0.0], [0.0, 0.0, 0.0, float(np.float32(-0.1))]]


def test_error_feedback_residual_is_input_minus_sent():
    rng = np.random.default_rng(6)
    for inner in (TopK(4), UniformScalarQuantizer(2, range=None)):
        ef = ErrorFeedback(inner)
        total_in = total_sent = 0.0
        residual = np.zeros(64)
        for r in range(30):
            x = rng.normal(size=64)
            key = (0, 1, r) if inner.dithered else None
            sent = inner.decode(ef.encode(x, key), key)
            assert np.array_equal(ef.residual, (x + residual) - sent)
            residual = ef.residual
            total_in, total_sent = total_in + x, total_sent + sent
        # telescoping: everything put in was sent, or is still in the residual
        assert np.allclose(total_sent + ef.residual, total_in, atol=1e-12)
    # M senders at once, each with its own memory
    ef = ErrorFeedback(TopK(8))
    X = rng.normal(size=(3, 16))
    sent = TopK(8).decode_batch(ef.encode_batch(X))
    assert np.array_equal(ef.residual, X - sent)


def test_payload_bytes_are_header_plus_packed_body():
    x = np.random.default_rng(7).uniform(-1, 1, (64, 16))
    header = 4 + 1 + 1                             # version, kind, b, ndim + two one-byte dimensions
    assert len(NoCompression().encode(x)) == header + 64 * 16 * 4
    assert len(UniformScalarQuantizer(2).encode(x, (0,))) == header + 64 * 16 * 2 // 8
    assert len(UniformScalarQuantizer(3).encode(x, (0,))) == header + 64 * 16 * 3 // 8
    assert len(UniformScalarQuantizer(3, range=None).encode(x, (0,))) == header + 4 + 64 * 16 * 3 // 8
    assert len(HexagonalLatticeQuantizer(3).encode(x, (0,))) == header + 512 * 6 // 8
    assert len(HexagonalLatticeQuantizer(2).encode(np.zeros(5), (0,))) == 5 + 2          # 3 pairs of 4 bits: 12 bits
    assert len(TopK(2, axis=-1).encode(x)) == header + 64 * 4 // 8 + 64 * 4               # k = 1 per row
    assert len(TopK(2).encode(x)) == header + math.ceil(64 * 10 / 8) + 64 * 4             # k = 64, 10-bit indices


def test_batch_encoding_equals_encoding_each_sender():
    X = np.random.default_rng(8).normal(size=(5, 3, 7))
    keys = [dither_key(1, m, 4) for m in range(5)]
    for c in (UniformScalarQuantizer(3, range=None), HexagonalLatticeQuantizer(2, range=(-2, 2)),
              TopK(5, axis=-1), NoCompression()):
        ks = keys if c.dithered else [None] * 5
        batch = c.encode_batch(X, ks)
        assert batch == [c.encode(X[m], ks[m]) for m in range(5)]
        assert np.array_equal(c.decode_batch(batch, ks), np.stack([c.decode(p, k) for p, k in zip(batch, ks)]))


def test_make_compressor_refuses_unknown_kinds():
    with pytest.raises(ValueError, match="compressor must be one of none, scalar, lattice, topk; got 'zip'"):
        make_compressor("zip", 2)
    with pytest.raises(ValueError, match=r"scalar quantizer bits must be an integer in \[1, 16\], got 0"):
        UniformScalarQuantizer(0)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1.0])
def test_a_payload_whose_scale_is_not_a_finite_max_is_refused(scale):
    """A NaN scale used to decode silently to zeros (the level step NaN failed the step > 0 test)."""
    import struct
    for c in (UniformScalarQuantizer(2, range=None), HexagonalLatticeQuantizer(2, range=None)):
        p = bytearray(c.encode(np.ones(4), (1, 2, 3)))
        struct.pack_into("<f", p, 5, scale)                 # 5-byte header of a 1-D array, then the scale
        with pytest.raises(ValueError, match=f"payload carries the scale {scale}; a scale is a finite max"):
            c.decode(bytes(p), (1, 2, 3))
