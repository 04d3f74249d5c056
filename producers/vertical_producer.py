"""Vertical producer role: publish each party's feature slice to its own topic, keyed by sample id, and the labels.

Samples go out in the stream's arrival order (:func:`streamfl.vertical.spec.stream_data`):
party m's topic gets one ROW per sample, the labels topic one LABEL; each
topic ends with END (the number of records sent). Topics:
:mod:`streamfl.transport.vertical`.

Run by ``streamfl vertical --broker``; by hand::

    python -m producers.vertical_producer --bootstrap HOST:PORT --run-id RUN --config-json '{"kind": "vertical", ...}'
"""

from __future__ import annotations

import sys


def main() -> int:
    from streamfl.transport.topics import key_of, make_producer
    from streamfl.transport.vertical import VerticalTopics, encode_end, encode_label, encode_row
    from streamfl.vertical.kafka_common import config_from, role_args
    from streamfl.vertical.spec import stream_data

    args = role_args(__doc__.splitlines()[0])
    cfg = config_from(args)
    data, _ = stream_data(cfg)
    topics = VerticalTopics(args.run_id, data.n_parties)
    producer = make_producer(args.bootstrap, f"streamfl-{args.run_id}-vproducer")
    try:
        for k, i in enumerate(data.ids.tolist()):
            key = key_of(i)
            for m, X in enumerate(data.parts, start=1):
                producer.send(topics.party(m), value=encode_row(X[k]), key=key, partition=0)
            producer.send(topics.labels, value=encode_label(data.y[k]), key=key, partition=0)
        for m in range(1, data.n_parties + 1):
            producer.send(topics.party(m), value=encode_end(len(data)), partition=0)
        producer.send(topics.labels, value=encode_end(len(data)), partition=0)
        producer.flush()
    finally:
        producer.close()
    print(f"published {len(data)} samples to {data.n_parties} party topics and the labels topic", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
