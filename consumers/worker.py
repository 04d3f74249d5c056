"""A FedSEA worker: a member of the run's consumer group that trains the clients of its partitions online.

Ownership
---------
All workers of a run subscribe to the data topic in ONE consumer group
(``streamfl.<run>.workers``, cooperative-sticky assignor). A worker owns the
clients m whose partition m mod P the group assigned to it; ownership moves
when workers join, leave or die, exactly as in Kafka Streams: the unit of
state is the client, its changelog is the compacted state topic
(:mod:`streamfl.transport.state`), and a worker that gets a partition restores
that partition's clients from the changelog before it consumes their data.

Per owned client the worker keeps its model x (d, K), its last completed step
t, the data offset from which its records of steps > t are read, the
highest step whose LOSS is already on the loss topic, and the highest round
whose contribution is already on the updates topic. Clients at the same
next step are trained together (one :class:`StackedLinear` over their rows —
the embedded engine's arithmetic, row by row). For each step s the worker

1. waits until it has the DATA record of step s of a client;
2. runs test-then-train for all its clients at step s at once;
3. publishes a LOSS record for the clients whose step s is not yet reported;
4. if τ divides s, holds the clients until GLOBAL(r), r = s/τ, arrives on the
   global topic; then loads it and checkpoints. Once every owned client has
   reached rτ, the worker sends ONE :class:`~streamfl.transport.format.Update`
   for round r: the sum of its clients' models (those that saw a sample in
   the round), naming the clients it covers (FedSEA, paper 002, Algorithm 1:
   the server needs only Σ_m x_{rτ,m}). With ``learner.compression`` it sends
   instead ONE :class:`~streamfl.transport.format.CompressedUpdate`: each
   participating client's payload C(x_{rτ,m} − x̄), x̄ the last global model
   loaded (zeros before the first), dither key (seed, m + 1, r − 1) — the
   embedded engine's upload (:class:`streamfl.runtime.learners.Federated`),
   byte for byte, so the aggregator decodes what the embedded server decodes.

A client never passes step rτ before it has round r's global model.

Streaming GMF (``learner.model: gmf``): the clients' state lives in a
:class:`consumers.gmf.GMFClients` (p, h, b, the items seen, the round
submodel; the global item table of each round rebuilt from the GMF_GLOBAL
records), not in (d, K) models. Clients at the same step are stepped
together on the table of their round (a client steps only once every
GLOBAL before its round has been read), each step's losses, ranks and
training negatives go out as one RANKED_LOSS, a round's upload as
GMF_UPDATE records (clients split so that a record stays under about
``UPDATE_BYTES``), and checkpoints are GMF_STATE records. The kernel's
draws depend on (seed, client, step) only, so the numbers equal the
embedded engine's whoever holds which client.

Exactly once: transactions and fencing
--------------------------------------
Everything a worker publishes — LOSS, UPDATE, STATE (checkpoints) and dead
letters — is written in Kafka transactions (transactional id
``streamfl-<run>-worker-<id>``), and every transaction also commits the
consumer-group offsets of the worker's data partitions with
``send_offsets_to_transaction(offsets, consumer.group_metadata())``. The
broker accepts that offset commit only from a current member of the group at
its current generation (KIP-447, the fencing Kafka Streams' exactly-once v2
relies on; kafka-python 3.0.12 sends generation and member id in
TxnOffsetCommit v3), so a worker that was paused past its session timeout
(a zombie: its partitions have moved to another worker) cannot commit: its
transaction is aborted and every ``read_committed`` reader — the tracker, the
aggregator, the other workers' restoration — never sees what it wrote. A
second worker started with the same id fences the first by the producer
epoch. Transactions were chosen over checking the generation before each
publish because only the broker knows that a member has been expelled: a
paused process that wakes up does not know it (for about a heartbeat it
still believes it owns its partitions), so a client-side check cannot close
the window; the broker's check at commit time does.

A transaction normally spans one round: it starts with the round's
checkpoints, holds the LOSS records of steps (r−1)τ+1 … rτ and ends with
the round's UPDATE (the aggregator needs it to publish GLOBAL(r), so it is
committed at once). A transaction open for ``COMMIT_INTERVAL`` s while the
worker waits for data is committed too (readers stop at the first open
transaction), as is the final checkpoint. The transaction timeout is 10 s:
the broker aborts a transaction left open longer by a frozen or dead worker.

A commit that the broker refuses (generation or member stale, the producer
fenced or its transaction timed out) aborts the transaction; the worker then
forgets every client it held (its in-memory state is no longer what the
topics say), rejoins the group if it was expelled, and restores whatever
partitions it is assigned from the changelog like any new owner. It says so
once in its log (later fences at INFO). On revocation (cooperative
rebalance) the listener commits the open transaction before the partitions
move, so the next owner restores from it; on loss (the member was expelled)
it aborts it.

Checkpoints
-----------
A checkpoint of client m at step t is a :class:`~streamfl.transport.format.ClientState`
record (model, t, data offset, loss offset) on the state topic, key m,
partition m mod P, written at every round boundary t = rτ right after
GLOBAL(r) is loaded (all clients then hold the same model) and at t = T
(also every 100 steps when τ is unset). Its data offset is one past the
last DATA record the client learned from (never a dead-lettered one). The
offsets committed with each transaction are the smallest checkpointed
offset of each partition's clients; their metadata names the round and
hashes of the UPDATEs that cover the partition's clients (the aggregator's
proof that an update comes from the partition's owner, see
:mod:`consumers.aggregator`).

Restoration
-----------
On assignment of partition p (listener → main thread) the worker pauses p,
reads the state topic's partition p to its end (watchdog: ``--restore-timeout``
s without progress raises :class:`~streamfl.transport.state.RestoreStalled`),
takes each client's latest checkpoint (none: zero model at t = 0, offset 0),
scans the loss topic from the checkpoints' loss offset for steps already
reported and the updates topic (from where the checkpoint's round ended, per
the GLOBAL record's ``updates_offset`` header) for round contributions already
sent, seeks p to the smallest saved offset and resumes it. The scans wait up
to ``SETTLE`` s for transactions open when they start (a previous owner's
last commit), then stop at the first open one. Replaying from the
checkpoint gives the same numbers (streams and training are deterministic);
LOSS records of already reported steps and contributions already on the
updates topic are not sent again. A worker given back a partition it held
before restores it the same way: its in-memory state may be older than the
changelog. Records fetched for a partition not (yet) restored are dropped;
they are read again after the seek.

DATA records
------------
Client m's records must be on partition m mod P with key m, one per step, in
step order. Per client the worker remembers the offset after the last record
it took, so records read again after a seek are recognised. A new record
for a step already received is a duplicate: counted and skipped when its
bytes equal the first one's, else dead-lettered (``duplicate``; the first
one stands). A record that skips steps is dead-lettered (``out_of_order``),
one on the wrong partition or with the wrong key (``wrong_partition``).

Liveness
--------
The main loop calls ``poll()`` every iteration, also while clients wait at the
averaging barrier, so the member is never kicked out for not polling and
rebalances complete; kafka-python's IO thread heartbeats
(``session_timeout_ms`` 6 s, ``heartbeat_interval_ms`` 1 s, so a killed
worker's partitions move within about 6-10 s). Records read ahead of training
are buffered in memory: pausing partitions for back-pressure is off, because
with kafka-python 3.0.12 a partition paused and resumed mid-run stopped
delivering records. A worker exits 0 once the state topic
holds a step-T checkpoint of every client of the run (the run is complete);
an owned client without progress for ``--timeout`` s is a
:class:`WorkerError` naming what is missing: the aggregator's rejection of
an update of the round (from the dead-letter topic), the clients whose
update of the round is not on the updates topic, or the client and step
whose DATA record is missing (time the process spent paused, by SIGSTOP or
a frozen machine, is not counted). A client whose model becomes inf or NaN stops
the worker at once with the embedded engine's divergence message (the
update would be rejected and the round never completed).

Run as a process (``--worker-id`` names the member; ``--workers`` is accepted
for compatibility and ignored — the group decides the assignment)::

    python -m consumers.worker --bootstrap 127.0.0.1:9092 --run-id abc \\
        --config runs/x/config.yaml --partitions 4 --worker-id 0
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import hashlib
import signal
import sys
import threading
import time

import numpy as np

from consumers.aggregator import UPDATES_OFFSET
from streamfl.models import StackedLinear
from streamfl.runtime.engine import MAIN, divergence_message
from streamfl.transport.format import (ClientState, CompressedUpdate, Data, FormatError, GMFGlobal, GMFState,
                                       GMFUpdate, Global, Loss, RankedLoss, Update, decode, encode)
from streamfl.transport.spec import (CONFIG_HEADER, ConfigMismatch, LearnerSpec, check_fingerprint, code_origin,
                                     config_fingerprint, upload_compressor)
from streamfl.transport.fencing import format_proof, parse_proof, update_digest
from streamfl.transport.security import client_config
from streamfl.transport.state import (RestoreStalled, StateStore, create_state_topic, read_to_end, resilient_reader,
                                      send_states, transactional_producer)
from streamfl.transport.topics import (FETCH_MAX_WAIT_MS, BrokerUnavailable, Topics, check_broker, clients_of,
                                       dead_letter_headers, dead_letter_value, key_of, quiet_kafka_logs)

log = logging.getLogger("streamfl.worker")


class WorkerError(RuntimeError):
    """A worker cannot continue; the message is one line for the user."""


def _unwritten(futures: list, wait: float = 5.0) -> list[str]:
    """Why each record future in ``futures`` was not written (empty: all acknowledged by the broker).

    A future still pending is given up to ``wait`` s in all before it counts as unwritten.
    """
    deadline, out = time.monotonic() + wait, []
    for f in futures:
        try:
            f.get(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as e:
            out.append(type(e).__name__)
    return out


def _ids(ids: list, limit: int = 20) -> str:
    """A list of client ids for a one-line message: all of them up to ``limit``, else the first ones and a count."""
    if len(ids) <= limit:
        return str(list(ids))
    return f"[{', '.join(map(str, ids[:limit]))}, …] ({len(ids)} in all)"


class Fenced(Exception):
    """The broker refused this worker's transaction: it no longer owns what it wrote (see the module doc)."""


