import numpy as np
import pytest

from streamfl.generators.base import Chunk, Stream
from streamfl.models import StackedLinear, StepSize
from streamfl.regret import RegretTracker
from streamfl.runtime.engine import run_stream
from streamfl.runtime.learners import Federated


class Fixed(Stream):
    """Two clients, d = 1, features all ones, labels given."""

    def __init__(self, y, task="least_squares"):
        self.y = np.asarray(y, dtype=float)
        self.n_steps, self.n_clients = self.y.shape
        self.n_features, self.batch_size, self.task = 1, 1, task

    def chunks(self, chunk_size=256):
        for t0 in range(0, self.n_steps, chunk_size):
            y = self.y[t0:t0 + chunk_size]
            yield Chunk(t0, np.ones(y.shape + (1, 1)), y[..., None])


def run(stream, tau=1, eta=0.5):
    learners = {"fedsea": Federated(StackedLinear(stream.n_clients, 1, stream.task, StepSize("constant", eta=eta)), tau)}
    rows = []
    tracker = RegretTracker(stream, "fedsea", ["fedsea"], sink=rows.append)
    run_stream(stream, learners, tracker, "fedsea")
    return tracker, rows


def test_regret_equals_hand_computed_value():
    # t=1: x=0, losses ½·2² and ½·4² → network loss 5; SGD gives 1 and 2, averaged to 1.5.
    # t=2: losses ½·1.5² and ½·0.5² → 0.625; cumulative 5.625.
    # best fixed x: mean of {2, 4} = 3 after t=1 (loss 0.5); mean of {2, 4, 0, 2} = 2 after t=2 (loss 2).
    tracker, rows = run(Fixed([[2, 4], [0, 2]]))
    frame = rows[0]
    np.testing.assert_allclose(frame["cum_loss"], [5.0, 5.625])
    np.testing.assert_allclose(frame["comparator_static"], [0.5, 2.0])
    np.testing.assert_allclose(frame["regret_static"], [4.5, 3.625])
    # client 0 alone: losses 2 then 1.125; best fixed x = 1 → ½(1 + 1) = 1
    np.testing.assert_allclose(frame["client0_regret_static"], [2.0 - 0.0, 3.125 - 1.0])
    assert tracker.finalize()["regret_static"] == pytest.approx(3.625)


def test_local_only_never_averages():
    # τ = None: client models stay 1 and 2 after step 1 → losses ½·1², ½·0² at step 2.
    stream = Fixed([[2, 4], [0, 2]])
    learners = {"fedsea": Federated(StackedLinear(2, 1, "least_squares", StepSize("constant", eta=0.5)), None)}
    rows = []
    run_stream(stream, learners, RegretTracker(stream, "fedsea", ["fedsea"], sink=rows.append), "fedsea")
    np.testing.assert_allclose(rows[0]["loss"], [5.0, 0.25])


def test_logistic_exact_comparator_at_the_end():
    y = np.array([[1, 0], [1, 1], [0, 1], [1, 1]], dtype=float)
    tracker, rows = run(Fixed(y, "logistic"), eta=0.3)
    out = tracker.finalize()
    # features are all ones: the best fixed logit is log(p/(1-p)) with p = 6/8
    p = 6 / 8
    best = -(p * np.log(p) + (1 - p) * np.log(1 - p)) * 4
    assert out["comparator_static"] == pytest.approx(best, rel=1e-8)
    assert out["regret_static"] == pytest.approx(rows[0]["cum_loss"].iloc[-1] - best, rel=1e-8)
