"""A FedSEA worker: owns the clients of its data partitions and trains them online.

Worker i of N reads the data partitions Kafka's range assignor would give the
i-th of N group members (:func:`range_assignment`: consecutive blocks) and
owns the clients m with m mod P in them. Partitions are assigned explicitly
(``KafkaConsumer.assign``) under the run's group id, not through the group
rebalance protocol: a worker's clients live in its memory, so ownership must
never move mid-run, and kafka-python 3.0's eager rebalances (start-up joins,
a finished worker leaving) proved able to stall a worker for the session
timeout. For t = 1 … T the worker

1. waits until it has the DATA record of step t for every client it owns;
2. runs test-then-train for all of them at once (one :class:`StackedLinear`
   whose rows are its clients — the same arithmetic as the embedded engine);
3. publishes a LOSS record (the clients' losses and the models they played);
4. if τ divides t, publishes an UPDATE (sum of its clients' models and their
   number) for round r = t/τ, then blocks until the GLOBAL model of round r
   arrives on the global topic and loads it into all its clients.

The data wait and the barrier time out (``--timeout`` s) with a one-line
error naming what is missing.

Run as a process::

    python -m consumers.worker --bootstrap 127.0.0.1:9092 --run-id abc \\
        --config runs/x/config.yaml --partitions 4 --worker-id 0 --workers 2
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

import numpy as np

from streamfl.models import StackedLinear
from streamfl.transport.format import Data, FormatError, Global, Loss, Update, decode, encode
from streamfl.transport.spec import LearnerSpec
from streamfl.transport.topics import Topics, clients_of, dead_letter, key_of, make_producer, make_reader, quiet_kafka_logs

log = logging.getLogger("streamfl.worker")


class WorkerError(RuntimeError):
    """A worker cannot continue; the message is one line for the user."""


class ClientBlock:
    """The k clients of one worker, trained together (rows of one model array).

    Parameters
    ----------
    clients : sequence of int
        The owned client ids (sorted); row i is client ``clients[i]``.
    spec : LearnerSpec

    Attributes
    ----------
    W : ndarray (k, d, K)
        Current models; start at zero like the embedded engine.
    """

    def __init__(self, clients, spec: LearnerSpec):
        self.clients = np.asarray(clients, dtype=np.int64)
        self.model = StackedLinear(len(self.clients), spec.n_features, spec.task, spec.step_size,
                                   spec.n_classes, spec.radius)

    @property
    def W(self) -> np.ndarray:
        return self.model.W

    def step(self, t: int, X: np.ndarray, y: np.ndarray, mask: np.ndarray | None):
        """Test-then-train at step t.

        Parameters
        ----------
        X : ndarray (k, b, d); y : ndarray (k, b); mask : ndarray (k,) bool or None

        Returns
        -------
        losses : ndarray (k,)
            Mini-batch mean loss before the update (0 where masked).
        played : ndarray (k, d, K)
            Copy of the models used for the test.
        """
        played = self.model.W.copy()
        losses = self.model.test_then_train(X, y, t, mask)
        return losses, played

    def model_sum(self) -> np.ndarray:
        """Σ over the worker's clients of their models, shape (d, K) (same reduction as ``W.mean(axis=0)``)."""
        return self.model.W.sum(axis=0)

    def load(self, model: np.ndarray) -> None:
        """Broadcast the global model (d, K) into every client."""
        self.model.W[:] = model