class DuplicateWorker(WorkerError):
    """Another process uses this worker's id (and so its transactional id) and keeps fencing it."""


FENCED_EXIT = 3              # exit code of a worker stopped by DuplicateWorker


CHECKPOINT_EVERY = 100      # steps between checkpoints when τ is unset
# Per-client int64 state, one row per owned client: t last completed step; off data offset to resume from;
# reported highest step on the loss topic; wait round whose GLOBAL the client waits for (0: none); ckpt step
# of its last checkpoint; loss_from loss offset to scan from; received highest step buffered; seen steps
# with a sample in the current round; sent highest round whose contribution is on the updates topic;
# next_off data offset after the last record taken (records below it are re-reads after a seek).
_PER_CLIENT = ("t", "off", "reported", "wait", "ckpt", "loss_from", "received", "seen", "sent", "next_off")
JOIN_POLL_MS = 10000        # poll timeout while a group join is pending (see Worker._join_pending)
COMMIT_INTERVAL = 0.1       # s an open transaction may wait for data before it is committed
TRANSACTION_TIMEOUT = 10.0  # s after which the broker aborts a transaction left open (a frozen worker's)
SETTLE = 3.0                # s restoration scans wait for transactions open when they start
UPDATE_BYTES = 512 * 1024   # about the largest GMF_UPDATE record (producers send at most 1 MiB per request)


class _TxnSender:
    """Adapter: ``send`` of a producer-like object that writes into the worker's open transaction."""

    def __init__(self, worker):
        self.worker = worker

    def send(self, topic, value=None, key=None, partition=None, headers=None):
        return self.worker._send(topic, value, key, partition, headers)


