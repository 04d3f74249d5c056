"""Bad input over a real broker: bad DATA records go to the dead-letter topic and the run still finishes
with the embedded numbers; an unreachable broker is one clear error, fast.

The broker tests are skipped unless ``STREAMFL_KAFKA`` names the bootstrap address (start one with
``scripts/kafka-local start``); the unreachable-broker test needs no broker.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
needs_broker = pytest.mark.skipif(not BOOTSTRAP, reason="STREAMFL_KAFKA is not set: start a broker with "
                                                        "scripts/kafka-local start")
ROOT = Path(__file__).resolve().parents[2]


def test_unreachable_broker_is_one_line_within_15s(tmp_path):
    """`streamfl run --broker 127.0.0.1:1` (and a role command) fail fast with one error line, no traceback."""
    for argv in (["run", "--broker", "127.0.0.1:1", "--steps", "5", "--no-live", "--out", str(tmp_path / "r")],
                 ["worker", "--broker", "127.0.0.1:1", "--run-id", "x1", "--config",
                  str(ROOT / "examples" / "default.yaml")]):
        started = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "streamfl.cli", *argv], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
        elapsed = time.monotonic() - started
        assert elapsed < 15, (argv[0], elapsed)
        assert res.returncode == 2, (argv[0], res.stdout, res.stderr)
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert errors == ["error: cannot reach a Kafka broker at 127.0.0.1:1 (Connection refused); "
                          "start one with scripts/kafka-local start"], res.stderr
        assert "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("module", ["consumers.worker", "consumers.aggregator", "consumers.tracker",
                                    "producers.stream_producer"])
def test_a_bare_role_reports_an_unreachable_broker_like_the_cli(tmp_path, module):
    """What `streamfl run` starts (python -m consumers.worker ...) gives the CLI's line and exit code (it took
    31 s and said something else)."""
    args = {"consumers.worker": ["--config", str(ROOT / "examples" / "default.yaml"), "--partitions", "8",
                                 "--worker-id", "0"],
            "consumers.aggregator": ["--clients", "8", "--rounds", "10"],
            "consumers.tracker": ["--config", str(ROOT / "examples" / "default.yaml"), "--out", str(tmp_path / "t")],
            "producers.stream_producer": ["--config", str(ROOT / "examples" / "default.yaml"), "--partitions", "8"]}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    res = subprocess.run([sys.executable, "-m", module, "--bootstrap", "127.0.0.1:1", "--run-id", "x1",
                          *args[module]], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error:")] == [
        "error: cannot reach a Kafka broker at 127.0.0.1:1 (Connection refused); start one with scripts/kafka-local start"]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "t").exists()


def _bad_records(b, d):
    """(partition, key, value, expected reason) of four bad DATA records for a run with M = P = 4."""
    from streamfl.transport.format import Data, encode
    wrong_dim = encode(Data(t=7, client=1, X=np.ones((b, d + 2)), y=np.zeros(b)))
    X = np.ones((b, d))
    X[0, 1] = np.nan
    nan = encode(Data(t=9, client=3, X=X, y=np.zeros(b)))
    return [(0, b"0", b"\x00\xffnot a streamfl record", "bad_magic"),
            (1, b"1", wrong_dim, "shape_mismatch"),
            (3, b"3", nan, "non_finite"),
            (2, b"2", None, "null_value")]             # a tombstone: no value at all


def _inject_when_topic_appears(bootstrap, before, records, done, errors):
    """Wait for a new run's data topic, then send ``records`` into it (runs in a thread)."""
    from streamfl.transport.topics import make_producer, quiet_kafka_logs
    quiet_kafka_logs()
    from kafka import KafkaConsumer
    try:
        meta = KafkaConsumer(bootstrap_servers=bootstrap, client_id="streamfl-test-inject-meta")
        deadline = time.monotonic() + 60
        topic = None
        while topic is None and time.monotonic() < deadline:
            new = [t for t in meta.topics() - before if t.endswith(".data")]
            if new:
                topic = new[0]
            else:
                time.sleep(0.05)
        meta.close()
        assert topic, "the run's data topic never appeared"
        producer = make_producer(bootstrap, "streamfl-test-inject")
        for part, key, value, _ in records:
            producer.send(topic, value=value, key=key, partition=part)
        producer.flush(timeout=30)
        producer.close(timeout=10)
        done.append(topic)
    except BaseException as e:  # reported by the test
        errors.append(e)