class StepBuffer:
    """Collects DATA records per step until every owned client has one.

    Duplicates (re-delivered after a rebalance) and records of steps already
    processed or of clients not owned are ignored.

    Parameters
    ----------
    clients : sequence of int
    batch_size, n_features : int
        b and d, to preallocate each step's (k, b, d) block.
    """

    def __init__(self, clients, batch_size: int, n_features: int):
        self.index = {int(m): i for i, m in enumerate(clients)}
        self.k, self.b, self.d = len(self.index), batch_size, n_features
        self.pending: dict[int, list] = {}
        self.received = np.zeros(self.k, dtype=np.int64)   # highest step received per client
        self.done_upto = 0                                  # steps already popped

    def add(self, msg: Data) -> bool:
        """Store one record; False if it was ignored.

        Raises
        ------
        WorkerError
            If the record's shape does not match (b, d).
        """
        i = self.index.get(msg.client)
        if i is None or msg.t <= self.done_upto:
            return False
        if msg.X.shape != (self.b, self.d):
            raise WorkerError(f"DATA record of client {msg.client} at step {msg.t} has X {msg.X.shape}, "
                              f"expected ({self.b}, {self.d})")
        slot = self.pending.get(msg.t)
        if slot is None:
            slot = self.pending[msg.t] = [np.empty((self.k, self.b, self.d)), np.empty((self.k, self.b)),
                                          np.ones(self.k, bool), np.zeros(self.k, bool)]
        if slot[3][i]:
            return False
        slot[0][i], slot[1][i], slot[2][i], slot[3][i] = msg.X, msg.y, msg.present, True
        self.received[i] = max(self.received[i], msg.t)
        return True

    def pop(self, t: int):
        """(X (k,b,d), y (k,b), mask (k,) or None if all present) of step t, or None if incomplete."""
        slot = self.pending.get(t)
        if slot is None or not slot[3].all():
            return None
        del self.pending[t]
        self.done_upto = t
        mask = None if slot[2].all() else slot[2]
        return slot[0], slot[1], mask

    def missing(self, t: int) -> list[int]:
        """Client ids still missing for step t."""
        slot = self.pending.get(t)
        filled = np.zeros(self.k, bool) if slot is None else slot[3]
        ids = list(self.index)
        return [ids[i] for i in np.flatnonzero(~filled)]

    def complete(self, n_steps: int) -> bool:
        """True once every owned client's records up to step ``n_steps`` have arrived."""
        return bool(self.k == 0 or self.received.min() >= n_steps)