class Worker:
    """One worker process: a consumer-group member owning clients (see the module doc).

    Parameters
    ----------
    bootstrap : str
        HOST:PORT of the broker.
    run_id : str
    spec : LearnerSpec
    batch_size : int
        b.
    worker_id : int
        ≥ 0; names the member (Kafka client id ``streamfl-<run>-worker-<id>``) and its records.
    n_workers : int
        Ignored (kept for compatibility); the consumer group assigns partitions.
    n_partitions : int
        P of the data topic.
    timeout : float
        Seconds an owned, unfinished client may go without progress (data or
        global model) before :class:`WorkerError`.
    restore_timeout : float
        Watchdog of restoration: seconds without progress while reading the
        state or loss topic before :class:`WorkerError`.
    session_timeout : float
        Consumer-group session timeout, s (≥ 6, the broker's default minimum):
        how long a silent (killed) worker keeps its partitions.
    """

    def __init__(self, bootstrap: str, run_id: str, spec: LearnerSpec, batch_size: int, worker_id: int,
                 n_workers: int = 1, n_partitions: int = 1, timeout: float = 60.0, restore_timeout: float = 30.0,
                 session_timeout: float = 6.0, config=None, gmf=None):
        if worker_id < 0 or n_partitions < 1:
            raise WorkerError(f"need worker id ≥ 0 and partitions ≥ 1, got {worker_id}, {n_partitions}")
        self.bootstrap, self.run_id, self.topics, self.spec = bootstrap, run_id, Topics(run_id), spec
        self.b, self.id, self.P = batch_size, worker_id, n_partitions
        self.M, self.T, self.tau = spec.n_clients, spec.n_steps, spec.tau
        self.timeout, self.restore_timeout, self.session_timeout = timeout, restore_timeout, session_timeout
        self.every = self.tau if self.tau is not None else CHECKPOINT_EVERY
        self.client_id = f"streamfl-{run_id}-worker-{worker_id}"
        K = spec.n_classes if spec.task == "softmax" else 1
        self.shape = (spec.n_features, K)
        self._set_rows([], {})
        self.pending: dict[int, dict[int, tuple]] = {}   # step → client → (X, y, present, offset)
        self.globals: dict[int, Global] = {}
        self.updates_from: dict[int, int] = {}            # round r → updates-topic offset where round r+1 starts
        self.owned: set[int] = set()                       # partitions restored and being processed
        self.target: set[int] = set()                      # the group's current assignment (listener)
        self.revoked: set[int] = set()                     # revoked since the main thread last looked
        self.last_loss_offset = -1
        self._last_loss_future = None
        self._txn_futures: list = []   # futures of the records sent in the open transaction
        self._models: dict[int, StackedLinear] = {}
        self.stop = False
        self.rejected = 0           # DATA records sent to the dead-letter topic
        self.duplicates = 0         # bit-identical DATA duplicates counted once
        self.dead_seen: set[tuple[int, int]] = set()   # (partition, offset) already dead-lettered
        self.data_memo: dict[int, dict[int, bytes]] = {}   # client → step → digest of the DATA record taken
        self.steps_done = 0
        # transactions (see the module doc): the lock orders the main thread and the rebalance listener
        self._txn_lock = threading.RLock()
        self._txn_open = False
        self._txn_since = 0.0
        self._txn_meta = None       # group metadata of the open transaction (generation, member id)
        self.commit_offsets: dict[int, int] = {}        # partition → offset committed with each transaction
        self.proof: dict[int, tuple[int, list]] = {}    # partition → (round, update digests) in the offsets' metadata
        self.fences = 0             # transactions the broker refused
        self._producer_fences = 0   # producers fenced since the last successful commit
        self.commits = 0            # transactions committed
        self._dropped = False       # set by the listener when the member lost its partitions
        # config fingerprints (streamfl.transport.spec): DATA records are checked, LOSS records carry one
        self.data_fingerprint = None if config is None else config_fingerprint(config)
        self.loss_headers = None if config is None else [(CONFIG_HEADER, config_fingerprint(config, learner=True))]
        # learner.compression: per-client compressed uploads (CompressedUpdate) instead of one pre-summed Update
        self.compressor = None if config is None else upload_compressor(config)
        self.seed = 0 if config is None else int(config.seed)
        # streaming GMF (consumers.gmf.GMFClients): the clients' state lives there, not in W
        self.gmf = gmf
        self.globals_upto = 0       # every GLOBAL of rounds 1 … globals_upto has been read

    # ---- per-client arrays ---------------------------------------------------------------------------
    def _set_rows(self, clients, values: dict) -> None:
        """Rebuild the per-client arrays for ``clients`` (sorted); ``values`` maps array name → {client: value}."""
        self.clients = np.asarray(sorted(clients), dtype=np.int64)
        self.row = {int(c): i for i, c in enumerate(self.clients)}
        k = len(self.clients)
        self.W = np.zeros((k, *self.shape))
        for name in _PER_CLIENT:
            setattr(self, name, np.zeros(k, dtype=np.int64))
        for name, by_client in values.items():
            arr = getattr(self, name)
            for c, v in by_client.items():
                arr[self.row[c]] = v

    def _snapshot(self) -> dict:
        names = ("W",) + _PER_CLIENT
        return {n: {int(c): getattr(self, n)[i].copy() if n == "W" else int(getattr(self, n)[i])
                    for i, c in enumerate(self.clients)} for n in names}

    def _still_owned(self, rows: np.ndarray) -> np.ndarray:
        """Mask of ``rows`` whose partition the group has not revoked (the listener may have, meanwhile)."""
        target = self.target
        return np.fromiter((int(c) % self.P in target for c in self.clients[rows]), bool, len(rows))

    def _partition_rows(self, p: int) -> np.ndarray:
        return np.flatnonzero(self.clients % self.P == p)

    # ---- Kafka plumbing --------------------------------------------------------------------------------
    def _check_stop(self):
        if self.stop:
            raise SystemExit(143)

    def _make_consumer(self):
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        try:
            from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as Assignor
        except ImportError:      # older kafka-python: eager range assignment
            from kafka.coordinator.assignors.range import RangePartitionAssignor as Assignor
        worker = self

        class Listener(ConsumerRebalanceListener):
            """Runs on kafka-python's IO thread: no blocking consumer calls here (see the module doc)."""

            def on_partitions_revoked(self, revoked):
                worker._on_revoked(revoked, flush=True)

            def on_partitions_lost(self, lost):
                worker._on_revoked(lost, flush=False)

            def on_partitions_assigned(self, assigned):
                worker._on_assigned(assigned)

        session = int(self.session_timeout * 1000)
        self.consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, **client_config(), group_id=self.topics.worker_group,
            client_id=self.client_id, isolation_level="read_committed",
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            bootstrap_timeout_ms=10000, partition_assignment_strategy=(Assignor,),
            session_timeout_ms=session, heartbeat_interval_ms=max(500, session // 6),
            max_poll_interval_ms=max(30000, int(4 * self.timeout * 1000)), request_timeout_ms=15000,
            reconnect_backoff_max_ms=1000, retry_backoff_ms=100)
        self.consumer.subscribe([self.topics.data], listener=Listener())

    def _tp(self, p: int):
        from kafka import TopicPartition
        return TopicPartition(self.topics.data, p)

    def _on_revoked(self, tps, flush: bool) -> None:
        """Revoked (``flush``): commit the open transaction, so the next owner restores from it.
        Lost (the member was expelled): abort it — the partitions may be owned by another worker already."""
        ps = {tp.partition for tp in tps if tp.topic == self.topics.data}
        with self._txn_lock:
            self.target -= ps          # first: from now on the main thread sends nothing for these clients
            self.revoked |= ps
            if flush:
                try:
                    self._commit(self.consumer.group_metadata())
                except Fenced:
                    self._dropped = True
            elif ps:
                self._abort("partitions lost")
                self._dropped = True
        log.info("partitions %s revoked%s", sorted(ps), "" if flush else " (lost)")

    def _on_assigned(self, tps) -> None:
        tps = [tp for tp in tps if tp.topic == self.topics.data]
        self.consumer.pause(*tps)         # resumed after restoration (local call, safe on the IO thread)
        self.target |= {tp.partition for tp in tps}
        log.info("partitions %s assigned", sorted(tp.partition for tp in tps))

    def _apply_assignment(self) -> None:
        """Drop revoked partitions' clients, restore newly assigned ones (main thread).

        A partition revoked (or lost) and given back is restored from the
        changelog like a new one; after a fence every partition is.
        """
        with self._txn_lock:
            if self._dropped:
                self._drop_all()
            target, revoked = set(self.target), set(self.revoked)
            self.revoked -= revoked
        gone, new = self.owned - target, target - self.owned
        reset = (self.owned & target & revoked)        # revoked and given back: the changelog may be newer
        if not (gone or new or reset):
            return
        self._commit()         # what was done so far is committed before the clients change hands
        gone |= reset
        new |= reset
        keep = [c for c in self.clients.tolist() if c % self.P not in gone]
        snap = self._snapshot()
        self._set_rows(keep, {n: {c: v for c, v in d.items() if c % self.P not in gone} for n, d in snap.items()})
        drop = gone | reset
        for s in list(self.pending):
            slot = self.pending[s]
            for c in [c for c in slot if c % self.P in drop]:
                del slot[c]
            if not slot:
                del self.pending[s]
        self.owned -= gone
        for c in [c for c in self.data_memo if c % self.P in gone]:
            del self.data_memo[c]
        for p in gone:
            self.commit_offsets.pop(p, None)
            self.proof.pop(p, None)
        if new:
            self._restore(sorted(new))
        log.info("owns partitions %s → clients %s (dropped %s, restored %s)", sorted(self.owned),
                 self.clients.tolist(), sorted(gone), sorted(new))

    # ---- transactions --------------------------------------------------------------------------------
    def _send(self, topic: str, value, key, partition: int, headers=None):
        """Send one record inside the open transaction (begun here if none is); return its future.

        Raises :class:`Fenced` (after aborting) when the producer cannot send: a
        producer with the same transactional id fenced it, or its transaction failed.
        """
        from kafka.errors import KafkaError
        with self._txn_lock:
            try:
                if not self._txn_open:
                    self._txn_open, self._txn_since = True, time.monotonic()   # so a failure below is aborted
                    self._txn_futures = []
                    self.producer.begin_transaction()
                future = self.producer.send(topic, value=value, key=key, partition=partition, headers=headers)
                self._txn_futures.append(future)
                return future
            except KafkaError as e:    # e.g. fenced by a producer with the same transactional id (a twin)
                why = str(e) if str(e).startswith(type(e).__name__) else f"{type(e).__name__}: {e}"
                self._abort(why)
                raise Fenced(why) from None

    def _offsets(self) -> dict:
        from kafka import OffsetAndMetadata
        out = {}
        for p in sorted(self.owned | set(self.commit_offsets)):
            if p not in self.target:
                continue
            r, digests = self.proof.get(p, (0, []))
            out[self._tp(p)] = OffsetAndMetadata(int(self.commit_offsets.get(p, 0)), format_proof(r, digests), -1)
        return out

    def _commit(self, meta=None) -> None:
        """Commit the open transaction with the data offsets (nothing to do if none is open).

        ``meta`` (default: the consumer's group metadata now) is what the broker
        checks. Raises :class:`Fenced` (after aborting) when the broker refuses.
        """
        with self._txn_lock:
            if not self._txn_open:
                return
            meta = self.consumer.group_metadata() if meta is None else meta
            try:
                if meta.generation_id < 0 or not meta.member_id:
                    raise Fenced(f"not a member of {self.topics.worker_group} (generation {meta.generation_id})")
                offsets = self._offsets()
                if offsets:
                    self.producer.send_offsets_to_transaction(offsets, meta)
                self.producer.commit_transaction()
                lost = _unwritten(self._txn_futures)
                if lost:
                    # kafka-python ends a transaction none of whose records reached the broker without an
                    # EndTxn and reports success (a producer fenced by a twin): nothing of it is visible
                    raise Fenced(f"{len(lost)} of {len(self._txn_futures)} record(s) of the committed transaction "
                                 f"were not written ({lost[0]})")
                self._txn_open = False
                self._txn_futures = []
                self._producer_fences = 0
                self.commits += 1
            except Fenced as e:
                self._abort(str(e))
                raise
            except Exception as e:
                self._abort(f"{type(e).__name__}: {e}")
                raise Fenced(f"{type(e).__name__}: {e}") from None

    def _abort(self, why: str) -> None:
        """Abort the open transaction (a new producer if this one is unusable); say it once at WARNING."""
        with self._txn_lock:
            if not self._txn_open:
                return
            self._txn_open = False
            self.fences += 1
            (log.warning if self.fences == 1 else log.info)(
                "worker %d: transaction aborted (%s): nothing it wrote since its last commit is visible; its "
                "clients are restored from the changelog%s", self.id, why,
                "" if self.fences == 1 else f" (fence {self.fences})")
            try:
                self.producer.abort_transaction()
            except Exception as e:     # fenced producer or fatal state: start a new one (same transactional id)
                log.info("abort failed (%s); new transactional producer", type(e).__name__)
                try:
                    self.producer.close(timeout=0)
                except Exception:
                    pass
                self._producer_fences += 1
                if self._producer_fences >= 3:   # a timed-out transaction fences once; a twin fences every time
                    raise DuplicateWorker(f"worker {self.id}: fenced {self._producer_fences} times in a row by "
                                          f"another producer with transactional id "
                                          f"streamfl-{self.run_id}-worker-{self.id}: is a second worker running "
                                          f"with --worker-id {self.id}? Give each worker its own id") from None
                self.producer = self._make_producer()

    def _make_producer(self):
        return transactional_producer(self.bootstrap, self.client_id, f"streamfl-{self.run_id}-worker-{self.id}",
                                      TRANSACTION_TIMEOUT)

    def _drop_all(self) -> None:
        """Forget every client (after a fence): the assigned partitions are restored from the changelog."""
        with self._txn_lock:
            self._dropped = False
        if len(self.clients):
            log.info("worker %d: dropped clients %s; rejoining the group", self.id, self.clients.tolist())
        try:       # an expelled member learns it at its next heartbeat; ask now, before restoring anything
            self.consumer._coordinator.request_rejoin()
        except AttributeError:
            pass
        self._set_rows([], {})
        self.pending.clear()
        self.data_memo.clear()
        self.owned = set()
        self.commit_offsets.clear()
        self.proof.clear()

    def _restore(self, parts: list[int]) -> None:
        """Restore the clients of ``parts`` from the state changelog, seek and resume their data partitions."""
        started = time.monotonic()
        try:
            self.store.catch_up(parts, self.restore_timeout)
        except RestoreStalled as e:
            raise WorkerError(f"worker {self.id}: {e}") from None
        new_clients = clients_of(parts, self.M, self.P)
        states = {c: self.store.latest.get(c) for c in new_clients}
        loss_from = min((s.loss_offset if s is not None else 0) for s in states.values()) if states else 0
        reported = self._scan_reported(set(new_clients), loss_from)
        first_round = min((s.t if s is not None else 0) for s in states.values()) // (self.tau or 1) if states else 0
        sent = self._scan_sent(set(new_clients), self.updates_from.get(first_round, 0))
        self._scan_dead(set(parts))
        snap = self._snapshot()
        for c in new_clients:
            s = states[c]
            t = 0 if s is None else s.t
            if self.gmf is not None:
                if s is not None and not isinstance(s, GMFState):
                    raise WorkerError(f"worker {self.id}: the checkpoint of client {c} is a {type(s).__name__}, "
                                      f"not a GMF_STATE: the state topic is not this streaming GMF run's")
                self.gmf.restore(c, s)
                snap["W"][c] = np.zeros(self.shape)
            else:
                snap["W"][c] = np.zeros(self.shape) if s is None else s.model.reshape(self.shape)
            snap["t"][c], snap["ckpt"][c], snap["received"][c] = t, t, t
            snap["off"][c] = 0 if s is None else s.offset
            snap["loss_from"][c] = 0 if s is None else s.loss_offset
            snap["reported"][c] = max(t, reported.get(c, 0))
            snap["wait"][c] = snap["seen"][c] = 0            # checkpoints are taken at round boundaries
            snap["sent"][c] = sent.get(c, 0)
            snap["next_off"][c] = snap["off"][c]
        self._set_rows(sorted(set(self.clients.tolist()) | set(new_clients)), snap)
        for p in parts:
            rows = self._partition_rows(p)
            start = int(self.off[rows].min()) if len(rows) else 0
            self.consumer.seek(self._tp(p), start)
            self.consumer.resume(self._tp(p))
            self.owned.add(p)
            self.commit_offsets[p] = start
            self.proof[p] = self._committed_proof(p)
        steps = sorted({(c, int(self.t[self.row[c]])) for c in new_clients}, key=lambda x: x[0])
        log.info("restored partitions %s in %.2f s: (client, step) %s, reported up to %s", parts,
                 time.monotonic() - started, steps, {c: int(self.reported[self.row[c]]) for c in new_clients})

    def _committed_proof(self, p: int) -> tuple[int, list]:
        """(round, update digests) in the metadata of partition p's committed offset (the previous owner's)."""
        try:
            om = self.consumer.committed(self._tp(p), metadata=True)
        except Exception as e:
            log.info("committed offset of partition %d unreadable (%s)", p, type(e).__name__)
            return (0, [])
        return parse_proof(om.metadata if om is not None else "")

    def _scan_dead(self, parts: set) -> None:
        """Remember which DATA records of ``parts`` are on the dead-letter topic already (headers
        ``partition``/``offset``), so re-reading them after a rebalance does not send them twice."""
        def on_record(rec):
            h = {k: v.decode() for k, v in rec.headers}
            if "partition" in h and "offset" in h and int(h["partition"]) in parts:
                self.dead_seen.add((int(h["partition"]), int(h["offset"])))

        reader = resilient_reader(self.bootstrap, self.client_id + "-dead", self.topics.dead)
        try:
            read_to_end(reader, self.topics.dead, on_record, self.restore_timeout, settle=SETTLE)
        except RestoreStalled as e:
            raise WorkerError(f"worker {self.id}: restoring: {e}") from None
        finally:
            reader.close()

    def _scan(self, reader, topic: str, start: int, on_msg) -> None:
        """Read ``topic`` from offset ``start`` to its current end, calling ``on_msg(msg)`` for every
        well-formed record (restoration; watchdog ``restore_timeout``)."""
        def on_record(rec):
            try:
                msg = decode(rec.value)
            except FormatError:
                return
            on_msg(msg)

        try:
            read_to_end(reader, topic, on_record, self.restore_timeout, start, settle=SETTLE)
        except RestoreStalled as e:
            raise WorkerError(f"worker {self.id}: restoring: {e}") from None

    def _scan_reported(self, clients: set, start: int) -> dict:
        """Highest step already on the loss topic per client of ``clients``, reading from offset ``start``.

        Only records the tracker counts are taken into account: a LOSS of
        this run's model shape, or for a GMF run a RANKED_LOSS with its N
        negatives (a record the tracker dead-letters reports nothing).
        """
        out: dict[int, int] = {}
        if self.gmf is not None:
            def counts(msg):
                return isinstance(msg, RankedLoss) and msg.negatives.shape[1] == self.gmf.N
        else:
            def counts(msg):
                return isinstance(msg, Loss) and msg.played.shape[1:] == self.shape

        def on_msg(msg):
            if counts(msg):
                for c in msg.clients.tolist():
                    if c in clients and msg.t > out.get(c, 0):
                        out[c] = msg.t

        if clients:
            self._scan(self.loss_reader, self.topics.loss, start, on_msg)
        return out

    def _scan_sent(self, clients: set, start: int) -> dict:
        """Highest round whose contribution is already on the updates topic, per client of ``clients``.

        Records of the other model kind, and GMF updates the aggregator
        rejects on arrival (an item id outside the table, rows of another
        width: :func:`consumers.gmf.update_problem`), contribute nothing.
        """
        from consumers.gmf import update_problem
        out: dict[int, int] = {}
        kinds = (GMFUpdate,) if self.gmf is not None else (Update, CompressedUpdate)

        def on_msg(msg):
            if isinstance(msg, kinds) and not (self.gmf is not None and update_problem(msg, self.gmf.I, self.gmf.D)):
                for c in msg.clients.tolist():
                    if c in clients and msg.round > out.get(c, 0):
                        out[c] = msg.round

        if clients and self.tau is not None:
            self._scan(self.updates_reader, self.topics.updates, start, on_msg)
        return out

    # ---- data, globals ---------------------------------------------------------------------------------
    def _ingest(self, partition: int, rec) -> None:
        """Store one data record (ignored unless its client is owned; see "DATA records" in the module doc).

        A record that is not a valid DATA record of this run — malformed
        bytes, NaN/inf values, another message type, a client id outside
        0..M-1, X not of shape (b, d), a partition or key that is not its
        client's, a second record for a step already received with other
        bytes, or a skipped step — is copied unchanged to the run's
        dead-letter topic (headers ``reason``, ``source``, ``detail``), logged,
        counted in :attr:`rejected`, and skipped: the worker keeps running.
        """
        i = None
        try:
            msg = decode(rec.value)
            if not isinstance(msg, Data):
                raise FormatError("not_data", f"a {type(msg).__name__} record on the data topic")
            if not 0 <= msg.client < self.spec.n_clients:
                raise FormatError("bad_field", f"client {msg.client} is not in 0..{self.spec.n_clients - 1}")
            if msg.X.shape != (self.b, self.spec.n_features):
                raise FormatError("shape_mismatch", f"X has shape {msg.X.shape}, this run's DATA records are "
                                                    f"(b, d) = ({self.b}, {self.spec.n_features})")
            if msg.client % self.P != partition or (rec.key is not None and bytes(rec.key) != key_of(msg.client)):
                raise FormatError("wrong_partition", f"client {msg.client}'s records go to partition "
                                                     f"{msg.client % self.P} with key {msg.client}; this one is on "
                                                     f"partition {partition} with key {rec.key!r}")
            i = self.row.get(msg.client)
            if i is None or rec.offset < self.next_off[i]:
                return            # not ours, or read again after a seek (taken, skipped or dead-lettered before)
            self.next_off[i] = rec.offset + 1
            last = int(self.received[i])
            if msg.t <= last:
                digest = self.data_memo.get(msg.client, {}).get(msg.t)
                if digest is not None and digest == hashlib.blake2b(bytes(rec.value), digest_size=16).digest():
                    self.duplicates += 1
                    log.info("worker %d: DATA of client %d step %d at partition %d offset %d repeats the record "
                             "taken (same bytes): counted once", self.id, msg.client, msg.t, partition, rec.offset)
                    return
                raise FormatError("duplicate", f"client {msg.client} step {msg.t} was received already ("
                                               + ("this record's bytes differ" if digest is not None else
                                                  "the first record is no longer held to compare with")
                                               + "); the first one stands")
            if msg.t != last + 1:
                raise FormatError("out_of_order", f"client {msg.client}: step {msg.t} after step {last} "
                                                  f"(one record per step, in order)")
        except FormatError as e:
            if (partition, rec.offset) in self.dead_seen:
                return        # re-read after a rebalance: dead-lettered already (by this or the previous owner)
            self.rejected += 1
            log.warning("worker %d: rejected DATA record at partition %d offset %d -> %s: %s",
                        self.id, partition, rec.offset, self.topics.dead, e)
            self.dead_seen.add((partition, rec.offset))
            with self._txn_lock:
                if partition not in self.target:
                    return
                self._send(self.topics.dead, dead_letter_value(rec.value), rec.key, 0,
                           dead_letter_headers(e.reason, f"worker-{self.id}", e.detail, (partition, rec.offset)))
            return
        if self.data_fingerprint is not None:
            try:
                check_fingerprint(rec.headers, self.data_fingerprint,
                                  f"the DATA record at partition {partition} offset {rec.offset}")
            except ConfigMismatch as e:
                raise WorkerError(f"worker {self.id}: {e}") from None
        self.pending.setdefault(msg.t, {})[msg.client] = (msg.X, msg.y, msg.present, rec.offset)
        self.received[i] = msg.t
        self.data_memo.setdefault(msg.client, {})[msg.t] = hashlib.blake2b(bytes(rec.value), digest_size=16).digest()

    def _join_pending(self) -> bool:
        """True while a group (re-)join is under way; repairs kafka-python 3.0.12's lost-join state.

        kafka-python runs JoinGroup+SyncGroup as a task on its IO thread and
        only applies the result (assignment, rebalance listener, heartbeats
        re-enabled) inside a ``poll()`` that is awaiting the task. If the task
        completes after a short ``poll(timeout_ms)`` gave up waiting, the next
        poll sees ``need_rejoin() == False`` and never applies it: the member
        keeps no partitions, sends no heartbeats and is expelled after the
        session timeout, never to rejoin — the start-up stalls seen with
        explicit timeouts of a few ms. The worker therefore drives a pending
        join with the coordinator's own ``poll`` and a long timeout (it
        returns as soon as the join is applied), and if the lost-join state
        happens anyway it requests a fresh join.
        """
        coord = getattr(self.consumer, "_coordinator", None)
        try:
            task = coord._join_task
            if coord.rejoining and (task is None or task.is_done) and not coord.need_rejoin():
                log.warning("group join completed outside poll() (kafka-python); joining again")
                coord.request_rejoin()
                return True
            return bool(coord.need_rejoin() or (task is not None and not task.is_done))
        except AttributeError:         # another kafka-python version: no work-around needed/possible
            return False

    def _read_data(self, timeout_ms: int) -> None:
        if self._join_pending():     # let the join complete inside one call (and return right after it)
            self.consumer._coordinator.poll(timeout_ms=JOIN_POLL_MS)
        for tp, records in self.consumer.poll(timeout_ms=timeout_ms).items():
            if tp.partition not in self.owned:
                continue          # not restored yet (or just revoked): read again after the seek
            for rec in records:
                self._ingest(tp.partition, rec)

    def _read_globals(self, timeout_ms: int) -> None:
        for records in self.global_reader.poll(timeout_ms=timeout_ms).values():
            for rec in records:
                try:
                    msg = decode(rec.value)
                    if self.gmf is not None:
                        self._check_gmf_global(msg)
                    elif not isinstance(msg, Global):
                        raise FormatError("bad_type", f"a {type(msg).__name__} record on the global topic")
                    elif msg.model.shape != self.shape:
                        raise FormatError("shape_mismatch", f"model of shape {msg.model.shape}, this run's is "
                                                            f"{self.shape}")
                except FormatError as e:     # a stray writer's record: skipped (the aggregator's records stand)
                    log.warning("worker %d: skipped a record at offset %d of %s that is not a GLOBAL of this run: "
                                "%s", self.id, rec.offset, self.topics.global_, e)
                    continue
                self.globals.setdefault(msg.round, msg)
                hdr = dict(rec.headers or ()).get(UPDATES_OFFSET)
                if hdr:
                    self.updates_from[msg.round] = int(hdr.decode())
        while self.globals_upto + 1 in self.globals:
            self.globals_upto += 1

    def _check_gmf_global(self, msg) -> None:
        """FormatError unless ``msg`` is a GMF_GLOBAL of this run (embedding width D, item ids < I)."""
        g = self.gmf
        if not isinstance(msg, GMFGlobal):
            raise FormatError("bad_type", f"a {type(msg).__name__} record on the global topic of a streaming GMF run")
        if msg.h.shape != (g.D,):
            raise FormatError("shape_mismatch", f"GMF_GLOBAL h of shape {msg.h.shape}, this run's D = {g.D}")
        if msg.ids.size and int(msg.ids[-1]) >= g.I:
            raise FormatError("bad_field", f"GMF_GLOBAL item id {int(msg.ids[-1])}, this run has I = {g.I} items")

    # ---- learning ----------------------------------------------------------------------------------------
    def _model(self, n: int) -> StackedLinear:
        m = self._models.get(n)
        if m is None:
            sp = self.spec
            m = self._models[n] = StackedLinear(n, sp.n_features, sp.task, sp.step_size, sp.n_classes, sp.radius)
        return m

    def _advance(self) -> bool:
        """Load arrived globals and run every step whose data is complete; True if anything happened."""
        progressed = False
        while True:
            waiting = np.flatnonzero(self.wait > 0)
            if len(waiting):
                loaded = [i for i in waiting if int(self.wait[i]) in self.globals]
                if loaded:
                    rows = np.asarray(loaded)
                    for r in np.unique(self.wait[rows]):
                        g = self.globals[int(r)]
                        if self.gmf is not None:
                            self.gmf.load(self.clients[rows[self.wait[rows] == r]], g)
                        elif g.n_participants:          # 0: nobody took part, the clients keep their models
                            self.W[rows[self.wait[rows] == r]] = g.model
                    self.wait[rows] = self.seen[rows] = 0
                    self._checkpoint(rows)
                    if self.gmf is not None:      # tables older than any owned client's round are rebuilt on demand
                        self.gmf.forget_tables(int(self.t.min()) // self.tau - 1)
                    progressed = True
            nxt = self.t + 1
            # a GMF client steps on the global table of its round: every GLOBAL before it must have been read
            upto = (self.globals_upto + 1) * self.tau if self.gmf is not None else self.T
            ready = [i for i in range(len(self.clients))
                     if self.wait[i] == 0 and self.t[i] < self.T and nxt[i] <= upto
                     and int(self.clients[i]) in self.pending.get(int(nxt[i]), ())]
            if not ready:
                break
            s = min(int(nxt[i]) for i in ready)
            self._step(s, np.asarray([i for i in ready if nxt[i] == s]))
            progressed = True
        waiting = self.wait[self.wait > 0]
        if len(waiting):          # ownership changes can complete a round's update (see _send_update)
            self._send_update(int(waiting.min()))
        done = np.flatnonzero((self.t >= self.T) & (self.wait == 0) & (self.ckpt < self.T))
        if len(done):
            self._checkpoint(done)
            progressed = True
        return progressed

    def _step(self, s: int, rows: np.ndarray) -> None:
        """Test-then-train the clients ``rows`` at step s, report their losses, and at a round's end wait (and send)."""
        slot = self.pending[s]
        ids = self.clients[rows].tolist()
        recs = [slot.pop(c) for c in ids]
        if not slot:
            del self.pending[s]
        X = np.stack([r[0] for r in recs])
        y = np.stack([r[1] for r in recs])
        present = np.fromiter((r[2] for r in recs), bool, len(recs))
        if self.gmf is not None:
            losses, ranks, negatives = self.gmf.step(s, self.clients[rows], X[:, 0, 0].astype(np.int64), present,
                                                     self.globals)
        else:
            model = self._model(len(rows))
            model.W = self.W[rows]
            played = model.W.copy()
            losses = model.test_then_train(X, y, s, None if present.all() else present)
        if not np.isfinite(losses).all():
            raise WorkerError(f"worker {self.id}: {divergence_message(MAIN, s)}")
        if self.gmf is None:
            self.W[rows] = model.W
        self.t[rows] = s
        self.off[rows] = [r[3] + 1 for r in recs]
        self.steps_done += 1
        with self._txn_lock:
            new = (self.reported[rows] < s) & self._still_owned(rows)
            if new.any():
                ids = self.clients[rows][new]
                msg = (RankedLoss(t=s, worker=self.id, clients=ids, losses=losses[new], ranks=ranks[new],
                                  negatives=negatives[new]) if self.gmf is not None else
                       Loss(t=s, worker=self.id, clients=ids, losses=losses[new], played=played[new]))
                self._last_loss_future = self._send(self.topics.loss, encode(msg), key_of(self.id), 0,
                                                    self.loss_headers)
                self.reported[rows[new]] = s
        self.seen[rows] += present
        if self.tau is not None and s % self.tau == 0:
            self.wait[rows] = s // self.tau
            self._send_update(s // self.tau)
        elif s % self.every == 0:
            self._checkpoint(rows)

    def _send_update(self, r: int) -> None:
        """Send this worker's pre-summed UPDATE of round r once every owned client has reached step rτ.

        It covers the clients waiting for GLOBAL(r) whose contribution is not
        on the updates topic yet (``sent`` < r; a new owner learns what the
        previous one sent when it restores), and sums the models of those that
        saw a sample in the round (FedAvg's participating clients). Nothing is
        sent when GLOBAL(r) is known already or some owned client is still
        before rτ (it joins this update when it gets there).
        """
        if r in self.globals or (self.t < r * self.tau).any():
            return
        rows = np.flatnonzero((self.wait == r) & (self.sent < r))
        if not len(rows):
            return
        values = self._update_records(r, rows)
        with self._txn_lock:
            keep = self._still_owned(rows)
            rows = rows[keep]
            if not len(rows):
                return
            if not keep.all():
                values = self._update_records(r, rows)
            for part, value in values:
                digest = update_digest(value)
                for p in {int(c) % self.P for c in self.clients[part]}:
                    old_r, digests = self.proof.get(p, (0, []))
                    self.proof[p] = (r, digests + [digest] if old_r == r else [digest])
                self._send(self.topics.updates, value, key_of(self.id), 0, self.loss_headers)   # learner fingerprint
        self._commit()                           # the aggregator needs it now (Fenced: see run())
        self.sent[rows] = r

    def _update_records(self, r: int, rows: np.ndarray) -> list[tuple[np.ndarray, bytes]]:
        """The records of round r for the clients ``rows``: [(rows covered, encoded record)].

        One record (:meth:`_update_record`), except for a streaming GMF run,
        whose item rows grow with the clients: its clients are split into
        consecutive groups of at most about ``UPDATE_BYTES`` bytes of rows each
        (one GMF_UPDATE per group; the aggregator covers the clients with
        several records of one worker as with one).
        """
        if self.gmf is None:
            return [(rows, self._update_record(r, rows))]
        size = self.gmf.model.n_slots[self.clients[rows]] * (self.gmf.D * 8 + 16) + self.gmf.D * 8 + 40
        group = np.cumsum(size) // UPDATE_BYTES
        return [(rows[group == g], self._update_record(r, rows[group == g])) for g in np.unique(group)]

    def _update_record(self, r: int, rows: np.ndarray) -> bytes:
        """The encoded record of round r for the clients ``rows``: an Update (Σ models of those that took
        part) or, with a compressor, a CompressedUpdate (one payload per client that took part).

        Raises
        ------
        WorkerError
            A model is not finite (the aggregator would reject the record and the round never end).
        """
        if self.gmf is not None:         # the item rows, counts and h, b of every covered client
            upd = self.gmf.upload(r, self.id, self.clients[rows], self.seen[rows], self.globals)
            if not (np.isfinite(upd.rows).all() and np.isfinite(upd.h).all() and np.isfinite(upd.b).all()):
                raise WorkerError(f"worker {self.id}: {divergence_message(MAIN, r * self.tau + 1)}")
            return encode(upd)
        took_part = rows[self.seen[rows] > 0]
        if not np.isfinite(self.W[took_part]).all():
            raise WorkerError(f"worker {self.id}: {divergence_message(MAIN, r * self.tau + 1)}")
        if self.compressor is None:
            total = self.W[took_part].sum(axis=0) if len(took_part) else np.zeros(self.shape)
            return encode(Update(round=r, worker=self.id, clients=self.clients[rows], model_sum=total,
                                 n_participants=len(took_part)))
        from streamfl.compression import dither_key
        c = self.compressor
        ids = self.clients[took_part].tolist()
        keys = [dither_key(self.seed, m + 1, r - 1) for m in ids] if c.dithered else None
        sent = dict(zip(ids, c.encode_batch(self.W[took_part] - self._global_before(r), keys))) if ids else {}
        return encode(CompressedUpdate.pack(round=r, worker=self.id, clients=self.clients[rows],
                                            payloads=[sent.get(int(m)) for m in self.clients[rows]]))

    def _global_before(self, r: int) -> np.ndarray:
        """x̄ the clients of round r start from: the last GLOBAL before r that had participants, else zeros (d, K).

        The global topic is read from its start, and a client reaches step rτ only after loading
        GLOBAL(r − 1), so every earlier round is known here.
        """
        for k in range(r - 1, 0, -1):
            g = self.globals.get(k)
            if g is None:
                raise WorkerError(f"worker {self.id}: round {r}'s upload needs GLOBAL({k}), not read from "
                                  f"{self.topics.global_}")
            if g.n_participants:
                return g.model
        return np.zeros(self.shape)

    def _checkpoint(self, rows: np.ndarray) -> None:
        """Write the clients' checkpoints into the open transaction; the data offsets committed with it follow.

        Clients whose partition was revoked meanwhile are skipped (their new
        owner restored them from the changelog).
        """
        if self._last_loss_future is not None and self._last_loss_future.is_done and self._last_loss_future.succeeded():
            self.last_loss_offset = max(self.last_loss_offset, self._last_loss_future.value.offset)
        with self._txn_lock:
            rows = rows[self._still_owned(rows)]
            if not len(rows):
                return
            loss_off = np.maximum(self.loss_from[rows], self.last_loss_offset + 1)
            if self.gmf is not None:
                states = [self.gmf.state(int(self.clients[i]), int(self.t[i]), int(self.off[i]), int(lo))
                          for i, lo in zip(rows, loss_off)]
            else:
                states = [ClientState(client=int(self.clients[i]), t=int(self.t[i]), offset=int(self.off[i]),
                                      loss_offset=int(lo), model=self.W[i]) for i, lo in zip(rows, loss_off)]
            send_states(_TxnSender(self), self.run_id, self.P, states)
        self.ckpt[rows] = self.t[rows]
        self.loss_from[rows] = loss_off
        for p in {int(c) % self.P for c in self.clients[rows]} & self.owned:
            prow = self._partition_rows(p)
            self.commit_offsets[p] = int(self.off[prow].min())
        keep_from = self.ckpt[rows] - 2 * self.every          # digests kept to compare later duplicates with
        for c, k in zip(self.clients[rows].tolist(), keep_from.tolist()):
            memo = self.data_memo.get(c)
            if memo:
                for step in [step for step in memo if step <= k]:
                    del memo[step]
        if (self.t[rows] >= self.T).any():
            self._commit()                       # the final state: readers wait for it

    def _flush(self, what: str) -> None:
        try:
            self.producer.flush(timeout=self.timeout)
        except Exception as e:
            raise WorkerError(f"worker {self.id}: {what} not acknowledged within {self.timeout:.0f} s "
                              f"({type(e).__name__}); is the broker up?") from None

    def _unfinished(self) -> np.ndarray:
        return np.flatnonzero((self.t < self.T) | (self.wait > 0) | (self.ckpt < self.T))

    def _stall_message(self) -> str:
        """The cause of a stall as far as this worker can see it: a client of its own without data first (it
        holds back this worker's update), else the round it waits for (see :meth:`_round_diagnosis`)."""
        waiting = np.flatnonzero(self.wait > 0)
        starving = np.flatnonzero((self.wait == 0) & (self.t < self.T))
        if len(waiting) and not len(starving):
            r = int(self.wait[waiting].min())
            head = (f"worker {self.id} waited {self.timeout:.0f} s for the global model of round {r} "
                    f"(clients {_ids(self.clients[waiting].tolist())})")
            try:
                return f"{head}: {self._round_diagnosis(r)}"
            except Exception as e:          # the diagnosis reads topics; it must not hide the stall
                log.info("round diagnosis failed: %s", e)
                return f"{head}; the aggregator did not publish it (is it running? rejected updates go to {self.topics.dead})"
        rows = starving if len(starving) else self._unfinished()
        i = rows[np.argmin(self.t[rows])]
        c, s = int(self.clients[i]), int(self.t[i]) + 1
        head = f"worker {self.id}: no DATA for step {s} of client {c} within {self.timeout:.0f} s"
        p = c % self.P
        try:
            end = self.consumer.end_offsets([self._tp(p)])[self._tp(p)]
        except Exception:
            return f"{head} (is the producer running?)"
        if end == 0:
            return (f"{head}: data partition {p} is empty (no producer wrote to it; with several producers, "
                    f"is every --share I/N running?)")
        if end <= int(self.next_off[i]):
            return f"{head}: data partition {p} ends at offset {end}, before that step (is its producer running?)"
        return f"{head}: data partition {p} holds records up to offset {end} that did not arrive (broker or network?)"

    def _round_diagnosis(self, r: int) -> str:
        """Why GLOBAL(r) has not come, from what the topics hold: an update of round r the aggregator
        rejected (and why), else the clients no committed update of round r covers, else the aggregator."""
        rejected, covered = [], set()

        def on_dead(rec):
            h = {k: v.decode(errors="replace") for k, v in rec.headers}
            if h.get("source") == "aggregator" and rec.value is not None:
                try:
                    msg = decode(rec.value)
                except FormatError:
                    return
                if isinstance(msg, (Update, CompressedUpdate, GMFUpdate)) and msg.round == r:
                    rejected.append(f"worker {msg.worker}'s update (clients {_ids(msg.clients.tolist())}): "
                                    f"{h.get('reason')}{': ' + h['detail'] if h.get('detail') else ''}")

        def on_update(msg):
            if isinstance(msg, (Update, CompressedUpdate, GMFUpdate)) and msg.round == r:
                covered.update(msg.clients.tolist())

        reader = resilient_reader(self.bootstrap, self.client_id + "-diagnosis", self.topics.dead)
        try:
            read_to_end(reader, self.topics.dead, on_dead, 10.0)
        finally:
            reader.close()
        if rejected:
            return f"the aggregator rejected {'; '.join(rejected)} (dead-letter topic {self.topics.dead})"
        self._scan(self.updates_reader, self.topics.updates, self.updates_from.get(r - 1, 0), on_update)
        missing = sorted(set(range(self.M)) - covered)
        if missing:
            return (f"no update of round {r} covers clients {_ids(missing)} ("
                    + (self._holders(sorted({c % self.P for c in missing})) or
                       "their worker is missing, stalled or fenced, or their data partitions are empty") + ")")
        return (f"updates covering every client are on {self.topics.updates} but the aggregator did not "
                f"publish the global model (is it running?)")

    def _holders(self, parts: list[int]) -> str:
        """Who the workers' group gives ``parts`` to, from the broker's group description: names a member
        that is not a worker of this run (client id other than ``streamfl-<run>-worker-<id>``, e.g. a
        stray consumer that joined the group) and partitions no member holds; "" if unreadable."""
        from kafka import KafkaAdminClient

        from streamfl.runtime.kafka_run import _assigned_partitions
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, **client_config(),
                                     client_id=self.client_id + "-diagnosis", request_timeout_ms=10000)
            try:
                g = admin.describe_groups([self.topics.worker_group])[self.topics.worker_group]
            finally:
                admin.close()
        except Exception as e:
            log.info("group description unreadable: %s", e)
            return ""
        prefix = f"streamfl-{self.run_id}-worker-"
        held, out = set(), []
        for mem in g.get("members") or []:
            ps = sorted(_assigned_partitions(mem, self.topics.data) & set(parts))
            held.update(ps)
            cid = str(mem.get("client_id") or "")
            if ps and not cid.startswith(prefix):
                out.append(f"partitions {ps} are assigned to member {cid!r} at {mem.get('client_host')} of group "
                           f"{self.topics.worker_group}, which is not a worker of this run (client id not "
                           f"{prefix}<id>): stop that consumer")
            elif ps:
                out.append(f"partitions {ps} are held by {cid}, which sent no update")
        if set(parts) - held:
            out.append(f"no member of {self.topics.worker_group} holds partitions {sorted(set(parts) - held)}")
        return "; ".join(out)

    kafka_debug = False

    def run(self) -> None:
        """Run until the state topic shows every client at step T; WorkerError on failure, SystemExit(143) on SIGTERM."""
        quiet_kafka_logs()
        create_state_topic(self.bootstrap, self.run_id, self.P)
        self.producer = self._make_producer()
        self.global_reader = resilient_reader(self.bootstrap, self.client_id + "-global", self.topics.global_)
        self.loss_reader = resilient_reader(self.bootstrap, self.client_id + "-loss", self.topics.loss)
        self.updates_reader = resilient_reader(self.bootstrap, self.client_id + "-updates", self.topics.updates)
        self.store = StateStore(self.bootstrap, self.run_id, self.P, self.client_id + "-state")
        if self.kafka_debug:
            kl = logging.getLogger("kafka")
            kl.setLevel(logging.DEBUG)
            kl.propagate = True
        self._make_consumer()
        log.info("worker %d joined group %s", self.id, self.topics.worker_group)
        clean = False
        try:
            last = tick = time.monotonic()
            while True:
                self._check_stop()
                idle = not len(self._unfinished())
                at_barrier = bool((self.wait > 0).any())
                try:
                    self._read_data(5 if at_barrier else 20)
                    self._apply_assignment()
                    self._read_globals(20 if at_barrier else 0)
                    progressed = self._advance()
                    if self._txn_open:
                        age = time.monotonic() - self._txn_since
                        if (age >= COMMIT_INTERVAL and not progressed) or age >= TRANSACTION_TIMEOUT / 4:
                            self._commit()
                except Fenced:
                    self._drop_all()
                    progressed = True
                now = time.monotonic()
                if progressed:
                    last = now
                if now - tick > max(JOIN_POLL_MS / 1000 + 5, self.session_timeout):   # paused (SIGSTOP, VM freeze)
                    log.info("worker %d: paused for %.0f s; not counted as a stall", self.id, now - tick)
                    last = now
                tick = now
                if not len(self._unfinished()):
                    self.store.poll(0)
                    if self.store.done(self.M, self.T) and not (self.target - self.owned):
                        break
                    last = time.monotonic()
                elif idle:
                    last = time.monotonic()    # clients just arrived
                elif time.monotonic() - last > self.timeout:
                    raise WorkerError(self._stall_message())
            self._commit()
            self._flush("the last records")
            clean = True
            log.info("worker %d finished: the run is complete (%d local steps, %d transactions%s)", self.id,
                     self.steps_done, self.commits,
                     f", {self.duplicates} duplicate DATA record(s) counted once" if self.duplicates else "")
        except SystemExit:
            try:
                self._commit()        # SIGTERM between steps: what was done is consistent
                clean = True
            except Exception:
                pass
            raise
        finally:
            if not clean:
                try:
                    self._abort("the worker stops")
                except Exception:
                    pass
            for c in ("consumer", "global_reader", "loss_reader", "updates_reader"):
                try:
                    getattr(self, c).close(autocommit=False)
                except Exception:
                    pass
            self.store.close()
            try:
                self.producer.close(timeout=10)
            except Exception:
                pass


def main(argv=None) -> int:
    """Entry point; exit 0, 143 on SIGTERM, 2 with ``error: …`` for an unreachable broker, or 1 with
    ``error: worker N: …`` on stderr."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--config", required=True, help="the run folder's config.yaml")
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--workers", type=int, default=1, help="ignored: the consumer group assigns partitions")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--restore-timeout", type=float, default=30.0)
    ap.add_argument("--session-timeout", type=float, default=6.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker-{args.worker_id} %(levelname)s %(message)s",
                        stream=sys.stderr)
    log.info("code: %s", code_origin(__file__))
    worker = None

    def on_term(signum, frame):
        if worker is not None:
            worker.stop = True

    signal.signal(signal.SIGTERM, on_term)
    faulthandler.register(signal.SIGUSR1)          # `kill -USR1 <pid>` dumps the threads' stacks to the log
    kafka_debug = os.environ.get("STREAMFL_KAFKA_DEBUG")   # "1": kafka-python's DEBUG log into this log
    try:
        check_broker(args.bootstrap)       # the same bounded check and message as every role and the CLI
    except (BrokerUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        from streamfl.generators.build import build_stream
        from streamfl.transport.spec import learner_spec, read_config
        cfg = read_config(args.config)
        stream = build_stream(cfg)
        gmf = None
        if cfg.learner.model == "gmf":
            from consumers.gmf import GMFClients
            from streamfl.runtime.experiment import build_gmf_clients
            gmf = GMFClients(build_gmf_clients(cfg, stream, cfg.learner.tau))
        worker = Worker(args.bootstrap, args.run_id, learner_spec(cfg, stream), stream.batch_size, args.worker_id,
                        args.workers, args.partitions, timeout=args.timeout, restore_timeout=args.restore_timeout,
                        session_timeout=args.session_timeout, config=cfg, gmf=gmf)
        if kafka_debug:
            worker.kafka_debug = True
        worker.run()
        return 0
    except SystemExit as e:
        return int(e.code or 0)
    except DuplicateWorker as e:
        print(f"error: {e}", file=sys.stderr)
        return FENCED_EXIT
    except Exception as e:
        msg = str(e)
        prefix = f"worker {args.worker_id}"
        print(f"error: {msg if msg.startswith(prefix) else f'{prefix}: {msg}'}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