@needs_broker
def test_bad_data_records_go_to_dead_letters_and_the_run_still_matches_embedded(tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    from streamfl.config import parse_config
    from streamfl.runtime.experiment import run_experiment
    from streamfl.runtime.kafka_run import run_kafka_experiment
    from streamfl.transport.topics import Topics, delete_topics, quiet_kafka_logs

    quiet_kafka_logs()
    cfg = parse_config({"name": "bad-input", "seed": 2, "steps": 60,
                        "source": {"kind": "synthetic", "task": "logistic", "clients": 4, "dim": 3},
                        "learner": {"tau": 5, "batch_size": 2}, "baselines": [],
                        "output": {"format": "parquet", "plots": False}})
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    want_rows = pd.read_parquet(tmp_path / "embedded" / "metrics.parquet")

    meta = KafkaConsumer(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-meta")
    before = meta.topics()
    meta.close()
    records = _bad_records(b=2, d=3)
    done, errors = [], []
    injector = threading.Thread(target=_inject_when_topic_appears, args=(BOOTSTRAP, before, records, done, errors))
    injector.start()
    summary = None
    try:
        summary = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", plots=False,
                                       timeout=30, keep_topics=True)
        injector.join(60)
        assert not errors, errors
        topics = Topics(summary["transport"]["run_id"])
        assert done == [topics.data]

        # the run finished with the embedded numbers
        got = pd.read_parquet(tmp_path / "kafka" / "metrics.parquet")
        for col in ("loss", "cum_loss", "regret_static", "regret_dynamic"):
            np.testing.assert_allclose(got[col].to_numpy(), want_rows[col].to_numpy(), rtol=0, atol=1e-9,
                                       err_msg=col)
        for key in ("regret_static", "regret_expected", "regret_dynamic"):
            assert summary[key] == pytest.approx(want[key], abs=1e-9)

        # exactly the injected records are on the dead-letter topic, each with its reason
        reader = KafkaConsumer(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-dead", group_id=None,
                               auto_offset_reset="earliest", enable_auto_commit=False)
        tp = TopicPartition(topics.dead, 0)
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        end = reader.end_offsets([tp])[tp]
        dead = []
        deadline = time.monotonic() + 20
        while reader.position(tp) < end and time.monotonic() < deadline:
            for recs in reader.poll(timeout_ms=200).values():
                dead.extend(recs)
        reader.close()
        got_dead = {None if r.value is None else bytes(r.value): dict((k, v.decode()) for k, v in r.headers)
                    for r in dead}
        assert len(dead) == len(records) == len(got_dead)
        for part, key, value, reason in records:
            headers = got_dead[value]
            assert headers["reason"] == reason
            assert headers["source"].startswith("worker-")
        assert summary.get("dead_letters") == len(records)      # counted in summary.json
    finally:
        injector.join(60)
        if summary is not None:
            delete_topics(BOOTSTRAP, Topics(summary["transport"]["run_id"]))


@needs_broker
@pytest.mark.parametrize("tau, eta, scale, step", [(10, 5.0, 3.0, None),     # the loss of a step turns inf
                                                   (1, 1e308, 1.0, 2)])       # the model turns inf at a round end
def test_a_diverging_learner_is_named_with_its_step_over_kafka(tmp_path, tau, eta, scale, step):
    """Over Kafka the worker stops with the embedded message (learner, step, advice), before it sends a
    non-finite update the aggregator would reject (the run used to wait 60 s for a global model)."""
    from streamfl.config import parse_config
    from streamfl.runtime.engine import DivergenceError
    from streamfl.runtime.experiment import run_experiment
    from streamfl.runtime.kafka_run import KafkaRunError, run_kafka_experiment

    cfg = parse_config({"name": "diverge", "seed": 0, "steps": 300,
                        "source": {"kind": "synthetic", "task": "least_squares", "clients": 4, "dim": 3,
                                   "feature_scale": scale},
                        "learner": {"tau": tau, "step_size": {"kind": "constant", "eta": eta}}, "baselines": [],
                        "output": {"plots": False}})
    with pytest.raises(DivergenceError) as embedded:
        run_experiment(cfg, tmp_path / "embedded", plots=False)
    with pytest.raises(KafkaRunError) as kafka:
        run_kafka_experiment(cfg, BOOTSTRAP, workers=1, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    assert str(embedded.value).startswith("learner 'fedsea' diverged at step t=" + (str(step) if step else ""))
    assert str(embedded.value) in str(kafka.value)          # same step, same advice
    assert "malformed" not in str(kafka.value) and "waited" not in str(kafka.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # both failed runs removed their folders (and logs)


def _role(cwd, *argv, timeout=90):
    """A role command as a user runs it, from their own folder."""
    return subprocess.run([sys.executable, "-m", "streamfl.cli", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@needs_broker
def test_roles_with_another_config_stop_instead_of_computing_wrong_numbers(tmp_path):
    """The producer's config has seed 0, a worker's seed 7: the worker stops naming the mismatch. A finished
    run tracked again with another config stops too (it used to print wrong regrets)."""
    import uuid

    from streamfl.config import parse_config
    from streamfl.runtime.kafka_run import run_kafka_experiment
    from streamfl.transport.state import delete_state_topic
    from streamfl.transport.topics import Topics, delete_topics

    base = "steps: 20\nsource: {kind: synthetic, task: logistic, clients: 2, dim: 2}\nlearner: {tau: 5}\nbaselines: []\n"
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("seed: 0\n" + base)
    b.write_text("seed: 7\n" + base)
    run_id = f"mismatch-{uuid.uuid4().hex[:8]}"
    common = ["--broker", BOOTSTRAP, "--run-id", run_id]
    try:
        assert _role(tmp_path, "produce", *common, "--config", "a.yaml").returncode == 0
        res = _role(tmp_path, "worker", *common, "--config", "b.yaml", "--timeout", "30")
        assert res.returncode == 1, res.stderr
        assert "was produced from another config" in res.stderr and "Traceback" not in res.stderr
    finally:
        delete_topics(BOOTSTRAP, Topics(run_id))
        delete_state_topic(BOOTSTRAP, run_id)

    cfg = parse_config({"seed": 0, "steps": 20, "source": {"kind": "synthetic", "task": "logistic", "clients": 2,
                                                            "dim": 2}, "learner": {"tau": 5}, "baselines": [],
                        "output": {"plots": False}})
    summary = run_kafka_experiment(cfg, BOOTSTRAP, run_dir=tmp_path / "run", plots=False, timeout=30, keep_topics=True)
    old = summary["transport"]["run_id"]
    try:
        res = _role(tmp_path, "track", "--broker", BOOTSTRAP, "--run-id", old, "--config", "b.yaml", "--out", "t",
                    "--timeout", "20")
        assert res.returncode != 0
        assert "LOSS record at offset 0 was produced from another config" in res.stderr, res.stderr
        assert not (tmp_path / "t").exists()                  # the failed tracker removed its run folder
    finally:
        delete_topics(BOOTSTRAP, Topics(old))
        delete_state_topic(BOOTSTRAP, old)


@needs_broker
def test_a_worker_with_another_learner_config_stops_the_aggregator_naming_it(tmp_path):
    """Same stream, another learner (η): the DATA records pass the worker's check, so its updates used to be
    averaged or rejected one by one until the aggregator timed out with 'no UPDATE for 60 s'. The updates carry
    the learner fingerprint, and the aggregator stops at the first one from another config, naming it."""
    import uuid

    from streamfl.transport.state import delete_state_topic
    from streamfl.transport.topics import Topics, delete_topics

    base = "seed: 0\nsteps: 10\nsource: {kind: synthetic, task: logistic, clients: 2, dim: 2}\nbaselines: []\n"
    (tmp_path / "a.yaml").write_text(base + "learner: {tau: 5}\n")
    (tmp_path / "b.yaml").write_text(base + "learner: {tau: 5, step_size: {eta: 0.1}}\n")
    run_id = f"mismatch-{uuid.uuid4().hex[:8]}"
    common = ["--broker", BOOTSTRAP, "--run-id", run_id]
    try:
        agg = subprocess.Popen([sys.executable, "-m", "streamfl.cli", "aggregate", *common, "--config", "a.yaml",
                                "--timeout", "60"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        assert _role(tmp_path, "produce", *common, "--config", "a.yaml").returncode == 0
        worker = subprocess.Popen([sys.executable, "-m", "streamfl.cli", "worker", *common, "--config", "b.yaml",
                                   "--timeout", "20"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = agg.communicate(timeout=60)
        finally:
            worker.kill()
            worker.communicate()
        assert agg.returncode == 1, err
        assert ("error: aggregator: UPDATE at offset 0 (a worker's) was produced from another config" in err
                and "Traceback" not in err), err
    finally:
        delete_topics(BOOTSTRAP, Topics(run_id))
        delete_state_topic(BOOTSTRAP, run_id)


def _cli(*argv, cwd, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "streamfl.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=str(cwd), timeout=timeout)


@needs_broker
def test_a_stalled_worker_names_the_cause_it_can_see(tmp_path):
    """Roles started by hand: with one of two producers missing, the worker names the empty partition; with
    the data there but no aggregator, it says every client's update is on the topic and nothing was published."""
    import uuid

    from streamfl.transport.state import delete_state_topic
    from streamfl.transport.topics import Topics, delete_topics

    (tmp_path / "exp.yaml").write_text("steps: 20\nsource: {kind: synthetic, task: logistic, clients: 2, dim: 2}\n"
                                       "learner: {tau: 5}\nbaselines: []\n")
    for case in ("empty partition", "no aggregator"):
        run_id = f"stall-{uuid.uuid4().hex[:8]}"
        common = ["--broker", BOOTSTRAP, "--run-id", run_id, "--config", "exp.yaml"]
        try:
            share = ["--share", "0/2"] if case == "empty partition" else []
            assert _cli("produce", *common, *share, cwd=tmp_path).returncode == 0
            res = _cli("worker", *common, "--timeout", "5", cwd=tmp_path)
            assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
            (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
            if case == "empty partition":
                assert line == ("error: worker 0: no DATA for step 1 of client 1 within 5 s: data partition 1 is empty "
                                "(no producer wrote to it; with several producers, is every --share I/N running?)")
            else:
                assert line == (f"error: worker 0 waited 5 s for the global model of round 1 (clients [0, 1]): "
                                f"updates covering every client are on streamfl.{run_id}.updates but the aggregator "
                                f"did not publish the global model (is it running?)")
        finally:
            delete_topics(BOOTSTRAP, Topics(run_id))
            delete_state_topic(BOOTSTRAP, run_id)