class Worker:
    """One worker process (see the module doc).

    Parameters
    ----------
    bootstrap : str
        HOST:PORT of the broker.
    run_id : str
    spec : LearnerSpec
    batch_size : int
        b.
    worker_id : int
        0 ≤ id < n_workers; the Kafka client id is ``streamfl-<run>-worker-<id>``.
    n_workers : int
        N, the number of workers sharing the data partitions.
    n_partitions : int
        P of the data topic.
    timeout : float
        Seconds without progress (data or global model) before giving up.
    """

    def __init__(self, bootstrap: str, run_id: str, spec: LearnerSpec, batch_size: int, worker_id: int,
                 n_workers: int, n_partitions: int, timeout: float = 60.0):
        if not 0 <= worker_id < n_workers <= n_partitions:
            raise WorkerError(f"need 0 ≤ worker id < workers ≤ partitions, got {worker_id}, {n_workers}, {n_partitions}")
        self.bootstrap, self.topics, self.spec = bootstrap, Topics(run_id), spec
        self.b, self.id, self.n_workers, self.P = batch_size, worker_id, n_workers, n_partitions
        self.timeout = timeout
        self.client_id = f"streamfl-{run_id}-worker-{worker_id}"
        self.partitions = range_assignment(worker_id, n_workers, n_partitions)
        self.clients = clients_of(self.partitions, spec.n_clients, n_partitions)
        self.block = ClientBlock(self.clients, spec)
        self.buffer = StepBuffer(self.clients, batch_size, spec.n_features)
        self.globals: dict[int, np.ndarray] = {}
        self.stop = False

    def _check_stop(self):
        if self.stop:
            raise SystemExit(143)

    def _ingest(self, partition: int, rec) -> None:
        """Decode one data record into the step buffer."""
        try:
            msg = decode(rec.value)
        except FormatError as e:
            dead_letter(self.producer, self.topics, rec.value, rec.key, e.reason, f"worker-{self.id}")
            self.producer.flush(timeout=10)
            raise WorkerError(f"worker {self.id}: malformed DATA record at partition {partition} "
                              f"offset {rec.offset}: {e}") from None
        if not isinstance(msg, Data):
            raise WorkerError(f"worker {self.id}: a {type(msg).__name__} record on the data topic "
                              f"(partition {partition} offset {rec.offset})")
        self.buffer.add(msg)

    def _read_data(self):
        for tp, records in self.consumer.poll(timeout_ms=100).items():
            for rec in records:
                self._ingest(tp.partition, rec)

    def _wait_global(self, r: int, t: int) -> np.ndarray:
        deadline = time.monotonic() + self.timeout
        while r not in self.globals:
            self._check_stop()
            for records in self.global_reader.poll(timeout_ms=100).values():
                for rec in records:
                    try:
                        msg = decode(rec.value)
                    except FormatError as e:
                        raise WorkerError(f"worker {self.id}: malformed GLOBAL record at offset {rec.offset}: {e}") from None
                    if isinstance(msg, Global) and msg.round >= r:
                        self.globals[msg.round] = msg.model
            if time.monotonic() > deadline:
                raise WorkerError(f"worker {self.id} waited {self.timeout:.0f} s at step {t} for the global model of "
                                  f"round {r}; the aggregator did not publish it (is it running? rejected updates "
                                  f"go to {self.topics.dead})")
        return self.globals.pop(r)

    def _step(self, t: int, X, y, mask):
        losses, played = self.block.step(t, X, y, mask)
        key = key_of(self.id)
        self.producer.send(self.topics.loss, key=key, partition=0,
                           value=encode(Loss(t=t, worker=self.id, clients=self.block.clients, losses=losses,
                                             played=played)))
        tau = self.spec.tau
        if tau is not None and t % tau == 0:
            r = t // tau
            self.producer.send(self.topics.updates, key=key, partition=0,
                               value=encode(Update(round=r, worker=self.id, n_clients=len(self.clients),
                                                   model_sum=self.block.model_sum())))
            self.producer.flush(timeout=30)
            self.block.load(self._wait_global(r, t))

    def run(self) -> None:
        """Process all T steps; raises WorkerError on failure, SystemExit(143) when stopped."""
        quiet_kafka_logs()
        from kafka import KafkaConsumer, TopicPartition
        self.producer = make_producer(self.bootstrap, self.client_id)
        self.global_reader = make_reader(self.bootstrap, self.client_id + "-global", self.topics.global_)
        # group_id only names the offsets; partitions are assigned explicitly (see the module doc)
        self.consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.topics.worker_group,
                                      client_id=self.client_id, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=20, bootstrap_timeout_ms=10000)
        try:
            tps = [TopicPartition(self.topics.data, p) for p in self.partitions]
            self.consumer.assign(tps)
            self.consumer.seek_to_beginning(*tps)
            log.info("worker %d reads partitions %s → clients %s", self.id, self.partitions, self.clients)
            T, t = self.spec.n_steps, 1
            last = time.monotonic()
            while t <= T:
                self._check_stop()
                self._read_data()
                while t <= T and (ready := self.buffer.pop(t)) is not None:
                    self._step(t, *ready)
                    t += 1
                    last = time.monotonic()
                if time.monotonic() - last > self.timeout:
                    raise WorkerError(f"worker {self.id}: no DATA for step {t} of clients {self.buffer.missing(t)} "
                                      f"within {self.timeout:.0f} s (is the producer running?)")
            self.producer.flush(timeout=30)
            log.info("worker %d finished %d steps", self.id, T)
        finally:
            for c in (self.consumer, self.global_reader):
                try:
                    c.close(autocommit=False)
                except Exception:
                    pass
            try:
                self.producer.close(timeout=10)
            except Exception:
                pass


def range_assignment(worker_id: int, n_workers: int, n_partitions: int) -> list[int]:
    """Worker ``worker_id``'s data partitions: Kafka's range assignment of P partitions to N workers.

    The first P mod N workers get ⌈P/N⌉ consecutive partitions, the others ⌊P/N⌋.

    >>> [range_assignment(i, 3, 4) for i in range(3)]
    [[0, 1], [2], [3]]
    """
    q, extra = divmod(n_partitions, n_workers)
    start = worker_id * q + min(worker_id, extra)
    return list(range(start, start + q + (1 if worker_id < extra else 0)))


def main(argv=None) -> int:
    """Entry point; exit 0, 143 on SIGTERM, or 1 with ``error: …`` on stderr."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--config", required=True, help="the run folder's config.yaml")
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker-{args.worker_id} %(levelname)s %(message)s",
                        stream=sys.stderr)
    worker = None

    def on_term(signum, frame):
        if worker is not None:
            worker.stop = True

    signal.signal(signal.SIGTERM, on_term)
    try:
        from streamfl.runtime.experiment import build_stream
        from streamfl.transport.spec import learner_spec, read_config
        cfg = read_config(args.config)
        stream = build_stream(cfg)
        worker = Worker(args.bootstrap, args.run_id, learner_spec(cfg, stream), stream.batch_size, args.worker_id,
                        args.workers, args.partitions, timeout=args.timeout)
        worker.run()
        return 0
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:
        print(f"error: worker {args.worker_id}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
