"""Publish a stream's samples to a run's data topic: one DATA record per (step, client).

Client m's records go to partition m mod P (explicit partition numbers, key =
client id), in step order: each partition is written by one idempotent
producer, which keeps its order, so every worker sees its clients' steps in
order.

Several producer processes can share the work: producer i of n publishes the
partitions p with p mod n = i (each generates the whole stream, which is
deterministic, and sends its share). Producing is CPU-bound in kafka-python
(the record-batch checksum), so n > 1 uses more cores.

Run as a process::

    python -m producers.stream_producer --bootstrap 127.0.0.1:9092 --run-id abc \\
        --config runs/x/config.yaml --partitions 4 [--share 0/2]
"""

from __future__ import annotations

import argparse
import logging
import sys

from streamfl.transport.format import Data, encode
from streamfl.transport.spec import CONFIG_HEADER, code_origin
from streamfl.transport.topics import BrokerUnavailable, Topics, check_broker, key_of, make_producer, partition_for

log = logging.getLogger("streamfl.producer")


def publish_stream(stream, producer, topic: str, n_partitions: int, chunk_size: int = 256,
                   share: tuple[int, int] = (0, 1), fingerprint: bytes | None = None) -> int:
    """Send every (step, client) sample of ``stream`` whose partition is in this producer's share as a DATA record.

    Parameters
    ----------
    stream : Stream
        Replayable; iterated once from t = 1.
    producer : KafkaProducer
    topic : str
        The run's data topic.
    n_partitions : int
        P; client m goes to partition m mod P.
    chunk_size : int
        Steps generated at a time (does not change the records).
    share : (i, n)
        This is producer i of n, 0 ≤ i < n: it sends the clients whose
        partition p has p mod n = i.
    fingerprint : bytes or None
        :func:`~streamfl.transport.spec.config_fingerprint` of the stream, sent
        as the header ``config`` of each client's record of step 1 (workers
        check it; one header per client keeps the per-record cost off the
        stream).

    Returns
    -------
    int
        Number of records sent (T·M for the whole share (0, 1)). The producer
        is flushed before returning.

    Raises
    ------
    ValueError
        ``share`` is not 0 ≤ i < n.
    """
    index, count = share
    if not 0 <= index < count:
        raise ValueError(f"producer share must be i/n with 0 ≤ i < n, got {index}/{count}")
    sent = 0
    M = stream.n_clients
    parts = [partition_for(m, n_partitions) for m in range(M)]
    keys = [key_of(m) for m in range(M)]
    mine = [m for m in range(M) if parts[m] % count == index]
    headers = None if fingerprint is None else [(CONFIG_HEADER, fingerprint)]
    for chunk in stream.chunks(chunk_size):
        for i in range(chunk.n_steps):
            t = chunk.t0 + i + 1
            for m in mine:
                msg = Data(t=t, client=m, X=chunk.X[i, m], y=chunk.y[i, m],
                           present=True if chunk.mask is None else bool(chunk.mask[i, m]),
                           optimum=None if chunk.optimum is None else chunk.optimum[i, m])
                producer.send(topic, value=encode(msg), key=keys[m], partition=parts[m],
                              headers=headers if t == 1 else None)
                sent += 1
    producer.flush(timeout=60)
    return sent


def main(argv=None) -> int:
    """Entry point: publish the stream of ``--config``; exit 0, or 1 with a one-line error."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--config", required=True, help="the run folder's config.yaml")
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--share", default="0/1", help="I/N: this is producer I of N (partitions p with p mod N = I)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s producer %(levelname)s %(message)s", stream=sys.stderr)
    log.info("code: %s", code_origin(__file__))
    try:
        check_broker(args.bootstrap)       # the same bounded check and message as every role and the CLI
    except (BrokerUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        from streamfl.generators.build import build_stream
        from streamfl.transport.spec import config_fingerprint, read_config
        index, _, count = args.share.partition("/")
        if not (index.isdigit() and count.isdigit()):
            raise ValueError(f"--share must be I/N, e.g. 0/2, got {args.share!r}")
        share = (int(index), int(count))
        cfg = read_config(args.config)
        stream = build_stream(cfg)
        producer = make_producer(args.bootstrap, f"streamfl-{args.run_id}-producer")
        try:
            n = publish_stream(stream, producer, Topics(args.run_id).data, args.partitions, cfg.chunk_size, share,
                               config_fingerprint(cfg))
        finally:
            producer.close(timeout=10)
        log.info("published %d DATA records (T=%d, M=%d)", n, stream.n_steps, stream.n_clients)
        return 0
    except Exception as e:
        log.error("%s: %s", type(e).__name__, e)
        print(f"error: producer: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
