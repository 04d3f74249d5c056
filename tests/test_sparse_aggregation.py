"""Sparse aggregation rules: hand-computed values, FedSubAvg's unbiasedness, equivalence with dense FedAvg."""

from itertools import combinations

import numpy as np
import pytest

from streamfl.aggregation import weighted_average
from streamfl.aggregation.sparse import (SparseRound, SparseRows, SparseUpdate, apply_rows, fedavg, fedsubavg,
                                         mf_fedavg, row_heat, segment_sum, simple_avg)


def upd(ids, rows, n_samples, counts=None):
    ids = np.asarray(ids, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.float64)
    rows = rows.reshape(len(ids), -1) if rows.size else rows.reshape(0, rows.shape[-1] if rows.ndim == 2 else 1)
    counts = np.ones(len(ids), np.int64) if counts is None else np.asarray(counts, np.int64)
    return SparseUpdate(ids=ids, rows=rows, counts=counts, n_samples=n_samples)


def empty(n_samples, k=1):
    return upd([], np.zeros((0, k)), n_samples)


def test_fedncf_two_client_example():
    """FedNCF §3.2: item at 0.04, P1 (150 items) moves it to 0.047, P2 (170 items) never touches it."""
    r = SparseRound.from_updates([upd([0], [0.047 - 0.04], 150), empty(170)])
    table = np.array([[0.04]])
    new = lambda delta: apply_rows(table.copy(), delta)[0, 0]
    assert new(fedavg(r, "samples")) == pytest.approx(0.04 + 150 / 320 * 0.007, abs=1e-15)     # 0.04328125
    assert round(new(fedavg(r, "samples")), 4) == 0.0433                                      # the paper's figure
    assert new(simple_avg(r)) == pytest.approx(0.0435, abs=1e-15)
    assert new(fedavg(r, "uniform")) == pytest.approx(0.0435, abs=1e-15)
    assert new(mf_fedavg(r)) == pytest.approx(0.047, abs=1e-15)
    # FedSubAvg with both clients taking part: heat of the item = 1 client of N = 2
    assert new(fedsubavg(r, heat=np.array([1.0]), population=2)) == pytest.approx(0.047, abs=1e-15)


@pytest.mark.parametrize("c", [1, 2, 5])
def test_l2_example_same_update_from_1_2_5_clients(c):
    """One local SGD step on row 3 with L2 penalty λ = 0.1 on the touched row only: e' = e − η (g + λ e).

    e = (0.04, −0.02), g = (−0.5, 0.3), η = 0.1:
    e' = (0.04 + 0.1·0.496, −0.02 − 0.1·0.298) = (0.0896, −0.0498), Δ = (0.0496, −0.0298).
    Whether 1, 2 or 5 of the N = 5 clients send this update, the per-row rules give e' exactly;
    rows nobody touched are not visited (no L2 shrinkage reaches them).
    """
    table = np.arange(12.0).reshape(6, 2) / 10
    table[3] = [0.04, -0.02]
    before = table.copy()
    delta = np.array([0.0496, -0.0298])
    updates = [upd([3], [delta], 7) for _ in range(c)] + [empty(7, 2) for _ in range(5 - c)]
    r = SparseRound.from_updates(updates)
    for rule in (lambda r: mf_fedavg(r), lambda r: fedsubavg(r, row_heat(r, 6), population=5)):
        after = apply_rows(table.copy(), rule(r))
        np.testing.assert_allclose(after[3], [0.0896, -0.0498], rtol=0, atol=1e-15)
        untouched = np.arange(6) != 3
        assert np.array_equal(after[untouched], before[untouched])
    # plain FedAvg dilutes the same update by the c/5 clients that sent it
    np.testing.assert_allclose(apply_rows(table.copy(), fedavg(r, "uniform"))[3],
                               [0.04 + c / 5 * 0.0496, -0.02 - c / 5 * 0.0298], atol=1e-15)


def _dense(r: SparseRound, n_rows: int) -> np.ndarray:
    """Each client's full delta table, (K, n_rows, k): zero at untouched rows."""
    D = np.zeros((r.n_clients, n_rows, r.width))
    D[r.client, r.ids] = r.rows
    return D


def _random_round(rng, K=6, n_rows=30, k=3):
    ups = []
    for _ in range(K):
        n = int(rng.integers(0, 8))
        ids = rng.choice(n_rows, n, replace=False)
        ups.append(upd(ids, rng.standard_normal((n, k)), int(rng.integers(1, 50)), rng.integers(1, 9, n)))
    return SparseRound.from_updates(ups, width=k)


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_sparse_fedavg_equals_dense_fedavg(weighting):
    rng = np.random.default_rng(1)
    r = _random_round(rng)
    D = _dense(r, 30)
    want = weighted_average(D, None if weighting == "uniform" else r.n_samples.astype(float))
    got = np.zeros((30, 3))
    apply_rows(got, fedavg(r, weighting))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


