"""A run over a SASL_PLAINTEXT listener with credentials from the environment; wrong credentials are one line.

Skipped unless ``STREAMFL_KAFKA_SASL`` names the bootstrap address of a SASL_PLAINTEXT (PLAIN) listener with
the user streamfl/streamfl-secret: ``STREAMFL_KAFKA_SASL_PORT=9094 scripts/kafka-local start`` opens one.
"""

import os

import pytest

SASL = os.environ.get("STREAMFL_KAFKA_SASL")
if not SASL:
    pytest.skip("STREAMFL_KAFKA_SASL is not set: start a broker with STREAMFL_KAFKA_SASL_PORT=... "
                "scripts/kafka-local start", allow_module_level=True)

CREDENTIALS = {"STREAMFL_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "STREAMFL_KAFKA_SASL_MECHANISM": "PLAIN",
               "STREAMFL_KAFKA_SASL_USERNAME": "streamfl", "STREAMFL_KAFKA_SASL_PASSWORD": "streamfl-secret"}


def test_a_run_over_sasl_equals_embedded_and_bad_credentials_are_one_line(tmp_path, monkeypatch):
    from streamfl.config import parse_config
    from streamfl.runtime.experiment import run_experiment
    from streamfl.runtime.kafka_run import run_kafka_experiment
    from streamfl.transport.topics import BrokerUnavailable, check_broker

    cfg = parse_config({"seed": 5, "steps": 40, "baselines": [], "output": {"plots": False},
                        "source": {"kind": "synthetic", "task": "logistic", "clients": 2, "dim": 3},
                        "learner": {"tau": 5}})
    want = run_experiment(cfg, tmp_path / "embedded", plots=False)
    for var, value in CREDENTIALS.items():
        monkeypatch.setenv(var, value)                     # the worker, aggregator and producer processes inherit them
    got = run_kafka_experiment(cfg, SASL, workers=2, run_dir=tmp_path / "kafka", plots=False, timeout=30)
    for key in ("regret_static", "regret_expected", "regret_dynamic"):
        assert got[key] == pytest.approx(want[key], abs=1e-9)

    monkeypatch.setenv("STREAMFL_KAFKA_SASL_PASSWORD", "wrong")
    with pytest.raises(BrokerUnavailable) as refused:
        check_broker(SASL, timeout=3)
    assert str(refused.value) == (f"{SASL} accepts connections but did not answer as a Kafka broker within 3 s "
                                  f"(KafkaTimeoutError); check the STREAMFL_KAFKA_* security settings "
                                  f"(security_protocol=SASL_PLAINTEXT, sasl_mechanism=PLAIN, "
                                  f"sasl_plain_username=streamfl) and the password")
    monkeypatch.delenv("STREAMFL_KAFKA_SECURITY_PROTOCOL")
    monkeypatch.delenv("STREAMFL_KAFKA_SASL_MECHANISM")
    with pytest.raises(BrokerUnavailable):                 # a plain-text client on a SASL listener
        check_broker(SASL, timeout=3)
