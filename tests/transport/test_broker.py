"""Round trip against a real Kafka broker (start one with ``scripts/kafka-local start``).

Skipped unless ``STREAMFL_KAFKA`` names the bootstrap address, e.g. ``127.0.0.1:9092``.
"""

import os
import time
import uuid

import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
if not BOOTSTRAP:
    pytest.skip(
        "STREAMFL_KAFKA is not set: start a broker with scripts/kafka-local start",
        allow_module_level=True,
    )

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

N_RECORDS = 100
N_PARTITIONS = 3


@pytest.fixture
def topic():
    """A fresh, uniquely named topic with 3 partitions; deleted afterwards."""
    name = f"streamfl-test-{uuid.uuid4().hex[:12]}"
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-admin")
    try:
        admin.create_topics(
            [NewTopic(name=name, num_partitions=N_PARTITIONS, replication_factor=1)]
        )
        yield name
    finally:
        try:
            admin.delete_topics([name])
        except Exception:
            pass
        admin.close()


def _partition_count(name, timeout_s=15.0):
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-meta")
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            parts = consumer.partitions_for_topic(name)
            if parts:
                return len(parts)
            time.sleep(0.2)
        return 0
    finally:
        consumer.close()


def test_metadata_lists_topic_with_three_partitions(topic):
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="streamfl-test-admin")
    try:
        assert topic in admin.list_topics()
        (desc,) = admin.describe_topics([topic])
        # kafka-python 3.x names the key "name"; 2.x named it "topic".
        assert desc.get("name", desc.get("topic")) == topic
        assert desc["error_code"] == 0
        assert len(desc["partitions"]) == N_PARTITIONS
    finally:
        admin.close()
    assert _partition_count(topic) == N_PARTITIONS


def test_produce_and_consume_100_keyed_records(topic):
    expected = {(f"key-{i % 10}".encode(), f"value-{i}".encode()) for i in range(N_RECORDS)}

    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, key=k, value=v) for k, v in sorted(expected)]
        producer.flush(timeout=30)
        partitions_used = {f.get(timeout=30).partition for f in futures}
    finally:
        producer.close()
    assert partitions_used <= set(range(N_PARTITIONS))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=BOOTSTRAP,
        group_id=f"streamfl-test-group-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < N_RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend((r.key, r.value) for r in records)
        consumer.commit()
    finally:
        consumer.close()

    assert len(got) == N_RECORDS
    assert set(got) == expected
