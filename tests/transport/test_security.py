"""The broker's security settings (streamfl.transport.security) reach every Kafka client a role makes (no broker)."""

import sys
from pathlib import Path

import kafka
import pytest

from streamfl.transport import security, state, topics
from streamfl.transport.security import SecurityError, client_config

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SASL = {"STREAMFL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "STREAMFL_KAFKA_SASL_MECHANISM": "scram-sha-512",
        "STREAMFL_KAFKA_SASL_USERNAME": "worker", "STREAMFL_KAFKA_SASL_PASSWORD": "s3cret"}
WANT = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "worker",
        "sasl_plain_password": "s3cret"}


class _Recorder:
    """Stands in for KafkaProducer / KafkaConsumer / KafkaAdminClient: records its keyword arguments."""

    made = []

    def __init__(self, *args, **kwargs):
        self.kwargs = kwargs
        _Recorder.made.append(self)

    def __getattr__(self, name):          # assign, seek_to_beginning, init_transactions, subscribe, ...
        return lambda *a, **k: None


@pytest.fixture
def recorded(monkeypatch):
    for var in security.ENV:
        monkeypatch.delenv(var, raising=False)
    for var, value in SASL.items():
        monkeypatch.setenv(var, value)
    for name in ("KafkaProducer", "KafkaConsumer", "KafkaAdminClient"):
        monkeypatch.setattr(kafka, name, _Recorder)
    _Recorder.made = []
    return _Recorder.made


def test_every_client_of_every_role_gets_the_settings(recorded, tmp_path):
    from consumers.aggregator import OwnershipCheck
    from consumers.worker import Worker
    from streamfl.config import parse_config
    from streamfl.generators.build import build_stream
    from streamfl.transport.spec import learner_spec

    topics.make_producer("b:1", "p")
    topics.make_reader("b:1", "r", "t")
    state.resilient_producer("b:1", "p")
    state.resilient_reader("b:1", "r", "t")
    state.transactional_producer("b:1", "p", "tx")
    state.StateStore("b:1", "run", 2, "s")
    OwnershipCheck("b:1", "run", 2)
    cfg = parse_config({"steps": 10, "baselines": []})
    w = Worker("b:1", "run", learner_spec(cfg, build_stream(cfg)), 1, 0, n_partitions=2)
    w._make_consumer()                                           # the consumer-group member
    assert len(recorded) == 8
    for made in recorded:
        assert {k: made.kwargs.get(k) for k in WANT} == WANT
    isolation = [m.kwargs.get("isolation_level") for m in recorded if "group_id" in m.kwargs]
    assert isolation and set(isolation) == {"read_committed"}     # every consumer reads committed records only
    assert recorded[4].kwargs["transactional_id"] == "tx"


def test_plaintext_needs_nothing_and_bad_settings_are_one_line(monkeypatch, tmp_path):
    assert client_config({}) == {}
    with pytest.raises(SecurityError, match=r"STREAMFL_KAFKA_SECURITY_PROTOCOL='TLS' is not a Kafka security "
                                            r"protocol; use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"):
        client_config({"STREAMFL_KAFKA_SECURITY_PROTOCOL": "tls"})
    with pytest.raises(SecurityError, match="STREAMFL_KAFKA_SASL_MECHANISM is set but STREAMFL_KAFKA_SECURITY_PROTOCOL "
                                            r"is unset \(PLAINTEXT\)"):
        client_config({"STREAMFL_KAFKA_SASL_MECHANISM": "PLAIN"})
    with pytest.raises(SecurityError, match="STREAMFL_KAFKA_SSL_CAFILE='/nope/ca.pem': no such file"):
        client_config({"STREAMFL_KAFKA_SECURITY_PROTOCOL": "SSL", "STREAMFL_KAFKA_SSL_CAFILE": "/nope/ca.pem"})
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert client_config({"STREAMFL_KAFKA_SECURITY_PROTOCOL": "ssl", "STREAMFL_KAFKA_SSL_CAFILE": str(ca),
                          "STREAMFL_KAFKA_SSL_CHECK_HOSTNAME": "false"}) == {
        "security_protocol": "SSL", "ssl_cafile": str(ca), "ssl_check_hostname": False}
