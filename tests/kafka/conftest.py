"""Helpers of the Kafka tests. ``streamfl``, ``producers`` and ``consumers`` are imported as installed
(``pip install -e .``), never from the source tree by path."""


# ---- helpers of the fault-tolerance tests (tests/kafka/test_faults.py) ----------------------------------
def read_topic(bootstrap: str, topic: str, partition: int = 0):
    """Every record of one partition of ``topic`` (decoded messages with their headers), read to its end."""
    import time as _time

    from kafka import TopicPartition
    from streamfl.transport.format import decode
    from streamfl.transport.state import resilient_reader
    reader = resilient_reader(bootstrap, "streamfl-test-reader", topic, partition)
    try:
        tp = TopicPartition(topic, partition)
        end = reader.end_offsets([tp])[tp]
        out, deadline = [], _time.monotonic() + 20
        while reader.position(tp) < end and _time.monotonic() < deadline:
            for records in reader.poll(timeout_ms=200).values():
                out.extend((decode(r.value), dict(r.headers or ())) for r in records)
        return out
    finally:
        reader.close()
