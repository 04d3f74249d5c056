"""The Kafka processes' logic without a broker: pre-summed round updates, aggregator, loss assembler,
and the one-line error for an unreachable broker."""

import logging
import time

import numpy as np
import pytest

from consumers.aggregator import Rejected, RoundAggregator, handle
from consumers.tracker import BadLoss, LossAssembler, TrackerError
from streamfl.aggregation import FedAvg
from streamfl.generators.synthetic import SyntheticStream
from streamfl.models import StackedLinear, StepSize
from streamfl.runtime.learners import Federated
from streamfl.transport.format import Data, Loss, Update, encode
from streamfl.transport.topics import BrokerUnavailable, Topics, clients_of, partition_for


def _presummed_run(split, mask, M=5, d=3, T=40, tau=4):
    """Embedded Federated vs workers (rows ``split``) that send pre-summed UPDATEs to a RoundAggregator."""
    stream = SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=T, batch_size=2, heterogeneity=0.5, seed=3)
    eta = StepSize("inv_sqrt", eta=0.3)
    fed = Federated(StackedLinear(M, d, "logistic", eta, 1, 1.5), tau, FedAvg())
    workers = [(np.asarray(c), StackedLinear(len(c), d, "logistic", eta, 1, 1.5)) for c in split]
    agg = RoundAggregator(M)
    seen = np.zeros(M, int)
    (chunk,) = stream.chunks(T)
    n_participants = []
    for i in range(T):
        t = i + 1
        played = fed.models.copy()
        want = fed.step(chunk.X[i], chunk.y[i], t, None if mask is None else mask[i])
        present = np.ones(M, bool) if mask is None else mask[i]
        seen += present
        for rows, model in workers:
            got_played = model.W.copy()
            got = model.test_then_train(chunk.X[i, rows], chunk.y[i, rows], t,
                                        None if present[rows].all() else present[rows])
            assert np.abs(got - want[rows]).max() <= 1e-12
            assert np.abs(got_played - played[rows]).max() <= 1e-12
        if t % tau == 0:
            out = None
            for w, (rows, model) in enumerate(workers):
                took_part = seen[rows] > 0
                out = agg.add(Update(t // tau, w, rows, model.W[took_part].sum(axis=0), int(took_part.sum()))) or out
            assert out is not None and out.round == t // tau
            n_participants.append(out.n_participants)
            for _, model in workers:
                if out.n_participants:
                    model.W[:] = out.model
            seen[:] = 0
    for rows, model in workers:
        assert np.abs(model.W - fed.models[rows]).max() <= 1e-12
    return n_participants


@pytest.mark.parametrize("split", [[[0, 1, 2, 3, 4]], [[0, 1], [2], [3, 4]], [[4], [1], [2], [3], [0]]])
def test_presummed_updates_replay_the_embedded_learner(split):
    assert _presummed_run(split, None) == [5] * 10


def test_presummed_updates_follow_partial_participation():
    """Client 4 sits out rounds 1-2 and nobody has a sample in round 5: averages over those taking part."""
    mask = np.ones((40, 5), bool)
    mask[:8, 4] = False
    mask[16:20, :] = False
    assert _presummed_run([[0, 1], [2, 3, 4]], mask) == [4, 4, 5, 5, 0, 5, 5, 5, 5, 5]


def test_aggregator_rejects_nan_update_with_reason(caplog):
    agg = RoundAggregator(2)
    bad = encode(Update(round=1, worker=0, clients=np.array([0]), model_sum=np.array([[np.nan]])))
    with caplog.at_level(logging.ERROR, logger="streamfl.aggregator"):
        out, reason = handle(agg, bad)
    assert out is None and reason == "non_finite"
    assert "rejected UPDATE" in caplog.text and "NaN" in caplog.text
    assert agg.rounds == {}                                      # nothing was counted
    out, reason = handle(agg, encode(Update(1, 0, np.array([0]), np.array([[1.0]]))))
    assert out is None and reason is None
    out, reason = handle(agg, encode(Update(1, 1, np.array([1]), np.array([[3.0]]))))
    assert reason is None and out.model.tolist() == [[2.0]] and out.n_participants == 2


def test_aggregator_counts_copies_once_and_covers_each_client_once():
    agg = RoundAggregator(3)
    assert agg.add(Update(1, 0, np.array([0, 1]), np.full((1, 1), 4.0))) is None
    assert agg.add(Update(1, 0, np.array([0, 1]), np.full((1, 1), 4.0))) is None    # bit-identical copy
    assert agg.duplicates == 1
    with pytest.raises(Rejected, match=r"conflicting_duplicate: round 1: worker 5's update of clients \[0, 1\] "
                                       r"differs from worker 0's, counted first"):
        agg.add(Update(1, 5, np.array([0, 1]), np.full((1, 1), 7.0)))
    assert agg.add(Update(1, 1, np.array([1, 2]), np.zeros((1, 1)))) is None      # overlaps: held, not averaged
    with pytest.raises(Rejected, match="shape_mismatch"):
        agg.add(Update(1, 1, np.array([2]), np.zeros((2, 1))))
    with pytest.raises(Rejected, match="unknown_client"):
        agg.add(Update(1, 1, np.array([3]), np.zeros((1, 1))))
    out = agg.add(Update(1, 1, np.array([2]), np.full((1, 1), 2.0)))
    assert out.round == 1 and out.model.tolist() == [[2.0]] and out.n_participants == 3     # (4 + 2) / 3
    assert agg.unused == [(1, [1, 2])]                                             # left out of the cover
    assert agg.add(Update(1, 2, np.array([2]), np.zeros((1, 1)))) is None            # round already published
    assert agg.duplicates == 3


def test_aggregator_completes_a_round_from_a_re_sent_larger_sum():
    """Old owner sent clients {1}; the new owner (who missed it) sends {0, 1, 2}: that alone covers the round."""
    agg = RoundAggregator(3)
    assert agg.add(Update(1, 0, np.array([1]), np.full((1, 1), 3.0))) is None
    out = agg.add(Update(1, 1, np.array([0, 1, 2]), np.full((1, 1), 9.0)))
    assert out.model.tolist() == [[3.0]] and agg.unused == [(0, [1])]
    assert handle(agg, encode(Data(t=1, client=0, X=np.ones((1, 1)), y=np.ones(1))))[1] == "not_an_update"


def test_aggregator_averages_the_clients_that_took_part():
    agg = RoundAggregator(3)
    agg.add(Update(1, 0, np.array([0, 1]), np.full((1, 1), 6.0), n_participants=1))
    out = agg.add(Update(1, 1, np.array([2]), np.zeros((1, 1)), n_participants=0))
    assert out.model.tolist() == [[6.0]] and out.n_participants == 1
    agg.add(Update(2, 0, np.array([0, 1]), np.zeros((1, 1)), n_participants=0))
    out = agg.add(Update(2, 1, np.array([2]), np.zeros((1, 1)), n_participants=0))
    assert out.n_participants == 0 and out.model.tolist() == [[0.0]]     # nobody took part: keep the models


def test_loss_assembler():
    asm = LossAssembler(3, 2, 1)
    asm.add(Loss(1, 0, np.array([0, 2]), np.array([0.5, 2.5]), np.ones((2, 2, 1))))
    assert not asm.complete(1) and asm.missing(1) == [1]
    asm.add(Loss(1, 1, np.array([1]), np.array([1.5]), np.zeros((1, 2, 1))))
    asm.add(Loss(1, 2, np.array([1, 2]), np.array([1.5, 2.5]), np.array([[[0.0], [0.0]], [[1.0], [1.0]]])))
    assert asm.duplicates == 2                     # a replay with the same values: counted once
    with pytest.raises(TrackerError, match=r"step 1: clients \[1\] reported twice with different values, by "
                                           r"worker 1 and worker 3"):
        asm.add(Loss(1, 3, np.array([1]), np.array([1.5]), np.full((1, 2, 1), 1e-300)))
    with pytest.raises(BadLoss, match="M = 3"):       # dead-lettered by the tracker, not fatal
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


def test_worker_error_line_names_the_worker_once(tmp_path, monkeypatch, capsys):
    import json

    import yaml

    import consumers.worker as worker_mod
    from streamfl.config import parse_config
    cfg = parse_config({"steps": 10, "baselines": []})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))

    def stalled(self):
        raise worker_mod.WorkerError("worker 3 waited 60 s for the global model of round 2")

    monkeypatch.setattr(worker_mod.Worker, "run", stalled)
    monkeypatch.setattr(worker_mod, "check_broker", lambda bootstrap: None)
    monkeypatch.setattr(worker_mod.faulthandler, "register", lambda *a, **k: None)   # stderr is captured here
    args = ["--bootstrap", "127.0.0.1:1", "--run-id", "r", "--config", str(path), "--partitions", "8"]
    assert worker_mod.main(args + ["--worker-id", "3"]) == 1
    assert capsys.readouterr().err.strip() == "error: worker 3 waited 60 s for the global model of round 2"
    monkeypatch.setattr(worker_mod.Worker, "run", lambda self: (_ for _ in ()).throw(ValueError("bad value")))
    assert worker_mod.main(args + ["--worker-id", "3"]) == 1
    assert capsys.readouterr().err.strip() == "error: worker 3: bad value"


