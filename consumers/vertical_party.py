"""Vertical party role: party m of C-VFL — its own feature topic, the labels, and its embedding model θ_m.

Party m reads its feature topic and the labels (keeping the first valid row
and label of every sample id, by the rule the server applies too), and the
server's down topic. For every BATCH of round r it sends C_m(h_m(θ_m; X_m^B))
on the up topic; on its RELAY of round r (the other parties' compressed
embeddings and C_0(θ_0)) it runs Q local SGD steps on θ_m
(:class:`streamfl.vertical.sides.PartySide`). It exits on STOP.

    python -m consumers.vertical_party --bootstrap HOST:PORT --run-id RUN --party m --config-json '{...}'
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    import numpy as np
    import torch

    from streamfl.transport.topics import key_of, make_producer
    from streamfl.transport.vertical import VerticalTopics, VType, decode, encode_embed, reader
    from streamfl.vertical.kafka_common import accept_label, accept_row, config_from, role_args
    from streamfl.vertical.sides import PartySide
    from streamfl.vertical.spec import compressors, initial_models, stream_data

    args = role_args(__doc__.splitlines()[0], party=True)
    cfg = config_from(args)
    torch.set_num_threads(1)
    data, K = stream_data(cfg)            # only for the widths and the model shapes, known to every party
    M, m = data.n_parties, args.party
    width = data.widths[m - 1]
    parties, server = initial_models(cfg, data.widths, K)
    cm, c0 = compressors(cfg)
    side = PartySide(m, M, parties[m - 1], server, local_iterations=cfg.local_iterations, lr=cfg.lr,
                     compressor=cm, server_compressor=c0, seed=cfg.seed)
    del data
    topics = VerticalTopics(args.run_id, M)
    consumer = reader(args.bootstrap, f"streamfl-{args.run_id}-party{m}", [topics.party(m), topics.labels, topics.down])
    producer = make_producer(args.bootstrap, f"streamfl-{args.run_id}-party{m}")
    rows, labels, seen_rows, seen_labels = {}, {}, set(), set()
    batches, relays, rounds_done, embedded = {}, {}, 0, -1
    last = time.monotonic()
    try:
        while True:
            progressed = False
            for tp, records in consumer.poll(timeout_ms=200).items():
                for rec in records:
                    if tp.topic == topics.party(m):
                        kind, f = accept_row(rec.value, rec.key, width, seen_rows)
                        if kind == "row":
                            rows[f[0]] = f[1]
                    elif tp.topic == topics.labels:
                        kind, f = accept_label(rec.value, rec.key, K, seen_labels)
                        if kind == "label":
                            labels[f[0]] = f[1]
                    else:
                        t, f = decode(rec.value)
                        if t is VType.BATCH:
                            batches[f[0]] = f[1]
                        elif t is VType.RELAY and f[1] == m:
                            relays[f[0]] = f[2]
                        elif t is VType.STOP:
                            print(f"party {m}: stop after {rounds_done} rounds", flush=True)
                            return 0
            while True:                       # every round whose inputs are here, before polling again
                r = rounds_done
                if r not in batches or not all(i in rows and i in labels for i in batches[r].tolist()):
                    break
                ids = batches[r].tolist()
                if embedded != r:
                    payload = side.embed(r, np.stack([rows[i] for i in ids]))
                    embedded = r
                    producer.send(topics.up, value=encode_embed(r, m, payload), key=key_of(m), partition=0)
                    producer.flush()
                    progressed = True
                if r not in relays:
                    break
                side.local_steps(r, relays.pop(r), np.array([labels[i] for i in ids]))
                for i in ids:                         # a sample is used once in the stream
                    rows.pop(i, None)
                    labels.pop(i, None)
                del batches[r]
                rounds_done += 1
                progressed = True
            if progressed:
                last = time.monotonic()
            elif time.monotonic() - last > args.timeout:
                print(f"error: party {m}: no progress for {args.timeout:.0f} s in round {rounds_done}", flush=True)
                return 1
    finally:
        consumer.close()
        producer.close()


if __name__ == "__main__":
    sys.exit(main())
