"""Vertical server role: join the parties' feature topics by sample id and run streaming C-VFL with the parties.

The server reads every party's feature topic and the labels topic and joins
them by sample id (:class:`streamfl.vertical.join.SampleJoiner`); a record that
is malformed, of the wrong width, non-finite, a repeated id or a bad label goes
to the run's dead-letter topic with its reason. Every B complete samples (the
rest at the end of the stream) make one round r:

1. BATCH(r, ids) on the down topic tells the parties which samples;
2. each party's EMBED(r) arrives on the up topic;
3. RELAY(r, m) sends party m the others' payloads and C_0(θ_0) (line 9 of Algorithm 1);
4. the server scores the batch (prequential loss, before any update) and runs
   its Q local steps (:class:`streamfl.vertical.sides.ServerSide`).

Bytes up are the lengths of the EMBED payloads received, bytes down those of
the payloads relayed: the compressor payloads, as in embedded mode
(record framing and BATCH ids are counted apart, as ``control_bytes``).
At the end it sends STOP and writes metrics.csv and summary.json to ``--out``.

    python -m consumers.vertical_server --bootstrap HOST:PORT --run-id RUN --config-json '{...}' --out DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main() -> int:
    import torch

    from streamfl.compression import dither_key
    from streamfl.transport.topics import dead_letter_headers, dead_letter_value, key_of, make_producer
    from streamfl.transport.vertical import (VerticalTopics, VType, decode, encode_batch, encode_relay, encode_stop,
                                             reader)
    from streamfl.transport.format import FormatError
    from streamfl.vertical.join import SampleJoiner
    from streamfl.vertical.kafka_common import accept_label, accept_row, config_from, role_args
    from streamfl.vertical.sides import ServerSide
    from streamfl.vertical.spec import compressors, initial_models, round_row, stream_data, write_results

    args = role_args(__doc__.splitlines()[0])
    cfg = config_from(args)
    torch.set_num_threads(1)
    data, K = stream_data(cfg)
    M, widths = data.n_parties, data.widths
    _, server = initial_models(cfg, widths, K)
    cm, c0 = compressors(cfg)
    side = ServerSide(M, server, local_iterations=cfg.local_iterations, lr=cfg.lr, compressor=cm,
                      server_compressor=c0, seed=cfg.seed)
    del data
    topics = VerticalTopics(args.run_id, M)
    feature_topics = {topics.party(m): m for m in range(1, M + 1)}
    consumer = reader(args.bootstrap, f"streamfl-{args.run_id}-vserver", [*feature_topics, topics.labels, topics.up])
    producer = make_producer(args.bootstrap, f"streamfl-{args.run_id}-vserver")
    joiner = SampleJoiner(M)
    seen = {t: set() for t in [*feature_topics, topics.labels]}
    ends: dict[str, int] = {}
    embeds: dict[int, dict[int, bytes]] = {}
    dead: dict[str, int] = {}
    rows, state = [], {"r": 0, "n": 0, "cum": 0.0, "up": 0, "down": 0, "control": 0, "B": None}

    def reject(rec, reason, detail):
        producer.send(topics.dead, value=dead_letter_value(rec.value), key=rec.key, partition=0,
                      headers=dead_letter_headers(reason, "vertical_server", detail, (rec.partition, rec.offset)))
        dead[reason] = dead.get(reason, 0) + 1

    def dispatch(tp, rec):
        if tp.topic in feature_topics:
            m = feature_topics[tp.topic]
            kind, f = accept_row(rec.value, rec.key, widths[m - 1], seen[tp.topic])
            if kind == "row":
                joiner.add(m, [f[0]], f[1][None, :])
        elif tp.topic == topics.labels:
            kind, f = accept_label(rec.value, rec.key, K, seen[tp.topic])
            if kind == "label":
                joiner.add_labels([f[0]], [f[1]])
        else:
            try:
                t, f = decode(rec.value)
            except FormatError as e:
                return reject(rec, e.reason, e.detail)
            if t is not VType.EMBED:
                return reject(rec, "bad_type", f"a {t.name} record on the up topic")
            r, m, payload = f
            if not 1 <= m <= M or r != state["r"] or m in embeds.get(r, {}):
                return reject(rec, "unexpected_embedding", f"EMBED of party {m} for round {r} while the server "
                                                           f"waits for round {state['r']}")
            try:                # a payload this round's decoder cannot read would stop the server: refuse it here
                key = dither_key(cfg.seed, m, r) if cm.dithered else None
                shape = cm.decode(payload, key).shape
            except ValueError as e:
                return reject(rec, "bad_payload", f"EMBED of party {m}, round {r}: {e}")
            if shape != (state["B"], cfg.embedding):
                return reject(rec, "bad_payload", f"EMBED of party {m}, round {r} has shape {shape}, expected "
                                                  f"({state['B']}, {cfg.embedding})")
            embeds.setdefault(r, {})[m] = payload
            return
        if kind == "end":
            ends[tp.topic] = f
        elif kind == "dead":
            reject(rec, *f)

    last = time.monotonic()

    def poll(ms):
        nonlocal last
        got = consumer.poll(timeout_ms=ms)
        for tp, records in got.items():
            for rec in records:
                dispatch(tp, rec)
        if got:
            last = time.monotonic()
        elif time.monotonic() - last > args.timeout:
            raise TimeoutError(f"no record for {args.timeout:.0f} s in round {state['r']} "
                               f"({len(embeds.get(state['r'], {}))} of {M} embeddings)")

    def run_round(batch):
        r = state["r"]
        state["B"] = len(batch)
        msg = encode_batch(r, batch.ids)
        producer.send(topics.down, value=msg, key=key_of(r), partition=0)
        producer.flush()
        state["control"] += len(msg)
        while len(embeds.get(r, {})) < M:
            poll(200)
        got = embeds.pop(r)
        payloads = [got[m] for m in range(1, M + 1)]
        state["up"] += sum(map(len, payloads))
        for m, ps in enumerate(side.relay(r, payloads), start=1):
            msg = encode_relay(r, m, ps)
            producer.send(topics.down, value=msg, key=key_of(m), partition=0)
            state["down"] += sum(map(len, ps))
            state["control"] += len(msg) - sum(map(len, ps))
        producer.flush()
        losses, _ = side.local_steps(r, batch.y)
        state["n"] += len(losses)
        state["cum"] += float(losses.sum())
        rows.append(round_row(r, state["n"], losses, state["up"], state["down"], state["cum"]))
        state["r"] += 1

    all_topics = len(feature_topics) + 1
    try:
        while True:
            poll(200)
            while joiner.ready >= cfg.batch_size:
                run_round(joiner.pop(cfg.batch_size))
            if len(ends) == all_topics:
                while joiner.ready:
                    run_round(joiner.pop(cfg.batch_size))
                break
        producer.send(topics.down, value=encode_stop(state["r"]), partition=0)
        producer.flush()
    except TimeoutError as e:
        print(f"error: vertical server: {e}", flush=True)
        return 1
    finally:
        consumer.close()
        producer.close()
    extra = {"control_bytes": state["control"], "dead_letters": dead, "incomplete_ids": joiner.pending,
             "parties": M, "topics": topics.all()}
    if args.out:
        write_results(Path(args.out), cfg, rows, "kafka", extra)
    print(f"server: {state['r']} rounds, {state['n']} samples, bytes up {state['up']}, down {state['down']}, "
          f"dead letters {dead}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