def _compressed_round(agg, W, xbar, r, seed, split, took_part=None):
    """Each worker of ``split`` sends its clients' payloads C(W[m] − x̄) for round r (as consumers.worker does)."""
    from streamfl.compression import dither_key
    from streamfl.transport.format import CompressedUpdate
    c, out = agg.compressor, None
    for rows in split:
        ids = [m for m in rows if took_part is None or took_part[m]]
        keys = [dither_key(seed, m + 1, r - 1) for m in ids] if c.dithered else None
        sent = dict(zip(ids, c.encode_batch(W[ids] - xbar, keys))) if ids else {}
        got = agg.add(CompressedUpdate.pack(round=r, worker=0, clients=rows, payloads=[sent.get(m) for m in rows]))
        out = got if got is not None else out
    return out


@pytest.mark.parametrize("kind", ["scalar", "lattice", "topk", "none"])
def test_compressed_uploads_replay_the_embedded_learner_bit_for_bit(kind):
    """Embedded Federated with a compressor vs workers' per-client payloads decoded by a RoundAggregator:
    identical global models and byte counts, also in rounds where clients sit out or nobody takes part."""
    from streamfl.compression import make_compressor
    M, d, T, tau, seed = 5, 3, 40, 4, 7
    c = make_compressor(kind, 2 if kind != "none" else 32, range=None, axis=None)
    stream = SyntheticStream("logistic", n_clients=M, n_features=d, n_steps=T, batch_size=2, heterogeneity=0.5, seed=3)
    eta = StepSize("inv_sqrt", eta=0.3)
    fed = Federated(StackedLinear(M, d, "logistic", eta), tau, FedAvg(), compressor=c, seed=seed)
    local = StackedLinear(M, d, "logistic", eta)
    agg = RoundAggregator(M, compressor=c, seed=seed, last_global=np.zeros((d, 1)))
    rng = np.random.default_rng(0)
    mask_all = rng.random((T, M)) < 0.6
    mask_all[8:12] = False                       # round 3: nobody takes part
    (chunk,) = stream.chunks(T)
    xbar, seen, up, down = np.zeros((d, 1)), np.zeros(M, bool), 0, 0
    for i in range(T):
        t = i + 1
        fed.step(chunk.X[i], chunk.y[i], t, mask_all[i])
        local.test_then_train(chunk.X[i], chunk.y[i], t, mask_all[i])
        seen |= mask_all[i]
        if t % tau == 0:
            g = _compressed_round(agg, local.W.copy(), xbar, t // tau, seed, [[0, 3], [1, 2, 4]], seen)
            assert g.n_participants == int(seen.sum())
            if g.n_participants:
                local.W[:] = g.model
                xbar = g.model
            up, down = up + agg.last_bytes[0], down + agg.last_bytes[1]
            assert np.array_equal(local.W, fed.models) and local.W.tobytes() == fed.models.tobytes()
            assert (up, down) == (fed.bytes_up, fed.bytes_down)
            seen[:] = False
    assert fed.rounds == T // tau and fed.bytes_up > 0


def test_compressed_update_rejections():
    """Undecodable payloads, NaN values, the other kind of update, and a changed copy are refused by reason."""
    from streamfl.compression import TopK, UniformScalarQuantizer, dither_key
    from streamfl.transport.format import CompressedUpdate
    q = UniformScalarQuantizer(2, range=None)
    agg = RoundAggregator(2, compressor=q, seed=1, last_global=np.zeros((3, 1)))
    good = q.encode(np.ones((3, 1)), dither_key(1, 1, 0))

    def reason(upd, a=agg):
        with pytest.raises(Rejected) as info:
            a.add(upd)
        return info.value.reason, str(info.value)

    assert reason(CompressedUpdate.pack(round=1, worker=0, clients=[0], payloads=[good[:-1]]))[0] == "bad_payload"
    assert reason(CompressedUpdate.pack(round=1, worker=0, clients=[0], payloads=[q.encode(np.ones((2, 1)), (1, 1, 0))])) == (
        "shape_mismatch", "shape_mismatch: round 1: model (2, 1), the global model's (3, 1)")
    assert reason(Update(1, 0, np.array([0]), np.ones((3, 1))))[0] == "compression_mismatch"
    topk = TopK(2)
    nan = bytearray(topk.encode(np.arange(32.0).reshape(32, 1)))
    nan[-4:] = np.float32(np.nan).tobytes()
    a2 = RoundAggregator(1, compressor=topk, last_global=np.zeros((32, 1)))
    bad = CompressedUpdate.pack(round=1, worker=5, clients=[0], payloads=[bytes(nan)])
    assert reason(bad, a2) == ("non_finite", "non_finite: round 1: worker 5's payloads decode to 1 NaN/inf value(s)")
    assert agg.add(CompressedUpdate.pack(round=1, worker=0, clients=[0], payloads=[good])) is None
    assert agg.add(CompressedUpdate.pack(round=1, worker=0, clients=[0], payloads=[good])) is None   # a copy
    assert agg.duplicates == 1
    other = q.encode(np.full((3, 1), 0.5), dither_key(1, 1, 0))
    assert reason(CompressedUpdate.pack(round=1, worker=2, clients=[0], payloads=[other]))[0] == "conflicting_duplicate"
    g = agg.add(CompressedUpdate.pack(round=1, worker=1, clients=[1], payloads=[None]))
    assert g.n_participants == 1 and np.array_equal(g.model, q.decode(good, dither_key(1, 1, 0)))
    plain = RoundAggregator(2)
    assert reason(CompressedUpdate.pack(round=1, worker=0, clients=[0], payloads=[good]), plain)[0] == "compression_mismatch"
