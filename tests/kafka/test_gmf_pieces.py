"""The Kafka roles' streaming GMF logic without a broker: workers holding subsets of the clients, stepping
them at different times, uploading GMF_UPDATEs and loading GMF_GLOBALs, give the embedded learner's numbers
bit for bit; the aggregator's and tracker's checks."""

from __future__ import annotations

import numpy as np
import pytest

from consumers.aggregator import Rejected, RoundAggregator
from consumers.gmf import GMFClients
from consumers.tracker import BadLoss, LossAssembler, TrackerError
from streamfl.aggregation import MFFedAvg
from streamfl.generators.interactions import InteractionStream
from streamfl.models import StepSize
from streamfl.models.streaming_gmf import StreamingGMF
from streamfl.runtime.learners import Federated
from streamfl.transport.format import GMFUpdate, RankedLoss, Update, decode, encode

M, I, TAU, D, N = 12, 150, 2, 3, 4


def _stream():
    rng = np.random.default_rng(0)
    users, items, times = [], [], []
    for u in range(M):
        k = 5 + u % 4                                   # users end at different steps: absent clients
        users += [u] * k
        items += rng.choice(I, size=k, replace=False).tolist()
        times += sorted(rng.integers(0, 10_000, k).tolist())
    return InteractionStream(np.array(users), np.array(items), np.array(times), M, I)


def _model(s):
    return StreamingGMF(M, I, StepSize("constant", eta=0.5), s.ever, tau=TAU, dim=D, negatives=N, seed=5)


def _embedded(s):
    """Per step: losses, ranks, negatives of the embedded learner; and the learner at the end."""
    fed = Federated(_model(s), TAU, MFFedAvg())
    out = []
    for chunk in s.chunks(100):
        for i in range(chunk.n_steps):
            losses = fed.step(chunk.X[i], chunk.y[i], chunk.t0 + i + 1, chunk.mask[i])
            obs = fed.clients.observations()
            out.append((losses.copy(), obs["rank"].copy(), obs["negatives"].copy()))
    return out, fed


def test_two_workers_at_different_steps_and_a_restored_one_equal_the_embedded_learner():
    s = _stream()
    want, fed = _embedded(s)
    T = s.n_steps
    chunk = next(s.chunks(T))
    items, mask = chunk.X[:, :, 0, 0].astype(np.int64), chunk.mask
    owned = [np.arange(0, M, 2), np.arange(1, M, 2)]
    workers = [GMFClients(_model(s)), GMFClients(_model(s))]
    globals_: dict = {}
    agg = RoundAggregator(M, gmf=(MFFedAvg(), I, D))
    got = {t: [np.zeros(M), np.zeros(M, np.int64), np.zeros((M, N), np.int64)] for t in range(1, T + 1)}

    def run_round(w, clients, r):
        """Worker w steps its clients through round r (or the steps after the last round) and uploads."""
        last = min(r * TAU, T)
        for t in range((r - 1) * TAU + 1, last + 1):
            loss, rank, negs = workers[w].step(t, clients, items[t - 1, clients], mask[t - 1, clients], globals_)
            for slot, v in zip(got[t], (loss, rank, negs)):
                slot[clients] = v
        if last == r * TAU:
            n = mask[(r - 1) * TAU:r * TAU, clients].sum(axis=0)
            return decode(encode(workers[w].upload(r, w, clients, n, globals_)))
        return None

    R = T // TAU
    for r in range(1, R + 1 + (T % TAU > 0)):
        # worker 1 steps its round only after worker 0 is done with it (a worker ahead of another);
        # each upload goes through the wire format and the aggregator's exact cover
        ups = [run_round(0, owned[0], r), run_round(1, owned[1], r)]
        if r > R:
            break
        assert agg.add(ups[1]) is None
        g = decode(encode(agg.add(ups[0])))
        globals_[r] = g
        for w in (0, 1):
            workers[w].load(owned[w], g)
        if r == 2:       # worker 1 dies after checkpointing; a new process restores its clients
            states = [decode(encode(workers[1].state(int(c), r * TAU, 0, 0))) for c in owned[1]]
            workers[1] = GMFClients(_model(s))
            for c, st in zip(owned[1], states):
                workers[1].restore(int(c), st)
    for t in range(1, T + 1):
        np.testing.assert_array_equal(got[t][0], want[t - 1][0], err_msg=f"losses at step {t}")
        np.testing.assert_array_equal(got[t][1], want[t - 1][1], err_msg=f"ranks at step {t}")
        np.testing.assert_array_equal(got[t][2], want[t - 1][2], err_msg=f"negatives at step {t}")
    np.testing.assert_array_equal(workers[0].table(R, globals_), fed.clients.Q)
    for w in (0, 1):
        np.testing.assert_array_equal(workers[w].model.P[owned[w]], fed.clients.P[owned[w]])
        np.testing.assert_array_equal(workers[w].model.H[owned[w]], fed.clients.H[owned[w]])
    assert agg.published == R


