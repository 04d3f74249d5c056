"""Compressed FedSEA uploads over a real broker equal the embedded run bit for bit, bytes included.

With ``learner.compression`` each worker sends its clients' compressor payloads C(x_m − x̄) (one
COMPRESSED_UPDATE record per worker and round) and the aggregator decodes them with the same dither keys
as the embedded server: every metric column, ``bytes_up`` and ``bytes_down`` are equal exactly (not to a
tolerance: a last-bit difference in x̄ would change later quantization decisions).

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address.
"""

import os
import struct

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip("STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start", allow_module_level=True)

from conftest import read_topic, roles_by_hand  # noqa: E402
from test_exactly_once import _dead, _wait_for  # noqa: E402
from streamfl.compression import dither_key  # noqa: E402
from streamfl.config import parse_config  # noqa: E402
from streamfl.runtime.experiment import run_experiment  # noqa: E402
from streamfl.runtime.kafka_run import KafkaRun, run_kafka_experiment  # noqa: E402
from streamfl.transport.format import CompressedUpdate, Global, encode  # noqa: E402
from streamfl.transport.spec import upload_compressor  # noqa: E402
from streamfl.transport.topics import key_of  # noqa: E402

T, M, D, TAU = 60, 4, 3, 5


def _cfg(kind: str, bits: int, name: str = "kafka-compressed"):
    return parse_config({
        "name": name, "seed": 4, "steps": T,
        "source": {"kind": "synthetic", "task": "logistic", "clients": M, "dim": D},
        "learner": {"tau": TAU, "compression": {"kind": kind, "bits": bits}},
        "baselines": [],
        "output": {"format": "parquet", "plots": False},   # parquet: full float64 precision on disk
    })


def _assert_identical(kafka_dir, embedded_dir, got, want):
    a = pd.read_parquet(embedded_dir / "metrics.parquet")
    b = pd.read_parquet(kafka_dir / "metrics.parquet")
    assert list(b.columns) == list(a.columns) and "bytes_up" in b.columns and "bytes_down" in b.columns
    pd.testing.assert_frame_equal(b, a, check_exact=True)          # every column, bit for bit
    for key in ("bytes_up", "bytes_down", "regret_static", "regret_expected", "regret_dynamic", "samples"):
        np.testing.assert_equal(got[key], want[key], err_msg=key)      # NaN (no expected regret) == NaN
    return a


@pytest.mark.parametrize("kind,bits", [("scalar", 2), ("topk", 2), ("lattice", 2)])
def test_compressed_kafka_run_equals_embedded_bit_for_bit(kind, bits, tmp_path):
    cfg = _cfg(kind, bits)
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    got = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    a = _assert_identical(tmp_path / "kafka", tmp_path / "embedded", got, want)
    # the counts are the payloads' lengths: every client takes part in each of the 12 rounds
    c = upload_compressor(cfg)
    one = len(c.encode(np.ones((D, 1)), dither_key(4, 1, 0) if c.dithered else None))
    # header 6 bytes (+ scale 4); scalar: 3 codes of 2 bits; top-k: k = 1 index and 1 float32 value;
    # lattice: 2 pairs (the second padded) of 2b = 4-bit codewords
    assert one == {"scalar": 6 + 4 + 1, "topk": 6 + 1 + 4, "lattice": 6 + 4 + 1}[kind]
    assert got["bytes_up"] == 12 * M * one
    assert got["bytes_down"] == 12 * M * (6 + 8 * D)                 # float64 global model to each client
    assert a["bytes_up"].iloc[TAU - 1] == M * one and a["bytes_up"].iloc[TAU - 2] == 0


