"""FedSubAvg on a drifting sparse stream: the generator, sparse logistic clients, and the round counts."""

import numpy as np
import pytest

from streamfl.aggregation.sparse import apply_rows, mf_fedavg
from streamfl.evaluation import roc_auc
from streamfl.generators.sparse_features import SparsePowerLawStream
from streamfl.models.sparse_logistic import local_sgd
from streamfl.runtime.fedsubavg import SubAvgSettings, run_rules

SMALL = dict(n_clients=100, n_features=1000, nnz=4, batch_size=4, hot=5, drift_period=50, drift_swaps=3)


def test_heat_follows_the_power_law_and_drifts():
    s = SparsePowerLawStream(n_steps=200, seed=0, **SMALL)
    np.testing.assert_allclose(s.heat_of_rank()[[0, 4, 9, 49]], [1.0, 1.0, 0.5, 0.1])   # min(1, (5/r)^1)
    clients_per_feature = s.involvement(s.ranks_at(0)).sum(axis=0)
    hottest = np.argsort(s.ranks_at(0))[:5]
    assert (clients_per_feature[hottest] == 100).all()            # involved by every client
    assert np.median(clients_per_feature) <= 1                     # most features are cold
    moved = (s.ranks_at(50) != s.ranks_at(0)).sum()
    assert moved == 2 * 3                                          # one drift event: 3 exchanged pairs
    assert (s.ranks_at(49) == s.ranks_at(0)).all()


def test_stream_is_replayable_and_samples_only_involved_features():
    s = SparsePowerLawStream(n_steps=60, seed=3, **SMALL)
    a, b = list(s.chunks(16)), list(s.chunks(16))
    assert all((x.ids == y.ids).all() and (x.y == y.y).all() for x, y in zip(a, b))
    ids = np.concatenate([c.ids for c in a])                      # (60, M, b, nnz)
    assert ids.shape == (60, 100, 4, 4)
    srt = np.sort(ids, axis=-1)
    assert (np.diff(srt, axis=-1) > 0).all()                       # distinct features within a sample
    involved = s.involvement(s.ranks_at(0))
    m = np.broadcast_to(np.arange(100)[None, :, None, None], ids[:50].shape)
    assert involved[m, ids[:50]].all()                             # before the first drift event (t = 50)


def test_local_sgd_sends_only_touched_rows_with_counts():
    w = np.zeros(10)
    ids = np.array([[[[1, 2], [2, 3]]], [[[7, 8], [7, 9]]]])      # K = 2 clients, 1 step, 2 samples each
    y = np.array([[[1.0, 0.0]], [[1.0, 1.0]]])
    upd, db, loss = local_sgd(w, 0.0, ids, y, lr=1.0)
    assert upd.client.tolist() == [0, 0, 0, 1, 1, 1] and upd.ids.tolist() == [1, 2, 3, 7, 8, 9]
    assert upd.counts.tolist() == [1, 2, 1, 2, 1, 1]
    # z = 0 everywhere: per-sample gradient (σ(0) − y)/b = ∓¼; feature 2 gets both samples of client 0
    np.testing.assert_allclose(upd.rows.ravel(), [0.25, 0.0, -0.25, 0.5, 0.25, 0.25])
    np.testing.assert_allclose(db, [0.0, 0.5])
    np.testing.assert_allclose(loss, [np.log(2), np.log(2)])


def test_l2_touches_only_used_rows():
    w = np.full(5, 0.5)
    upd, _, _ = local_sgd(w, 0.0, np.array([[[[0, 1]]]]), np.array([[[1.0]]]), lr=0.1, l2=0.1)
    z = 1.0                                                        # b + w_0 + w_1
    g = 1 / (1 + np.exp(-z)) - 1
    np.testing.assert_allclose(upd.rows.ravel(), [-0.1 * (g + 0.1 * 0.5)] * 2)
    table = np.full((5, 1), 0.5)
    apply_rows(table, mf_fedavg(upd))
    assert (table[2:] == 0.5).all()                                # untouched rows unchanged


def test_fedsubavg_reaches_the_target_auc_in_fewer_rounds_than_fedavg():
    settings = SubAvgSettings(rounds=90, lr=0.3, clients_per_round=10, local_steps=3, eval_every=2,
                              test_per_client=10, target_auc=0.78)
    stream = SparsePowerLawStream(n_steps=270, seed=0, **SMALL)
    res = run_rules(stream, settings, seed=0)
    sub, avg = res["fedsubavg"]["rounds_to_target"], res["fedavg"]["rounds_to_target"]
    assert sub is not None and avg is not None
    assert (sub, avg) == (38, 82)
    assert sub < avg


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="clients_per_round K = 200 exceeds the stream's N = 100"):
        run_rules(SparsePowerLawStream(n_steps=10, **SMALL), SubAvgSettings(clients_per_round=200, rounds=1, local_steps=1))
    with pytest.raises(ValueError, match="The 'hot' parameter of SparsePowerLawStream must be in \\[nnz, n_features\\]"):
        SparsePowerLawStream(nnz=5, hot=2)
    with pytest.raises(ValueError, match="The rule must be one of"):
        run_rules(SparsePowerLawStream(n_steps=10, **SMALL), SubAvgSettings(rounds=1, local_steps=1), rules=("fedprox",))


def test_auc_is_exact_on_a_hand_example():
    assert roc_auc(np.array([3.0, 1.0, 2.0, 2.0]), np.array([1, 0, 0, 1])) == pytest.approx(0.875)
    with pytest.raises(ValueError, match="needs both classes"):
        roc_auc(np.ones(3), np.ones(3))
