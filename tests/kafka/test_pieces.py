"""The Kafka processes' logic without a broker: worker blocks, step buffer, aggregator, loss assembler,
and the one-line error for an unreachable broker."""

import logging
import time

import numpy as np
import pytest

from consumers.aggregator import Rejected, RoundAggregator, handle
from consumers.tracker import LossAssembler, TrackerError
from consumers.worker import ClientBlock, StepBuffer, WorkerError
from streamfl.aggregation import FedAvg
from streamfl.generators.synthetic import SyntheticStream
from streamfl.models import StackedLinear, StepSize
from streamfl.runtime.learners import Federated
from streamfl.transport.format import Data, Loss, Update, encode
from streamfl.transport.spec import LearnerSpec
from streamfl.transport.topics import BrokerUnavailable, Topics, clients_of, partition_for


@pytest.mark.parametrize("split", [[[0, 1, 2, 3, 4]], [[0, 1], [2], [3, 4]], [[0], [1], [2], [3], [4]]])
def test_worker_blocks_plus_aggregator_replay_the_embedded_learner(split):
    M, d, T, tau = 5, 3, 40, 4
    stream = SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=T, batch_size=2, heterogeneity=0.5, seed=3)
    eta = StepSize("inv_sqrt", eta=0.3)
    fed = Federated(StackedLinear(M, d, "logistic", eta, 1, 1.5), tau, FedAvg())
    spec = LearnerSpec(M, d, 1, T, "logistic", eta, 1.5, tau)
    blocks = [ClientBlock(c, spec) for c in split]
    agg = RoundAggregator(M)
    (chunk,) = stream.chunks(T)
    for i in range(T):
        t = i + 1
        played = fed.models.copy()
        want = fed.step(chunk.X[i], chunk.y[i], t)
        for w, blk in enumerate(blocks):
            got, got_played = blk.step(t, chunk.X[i, blk.clients], chunk.y[i, blk.clients], None)
            assert np.abs(got - want[blk.clients]).max() <= 1e-12
            assert np.abs(got_played - played[blk.clients]).max() <= 1e-12
        if t % tau == 0:
            out = None
            for w, blk in enumerate(blocks):
                out = agg.add(Update(t // tau, w, len(blk.clients), blk.model_sum())) or out
            assert out is not None and out.round == t // tau
            for blk in blocks:
                blk.load(out.model)
            if len(split) == 1:
                assert np.array_equal(out.model, fed.models[0])            # one worker: bit for bit
    for blk in blocks:
        assert np.abs(blk.W - fed.models[blk.clients]).max() <= 1e-12


def test_aggregator_rejects_nan_update_with_reason(caplog):
    agg = RoundAggregator(2)
    bad = encode(Update(round=1, worker=0, n_clients=1, model_sum=np.array([[np.nan]])))
    with caplog.at_level(logging.ERROR, logger="streamfl.aggregator"):
        out, reason = handle(agg, bad)
    assert out is None and reason == "non_finite"
    assert "rejected UPDATE" in caplog.text and "NaN" in caplog.text
    assert agg.rounds == {}                                      # nothing was counted
    out, reason = handle(agg, encode(Update(1, 0, 1, np.array([[1.0]]))))
    assert out is None and reason is None
    out, reason = handle(agg, encode(Update(1, 1, 1, np.array([[3.0]]))))
    assert reason is None and out.model.tolist() == [[2.0]]


def test_aggregator_rejects_duplicates_overcounts_and_stale_rounds():
    agg = RoundAggregator(3)
    agg.add(Update(1, 0, 2, np.zeros((1, 1))))
    with pytest.raises(Rejected, match="duplicate_worker"):
        agg.add(Update(1, 0, 1, np.zeros((1, 1))))
    with pytest.raises(Rejected, match="too_many_clients"):
        agg.add(Update(1, 1, 2, np.zeros((1, 1))))
    with pytest.raises(Rejected, match="shape_mismatch"):
        agg.add(Update(1, 1, 1, np.zeros((2, 1))))
    assert agg.add(Update(1, 1, 1, np.zeros((1, 1)))) is not None
    with pytest.raises(Rejected, match="stale_round"):
        agg.add(Update(1, 2, 1, np.zeros((1, 1))))
    assert handle(agg, encode(Data(t=1, client=0, X=np.ones((1, 1)), y=np.ones(1))))[1] == "not_an_update"


def test_step_buffer_orders_dedupes_and_masks():
    buf = StepBuffer([1, 3], batch_size=1, n_features=2)
    rec = lambda t, m, present=True: Data(t=t, client=m, X=np.full((1, 2), 10 * t + m), y=np.array([float(m)]),
                                         present=present)
    assert buf.add(rec(1, 3)) and not buf.add(rec(1, 3)) and not buf.add(rec(1, 0))
    assert buf.add(rec(2, 1)) and buf.pop(1) is None and buf.missing(1) == [1]
    assert buf.add(rec(1, 1))
    X, y, mask = buf.pop(1)
    assert X[:, 0, 0].tolist() == [11, 13] and y[:, 0].tolist() == [1, 3] and mask is None
    assert not buf.add(rec(1, 1))                       # re-delivered after a rebalance: ignored
    buf.add(rec(2, 3, present=False))
    assert buf.pop(2)[2].tolist() == [True, False] and buf.complete(2)
    with pytest.raises(WorkerError, match="expected"):
        buf.add(Data(t=3, client=1, X=np.ones((2, 2)), y=np.ones(2)))


def test_loss_assembler():
    asm = LossAssembler(3, 2, 1)
    asm.add(Loss(1, 0, np.array([0, 2]), np.array([0.5, 2.5]), np.ones((2, 2, 1))))
    assert not asm.complete(1) and asm.missing(1) == [1]
    asm.add(Loss(1, 1, np.array([1]), np.array([1.5]), np.zeros((1, 2, 1))))
    with pytest.raises(TrackerError, match="twice"):
        asm.add(Loss(1, 1, np.array([1]), np.array([1.5]), np.zeros((1, 2, 1))))
    with pytest.raises(TrackerError, match="M = 3"):
        asm.add(Loss(2, 1, np.array([3]), np.array([1.5]), np.zeros((1, 2, 1))))
    losses, played = asm.take(0, 1)
    assert losses.tolist() == [[0.5, 1.5, 2.5]] and played[0, :, 0, 0].tolist() == [1, 0, 1]


def test_topics_and_partitions():
    t = Topics("r1")
    assert t.all() == ["streamfl.r1.data", "streamfl.r1.loss", "streamfl.r1.updates", "streamfl.r1.global",
                       "streamfl.r1.dead"]
    assert [partition_for(m, 3) for m in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert clients_of({1}, 7, 3) == [1, 4]
    with pytest.raises(ValueError):
        Topics("bad id")


def test_unreachable_broker_is_one_clear_error_fast(tmp_path):
    from streamfl.config import parse_config
    from streamfl.runtime.kafka_run import run_kafka_experiment
    cfg = parse_config({"steps": 10, "baselines": [], "output": {"dir": str(tmp_path), "plots": False}})
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="cannot reach a Kafka broker at 127.0.0.1:1"):
        run_kafka_experiment(cfg, "127.0.0.1:1")
    assert time.monotonic() - started < 10
    assert not any(tmp_path.iterdir())                       # no half-made run folder


def test_cli_unreachable_broker_no_traceback(tmp_path):
    from typer.testing import CliRunner
    from streamfl.cli import app
    res = CliRunner().invoke(app, ["run", "--broker", "127.0.0.1:1", "--steps", "5", "--no-live", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    out = res.output + (res.stderr if hasattr(res, "stderr") else "")
    assert "cannot reach a Kafka broker" in out and "Traceback" not in out
    res = CliRunner().invoke(app, ["run", "--broker", "nonsense", "--no-live"])
    assert res.exit_code == 2 and "HOST:PORT" in res.output + getattr(res, "stderr", "")