def test_mf_fedavg_is_the_mean_over_clients_that_touched_the_row():
    rng = np.random.default_rng(2)
    r = _random_round(rng)
    D, touched = _dense(r, 30), np.zeros((r.n_clients, 30), bool)
    touched[r.client, r.ids] = True
    out = mf_fedavg(r)
    assert np.array_equal(out.ids, np.flatnonzero(touched.any(axis=0)))
    want = D.sum(axis=0)[out.ids] / touched.sum(axis=0)[out.ids, None]
    np.testing.assert_allclose(out.rows, want, atol=1e-14)
    # fedsubavg with the heat of the round itself and N = K is the same rule
    np.testing.assert_allclose(fedsubavg(r, row_heat(r, 30), population=r.n_clients).rows, out.rows, atol=1e-14)


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_fedsubavg_is_unbiased_over_client_sampling(weighting):
    """Exact expectation over all C(6, 3) rounds: the mean of the involving clients' updates (paper 000)."""
    rng = np.random.default_rng(3)
    population = _random_round(rng, K=6, n_rows=12, k=2)
    heat = row_heat(population, 12, weighting)
    clients = population.updates()
    w = np.ones(6) if weighting == "uniform" else population.n_samples.astype(float)
    D = _dense(population, 12)
    involved = heat > 0
    want = np.tensordot(w, D, axes=1)[involved] / heat[involved, None]
    fedavg_want = np.tensordot(w, D, axes=1)[involved] / w.sum()
    sub, avg = np.zeros((12, 2)), np.zeros((12, 2))
    subsets = list(combinations(range(6), 3))
    for S in subsets:
        r = SparseRound.from_updates([clients[i] for i in S], width=2)
        apply_rows(sub, fedsubavg(r, heat, population=6, weighting=weighting), 1 / len(subsets))
        apply_rows(avg, fedavg(r, weighting), 1 / len(subsets))
    np.testing.assert_allclose(sub[involved], want, atol=1e-13)
    assert np.array_equal(sub[~involved], np.zeros_like(sub[~involved]))
    if weighting == "uniform":                # FedAvg: the same mean shrunk by the row's heat / N
        np.testing.assert_allclose(avg[involved], fedavg_want, atol=1e-13)
        np.testing.assert_allclose(avg[involved], want * (heat[involved, None] / 6), atol=1e-13)


def test_segment_sum_and_empty_rounds():
    ids, sums = segment_sum(np.array([4, 1, 4, 4]), np.array([[1.0, 0], [2, 1], [3, 0], [5, 5]]))
    assert ids.tolist() == [1, 4] and sums.tolist() == [[2, 1], [9, 5]]
    r = SparseRound.from_updates([], width=2)
    for out in (fedavg(r), simple_avg(r), mf_fedavg(r), fedsubavg(r, np.ones(3), population=4)):
        assert out.ids.shape == (0,) and out.rows.shape == (0, 2)
    table = np.ones((3, 2))
    assert np.array_equal(apply_rows(table, fedavg(r)), np.ones((3, 2)))
    silent = SparseRound.from_updates([empty(0, 2), empty(0, 2)])
    assert fedavg(silent, "samples").ids.size == 0        # nobody learned anything: keep the table


def test_round_splits_back_into_client_updates():
    rng = np.random.default_rng(4)
    r = _random_round(rng)
    back = SparseRound.from_updates(r.updates(), width=r.width)
    for a, b in zip(vars(r).values(), vars(back).values()):
        assert np.array_equal(a, b)


def test_bad_input_is_refused_with_the_field_named():
    with pytest.raises(ValueError, match="sends row 2 twice"):
        SparseRound.from_updates([upd([1, 2, 2], np.zeros((3, 1)), 1)])
    with pytest.raises(ValueError, match="Row id 9 is outside the table"):
        SparseRound.from_updates([upd([9], [[0.0]], 1)]).validate(n_rows=5)
    r = SparseRound.from_updates([upd([0, 1], [[1.0], [1.0]], 1)])
    with pytest.raises(ValueError, match="Row 1 was touched in the round but its heat is 0.0"):
        fedsubavg(r, np.array([1.0, 0.0]), population=3)
    with pytest.raises(ValueError, match="population N = 0 is smaller than the round's K = 1"):
        fedsubavg(r, np.ones(2), population=0)
    with pytest.raises(ValueError, match=r"The 'weighting' parameter must be one of \['uniform', 'samples'\]. Got 'mean'"):
        fedavg(r, "mean")
    with pytest.raises(ValueError, match="must be 'clients' or 'row_samples'"):
        mf_fedavg(r, "uniform")
    with pytest.raises(ValueError, match="empty round needs its row width"):
        SparseRound.from_updates([])
    assert isinstance(fedavg(r), SparseRows)
