"""Run a streaming C-VFL experiment over Kafka: one producer, M party processes and a server.

Processes (each ``python -P -m <module>``, logs in ``<out>/logs``):

* ``producers.vertical_producer`` — each party's feature slice to its own topic, keyed by sample id, and the labels;
* ``consumers.vertical_party`` × M — party m's embedding model, its compressed
  embeddings up, its Q local steps on what the server relays;
* ``consumers.vertical_server`` — joins the feature topics by sample id, runs the
  rounds, writes metrics.csv and summary.json.

With the same config the numbers (every round's prequential loss, the bytes up
and down) equal :func:`streamfl.vertical.spec.run_embedded`'s exactly
(``tests/kafka/test_vertical.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from .kafka_run import KafkaRunError, _Child


def run_vertical_kafka(cfg, broker: str, out: Path, *, run_id: str | None = None, keep_topics: bool = False,
                       timeout: float = 300.0, before_start=None) -> dict:
    """Run ``cfg`` (a :class:`~streamfl.vertical.spec.VerticalConfig`) over the broker; returns summary.json's content.

    ``before_start(topics)``, if given, is called once the topics exist and
    before any process starts (the tests inject bad records there).

    Raises
    ------
    KafkaRunError
        A process failed or the run did not finish within ``timeout`` s (one line, naming the process).
    """
    from ..transport.topics import check_broker
    from ..transport.vertical import VerticalTopics, create_vertical_topics, delete_vertical_topics
    from ..vertical.spec import stream_data

    check_broker(broker)
    out = Path(out).absolute()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    run_id = run_id or f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
    M = stream_data(cfg)[0].n_parties
    topics = VerticalTopics(run_id, M)
    create_vertical_topics(broker, topics)
    if before_start is not None:
        before_start(topics)
    common = ["--bootstrap", broker, "--run-id", run_id, "--config-json", json.dumps(cfg.model_dump())]
    children = [_Child(f"party{m}", "consumers.vertical_party", [*common, "--party", str(m)], logs)
                for m in range(1, M + 1)]
    children.append(_Child("server", "consumers.vertical_server", [*common, "--out", str(out)], logs))
    children.append(_Child("producer", "producers.vertical_producer", common, logs))
    server = children[-2]
    try:
        deadline = time.monotonic() + timeout
        while server.proc.poll() is None:
            for c in children:
                if c.proc.poll() not in (None, 0):
                    raise KafkaRunError(f"the {c.name} process failed: {c.error_line()} (log {c.log_path})")
            if time.monotonic() > deadline:
                raise KafkaRunError(f"the vertical run did not finish within {timeout:.0f} s (logs in {logs})")
            time.sleep(0.2)
        if server.proc.returncode != 0:
            raise KafkaRunError(f"the server process failed: {server.error_line()} (log {server.log_path})")
        for c in children:
            c.wait(30)
            if c.proc.returncode != 0:
                raise KafkaRunError(f"the {c.name} process failed: {c.error_line()} (log {c.log_path})")
    finally:
        for c in children:
            c.terminate()
        for c in children:
            c.wait(5)
        if not keep_topics:
            delete_vertical_topics(broker, topics)
    summary = json.loads((out / "summary.json").read_text())
    summary["broker"], summary["run_id"] = broker, run_id
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