def test_gmf_aggregator_rejections():
    agg = RoundAggregator(2, gmf=(MFFedAvg(), I, D))
    u = GMFUpdate(round=1, worker=0, table=0, clients=np.array([0]), n_samples=np.array([1]), n_rows=np.array([1]),
                  ids=np.array([7]), rows=np.ones((1, D)), counts=np.array([1]), h=np.ones((1, D)), b=np.ones(1))
    with pytest.raises(Rejected, match="unknown_item: round 1: worker 0's update names item ids \\[150\\], this run "
                                       "has I = 150 items"):
        agg.add(GMFUpdate(**{**vars(u), "ids": np.array([I])}))
    with pytest.raises(Rejected, match="shape_mismatch: round 1: worker 0's rows are 2 and h 2 wide"):
        agg.add(GMFUpdate(**{**vars(u), "rows": np.ones((1, 2)), "h": np.ones((1, 2))}))
    with pytest.raises(Rejected, match="model_mismatch: round 1: worker 3 sent a Update, but this run's model is GMF"):
        agg.add(Update(round=1, worker=3, clients=np.array([1]), model_sum=np.zeros((1, 1))))
    assert agg.add(u) is None and agg.add(decode(encode(u))) is None and agg.duplicates == 1
    with pytest.raises(Rejected, match="conflicting_duplicate"):
        agg.add(GMFUpdate(**{**vars(u), "b": np.zeros(1)}))
    with pytest.raises(Rejected, match="model_mismatch: round 1: worker 0 sent a GMF update, but this run's model "
                                       "is linear"):
        RoundAggregator(2).add(u)
    rest = GMFUpdate(round=1, worker=1, table=0, clients=np.array([1]), n_samples=np.array([0]),
                     n_rows=np.array([0]), ids=np.zeros(0, np.int64), rows=np.zeros((0, D)),
                     counts=np.zeros(0, np.int64), h=np.full((1, D), 9.0), b=np.zeros(1))
    g = agg.add(rest)        # client 1 took no part: h is client 0's, the item moves as its one user moved it
    assert g.n_participants == 1 and g.ids.tolist() == [7] and g.rows.tolist() == [[1.0] * D]
    assert g.h.tolist() == [1.0] * D and g.b.tolist() == [1.0]
    assert agg.last_bytes == (1 * 8 * (2 + D) + 1 * 8 * (D + 1), 2 * 8 * (1 * (1 + D) + D + 1))


def test_ranked_losses_are_assembled_and_checked():
    a = LossAssembler(3, negatives=2)
    msg = RankedLoss(t=1, worker=0, clients=np.array([2, 0]), losses=np.array([0.5, 0.25]), ranks=np.array([4, 11]),
                     negatives=np.array([[5, 6], [7, 8]]))
    a.add(msg)
    a.add(msg)
    assert a.duplicates == 2 and not a.complete(1) and a.missing(1) == [1]
    a.add(RankedLoss(t=1, worker=1, clients=np.array([1]), losses=np.array([0.0]), ranks=np.array([0]),
                     negatives=np.array([[-1, -1]])))
    losses, observed = a.take(0, 1)
    assert losses.tolist() == [[0.25, 0.0, 0.5]] and observed["rank"].tolist() == [[11, 0, 4]]
    assert observed["negatives"].tolist() == [[[7, 8], [-1, -1], [5, 6]]]
    with pytest.raises(BadLoss, match="LOSS from worker 0 at step 2: negatives \\(3,\\), expected \\(2,\\)"):
        a.add(RankedLoss(t=2, worker=0, clients=np.array([0]), losses=np.array([0.5]), ranks=np.array([1]),
                         negatives=np.array([[1, 2, 3]])))
    with pytest.raises(BadLoss, match="a Loss record on the loss topic of a run whose workers send RANKED_LOSS"):
        a.add(__import__("streamfl.transport.format", fromlist=["Loss"]).Loss(
            t=2, worker=0, clients=np.array([0]), losses=np.array([0.5]), played=np.zeros((1, 1, 1))))
    a.add(RankedLoss(t=2, worker=0, clients=np.array([0]), losses=np.array([0.5]), ranks=np.array([1]),
                     negatives=np.array([[1, 2]])))
    with pytest.raises(TrackerError, match="step 2: clients \\[0\\] reported twice with different values, by worker 0 "
                                           "and worker 1"):
        a.add(RankedLoss(t=2, worker=1, clients=np.array([0]), losses=np.array([0.5]), ranks=np.array([2]),
                         negatives=np.array([[1, 2]])))