def test_compressed_uploads_of_clients_that_sit_out_rounds_equal_embedded(tmp_path):
    """A real table split by label skew: 33 of the 80 rounds average fewer than M clients; a client that
    sat out sends nothing, and x̄ is the last global model with participants."""
    cfg = parse_config({
        "name": "kafka-compressed-masked", "seed": 2, "steps": None,
        "source": {"kind": "river_dataset", "name": "Phishing", "clients": 4,
                   "split": {"kind": "dirichlet", "alpha": 0.3}},
        "learner": {"tau": 5, "compression": {"kind": "scalar", "bits": 3}}, "baselines": [],
        "output": {"format": "parquet", "plots": False},
    })
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    got = run_kafka_experiment(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    a = _assert_identical(tmp_path / "kafka", tmp_path / "embedded", got, want)
    assert len(a) == 402
    one = 6 + 4 + (10 * 3 + 7) // 8                      # d = 10 features: header, scale, 10 codes of 3 bits
    assert got["bytes_up"] % one == 0 and got["bytes_up"] < 80 * M * one      # fewer than M senders in some rounds


def test_malformed_compressed_updates_are_dead_lettered_and_the_run_still_equals_embedded(tmp_path):
    """Records injected on the updates topic in round 4: a payload cut short, a payload whose scale is NaN
    (bad_payload: neither decodes), a top-k-sized payload in a scalar run (bad_payload), and a record cut in
    half (truncated). Each goes to the dead-letter topic with its reason; the run equals embedded."""
    cfg = _cfg("scalar", 2, "kafka-compressed-bad")
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    c = upload_compressor(cfg)
    r, hold = 4, 17
    good = c.encode(np.full((D, 1), 0.5), dither_key(4, 1, r - 1))
    nan_scale = bytearray(good)
    struct.pack_into("<f", nan_scale, 6, float("nan"))            # header 6 bytes, then the float32 scale
    from streamfl.compression import make_compressor
    other = make_compressor("topk", 2).encode(np.full((D, 1), 0.5))

    def record(payload):
        return encode(CompressedUpdate.pack(round=r, worker=9, clients=[0], payloads=[bytes(payload)]))

    injected = {"cut": record(good[:-1]), "nan": record(nan_scale), "other": record(other)}
    injected["half"] = injected["cut"][: len(injected["cut"]) // 2]
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", timeout=30, keep_topics=True,
                  hold_at=hold) as run:
        run.start()
        run.wait_reported(hold)
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
        for value in injected.values():
            p.send(run.topics.updates, value=value, key=key_of(9), partition=0).get(timeout=30)
        p.close(timeout=10)
        _wait_for(lambda: len(_dead(run)) >= 4, 30, "four dead letters")
        run.release()
        got = run.track()
        _assert_identical(run.run_dir, tmp_path / "embedded", got, want)
        dead = {bytes(v): h for h, v in _dead(run)}
        assert len(dead) == 4 and got["dead_letters"] == 4
        assert {k: (dead[v]["source"], dead[v]["reason"]) for k, v in injected.items()} == {
            "cut": ("aggregator", "bad_payload"), "nan": ("aggregator", "bad_payload"),
            "other": ("aggregator", "bad_payload"), "half": ("aggregator", "truncated")}
        assert "a scale is a finite max |x| ≥ 0" in dead[injected["nan"]]["detail"]
        assert "encoded by compressor kind 3 with b=2; this decoder is scalar (kind 1)" in dead[injected["other"]]["detail"]
        headers = [h for m, h in read_topic(BOOTSTRAP, run.topics.global_) if isinstance(m, Global)]
        assert len(headers) == T // TAU and all(int(h["bytes_up"]) == M * len(good) for h in headers)
        run.keep_topics = False


def test_roles_started_by_hand_compress_as_the_embedded_run(tmp_path):
    """`streamfl aggregate | worker | produce | track` from a temporary folder with a compressed config: the
    aggregator reads learner.compression from --config, and the run folder equals the embedded one."""
    import uuid

    from streamfl.config import load_config

    (tmp_path / "run.yaml").write_text(
        f"seed: 4\nsteps: {T}\nsource: {{kind: synthetic, task: logistic, clients: {M}, dim: {D}}}\n"
        f"learner: {{tau: {TAU}, compression: {{kind: topk, bits: 8}}}}\nbaselines: []\n"
        "output: {format: parquet, plots: false}\n")
    want = run_experiment(load_config(tmp_path / "run.yaml"), tmp_path / "embedded", plots=False)
    roles_by_hand(BOOTSTRAP, tmp_path, "run.yaml", f"roles-compressed-{uuid.uuid4().hex[:8]}")
    import json
    got = json.loads((tmp_path / "kafka" / "summary.json").read_text())
    _assert_identical(tmp_path / "kafka", tmp_path / "embedded", got, want)
    assert got["bytes_up"] == want["bytes_up"] > 0


def test_a_killed_worker_and_a_restarted_aggregator_keep_the_compressed_run_exact(tmp_path):
    """A worker SIGKILLed in round 4 (its clients restored by the other from their round-3 checkpoint,
    replaying the same payloads), the aggregator killed and restarted twice (it takes x̄ back from the
    global topic): the run still equals embedded bit for bit, bytes included."""
    cfg = _cfg("lattice", 3, "kafka-compressed-faults")
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    hold = 17
    with KafkaRun(cfg, BOOTSTRAP, workers=2, run_dir=tmp_path / "kafka", timeout=30, keep_topics=True,
                  hold_at=hold) as run:
        run.start()
        run.wait_reported(hold)
        run.kill_worker(1)
        run.kill_aggregator()
        run.release(4 * TAU)                   # round 4's payloads reach the updates topic with no aggregator
        run.wait_reported(4 * TAU)
        run.start_aggregator()                 # completes round 4 from the topic, x̄ = GLOBAL(3)
        run.release(7 * TAU + 2)
        run.wait_reported(7 * TAU + 2)
        run.restart_aggregator()               # and again while idle: x̄ = GLOBAL(7)
        run.release()
        got = run.track()
        _assert_identical(run.run_dir, tmp_path / "embedded", got, want)
        rounds = [m.round for m, _ in read_topic(BOOTSTRAP, run.topics.global_) if isinstance(m, Global)]
        assert sorted(rounds) == list(range(1, T // TAU + 1))
        run.keep_topics = False
