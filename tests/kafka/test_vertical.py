"""Vertical (C-VFL) mode on a real broker: the same numbers as embedded, bad records dead-lettered with reasons.

Skipped unless ``STREAMFL_KAFKA`` names a broker (``scripts/kafka-local start``).
"""

import os
from collections import Counter

import numpy as np
import pandas as pd
import pytest

BOOTSTRAP = os.environ.get("STREAMFL_KAFKA")
needs_broker = pytest.mark.skipif(not BOOTSTRAP, reason="STREAMFL_KAFKA is not set: start a broker with "
                                                         "scripts/kafka-local start")


def _dead_letters(topic):
    from streamfl.transport.state import resilient_reader
    from kafka import TopicPartition
    reader = resilient_reader(BOOTSTRAP, "streamfl-test-dead", topic)
    try:
        tp = TopicPartition(topic, 0)
        end, out = reader.end_offsets([tp])[tp], []
        while reader.position(tp) < end:
            for records in reader.poll(timeout_ms=500).values():
                out.extend(dict(r.headers)["reason"].decode() for r in records)
        return out
    finally:
        reader.close()


@needs_broker
def test_vertical_kafka_equals_embedded_and_dead_letters_bad_records(tmp_path):
    from streamfl.runtime.vertical_kafka import run_vertical_kafka
    from streamfl.transport.topics import key_of, make_producer
    from streamfl.transport.vertical import encode_embed, encode_label, encode_row
    from streamfl.vertical.spec import run_embedded, stream_data, vertical_config

    cfg = vertical_config({"kind": "vertical", "seed": 2, "samples": 80, "batch_size": 16, "local_iterations": 3,
                           "compressor": {"kind": "lattice", "bits": 2}})
    data, _ = stream_data(cfg)
    first = int(data.ids[0])
    seen = {}

    def inject(topics):
        p = make_producer(BOOTSTRAP, "streamfl-test-inject")
        p.send(topics.party(2), value=b"garbage", key=key_of(first), partition=0)                    # bad_magic
        p.send(topics.party(2), value=encode_row(np.zeros(5)), key=key_of(first), partition=0)       # bad_width
        p.send(topics.party(1), value=encode_row(np.full(16, np.nan)), key=key_of(first), partition=0)  # non_finite
        p.send(topics.party(4), value=encode_row(np.zeros(16)), key=b"not-an-id", partition=0)      # bad_key
        p.send(topics.labels, value=encode_label(99), key=key_of(first), partition=0)               # bad_label
        # the same row as the producer's: it is kept, the producer's copy is the duplicate
        p.send(topics.party(3), value=encode_row(data.parts[2][0]), key=key_of(first), partition=0)
        p.send(topics.up, value=encode_embed(7, 1, b"x"), key=key_of(1), partition=0)               # unexpected round
        p.send(topics.up, value=encode_embed(0, 2, b"\x01\x02"), key=key_of(2), partition=0)      # bad_payload
        p.flush()
        p.close()
        seen["dead"] = topics.dead

    summary = run_vertical_kafka(cfg, BOOTSTRAP, tmp_path / "run", keep_topics=True, timeout=900, before_start=inject)
    kafka = pd.read_csv(tmp_path / "run" / "metrics.csv")
    embedded = pd.DataFrame(run_embedded(cfg))
    assert len(kafka) == 5
    pd.testing.assert_frame_equal(kafka, embedded, check_exact=True, check_dtype=False)   # loss and bytes, every round
    assert (summary["bytes_up"], summary["bytes_down"]) == (embedded["bytes_up"].iloc[-1], embedded["bytes_down"].iloc[-1])
    want = Counter(["bad_magic", "bad_width", "non_finite", "bad_key", "bad_label", "duplicate_id",
                    "unexpected_embedding", "bad_payload"])
    assert Counter(summary["dead_letters"]) == want
    assert Counter(_dead_letters(seen["dead"])) == want
