"""Run a FedSEA experiment over a real Kafka broker (``streamfl run --broker HOST:PORT``).

:func:`run_kafka_experiment` creates the run's topics
(:mod:`streamfl.transport.topics`), writes the run folder's ``config.yaml``
and starts, as separate processes,

* the aggregator (``python -m consumers.aggregator``), unless τ is unset,
* N workers (``python -m consumers.worker``), members of one consumer group
  that share the data partitions (and hand them over when one dies or joins),
* the stream producer(s) (``python -m producers.stream_producer``; several share the partitions),

waits until the workers' group has assigned every data partition (bounded
by ``join_timeout``), then runs the regret tracker
(:func:`consumers.tracker.track`) in the foreground. The numbers equal the embedded engine's (``streamfl run``); the
server average is summed in client order, as embedded (tested to 1e-9).

:class:`KafkaRun` is the same orchestration as an object whose processes can
be started, killed and added one by one (``start_worker``, ``kill_worker``,
``restart_aggregator``, …) — what the fault-tolerance tests use; its
``hold_at`` option replaces the producer process by an in-process producer
that stops before a given step until :meth:`KafkaRun.release` (a test hook:
library code never sleeps to pace the stream).

Only the main learner runs over Kafka — FedSEA, or streaming FedNCF GMF
with ``learner.model: gmf`` (records and roles: :mod:`consumers.gmf`): configured baselines are skipped (the summary
says so under ``transport.skipped_baselines``). Adaptive drift, sweeps and
``weighting: samples`` are refused with a ValueError.

Each process logs to ``<run_dir>/logs/<name>.log`` (its first line says where
its code was imported from). A process that fails stops the run with a
one-line :class:`KafkaRunError` quoting its error, and
:func:`run_kafka_experiment` removes the run folder it created. Topics are
deleted at the end unless ``keep_topics``.

The processes run in the caller's working directory and are handed absolute
paths only (the run folder's ``config.yaml``, whose ``source.path`` is
absolute); they import the same installed ``streamfl``, ``producers`` and
``consumers`` as the caller (see :func:`_child_env`), never a source tree
that happens to be nearby.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from ..transport.security import client_config
from ..transport.spec import CONFIG_HEADER, config_fingerprint, kafka_unsupported
from ..transport.state import create_state_topic, delete_state_topic, resilient_producer, resilient_reader, state_topic
from ..transport.topics import (BrokerUnavailable, Topics, check_broker, create_topics, delete_topics, key_of,
                                partition_for, quiet_kafka_logs)

__all__ = ["BrokerUnavailable", "KafkaRun", "KafkaRunError", "run_kafka_experiment"]

log = logging.getLogger("streamfl.kafka_run")
WORKER_FENCED_EXIT = 3      # consumers.worker.FENCED_EXIT: fenced by another worker with its id (tolerated)


def check_process_counts(n_clients: int, partitions: int | None, workers: int, producers: int) -> int:
    """P, the data topic's partitions (default M, one per client), after checking the process counts.

    Raises
    ------
    ValueError
        P < 1, P > M (client m goes to partition m mod P, so partitions M … P − 1 would carry no
        client), or workers or producers outside 1 … P (a process with no partition would idle).
    """
    P = n_clients if partitions is None else int(partitions)
    if not 1 <= P:
        raise ValueError(f"--partitions must be ≥ 1, got {P}")
    if P > n_clients:
        raise ValueError(f"--partitions {P} exceeds the stream's {n_clients} clients: client m goes to partition "
                         f"m mod P, so {P - n_clients} partition(s) would carry no client; use at most {n_clients}")
    if not 1 <= workers <= P:
        raise ValueError(f"--workers must be between 1 and the number of data partitions ({P}), got {workers}")
    if not 1 <= producers <= P:
        raise ValueError(f"--producers must be between 1 and the number of data partitions ({P}), got {producers}")
    return P


class KafkaRunError(RuntimeError):
    """A process of the Kafka run failed; the message is one line for the user."""


def _child_env() -> dict:
    """The environment of a role process: the caller's, so that it imports the caller's code.

    Children start with ``python -P`` (no working directory on ``sys.path``:
    a folder of the caller named ``consumers`` cannot shadow the installed
    package). Where the caller imported ``streamfl``, ``producers`` or
    ``consumers`` from a folder that is not a site-packages directory (a
    source checkout on ``sys.path``), that folder is put on the child's
    ``PYTHONPATH``; an installed package needs nothing.
    """
    import importlib.util
    import site
    sites = {os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    extra = []
    for name in ("streamfl", "consumers", "producers"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            continue
        root = os.path.realpath(Path(spec.origin).parents[1])
        if root not in sites and root not in extra:
            extra.append(root)
    env = dict(os.environ)
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class _Child:
    """A child process with its log file (``log_dir`` absolute; the child runs in the caller's folder)."""

    def __init__(self, name: str, module: str, args: list[str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", module, *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_child_env())

    def error_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [ln for ln in lines if ln.startswith("error:")]
        return (errors or lines or [""])[-1].strip()

    def kill(self, sig=signal.SIGKILL):
        """Send ``sig`` (default SIGKILL) and reap the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(10)

    def terminate(self):
        """Ask the process to finish (SIGTERM); see :meth:`wait`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, grace: float = 5.0):
        """Wait up to ``grace`` s for the process to exit, then kill it; close the log."""
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if not self.log.closed:
            self.log.close()



class KafkaRun:
    """One FedSEA run over Kafka with controllable processes.

    Parameters
    ----------
    cfg : ExperimentConfig
    broker : str
        Bootstrap address ``HOST:PORT``.
    workers : int
        Workers started by :meth:`start` (≥ 1; more can be added with :meth:`start_worker`).
    producers : int
        Producer processes sharing the data partitions (1 ≤ n ≤ P; see
        :mod:`producers.stream_producer`).
    run_dir : Path or None
        As in :func:`streamfl.runtime.experiment.run_experiment`.
    partitions : int or None
        P of the data (and state) topic; default M.
    timeout : float
        Seconds any process may wait without progress before failing.
    keep_topics : bool
        Keep the run's topics on the broker at :meth:`close`.
    hold_at : int or None
        Test hook: publish the stream from this process, and only steps
        ≤ ``hold_at`` until :meth:`release` (None: the producer process).
    session_timeout : float
        Workers' consumer-group session timeout, s (≥ 6).
    join_timeout : float
        :meth:`start` waits up to this long for the group to assign every data
        partition before the producer starts (then starts it anyway).

    Raises
    ------
    BrokerUnavailable, ValueError
        As :func:`run_kafka_experiment`.

    Examples
    --------
    ::

        with KafkaRun(cfg, "127.0.0.1:9092", workers=2, hold_at=17) as run:
            run.start()
            run.wait_reported(17)
            run.kill_worker(1)
            run.release()
            summary = run.track()
    """

    def __init__(self, cfg, broker: str, workers: int = 1, run_dir: Path | None = None, partitions: int | None = None,
                 timeout: float = 60.0, keep_topics: bool = False, hold_at: int | None = None,
                 session_timeout: float = 6.0, join_timeout: float = 20.0, producers: int = 1):
        from ..config import dump_config
        from .experiment import build_stream, claim_run_dir
        cfg = _absolute_source(cfg)
        self.cfg, self.broker, self.timeout, self.keep_topics = cfg, broker, float(timeout), keep_topics
        self.session_timeout, self.join_timeout = session_timeout, join_timeout
        self.stream = build_stream(cfg)
        why = kafka_unsupported(cfg, self.stream)
        if why:
            raise ValueError(why)
        self.M, self.T = self.stream.n_clients, self.stream.n_steps
        self.P = check_process_counts(self.M, partitions, workers, producers)
        self.n_start, self.n_producers = workers, producers
        tau = cfg.learner.tau
        self.rounds = 0 if tau is None else self.T // tau
        check_broker(broker)
        self.run_id = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.topics = Topics(self.run_id)
        self.run_dir, self._undo_run_dir = claim_run_dir(cfg, run_dir)
        try:
            self.config_path = self.run_dir / "config.yaml"
            self.config_path.write_text(dump_config(cfg))
            self.log_dir = self.run_dir / "logs"
            self.log_dir.mkdir(exist_ok=True)
            create_topics(broker, self.topics, self.P)
            create_state_topic(broker, self.run_id, self.P)
        except BaseException:
            self.remove_run_dir()
            raise
        self.common = ["--bootstrap", broker, "--run-id", self.run_id]
        self.workers: list[_Child] = []
        self.aggregator: _Child | None = None
        self.producers: list[_Child] = []
        self.killed: set[int] = set()                 # id() of children stopped on purpose
        self._n_aggregators = 0
        self.hold_at = hold_at
        self._gate = threading.Condition()
        self._limit = hold_at if hold_at is not None else self.T
        self._feeder: threading.Thread | None = None
        self._feeder_error: BaseException | None = None
        self.produced = 0
        self._loss_reader = None
        self._reported: dict[int, set] = {}

    # ---- processes -------------------------------------------------------------------------------
    def start(self) -> "KafkaRun":
        """Start the aggregator, the workers and the producer; return once the group has assigned every partition.

        The producer starts together with the workers (its records wait in the
        data topic; a worker that joins late only makes partitions move, which
        restoration handles), so process start-up times overlap. If the group
        does not settle within ``join_timeout`` s a warning is logged and the
        run goes on.
        """
        if self.rounds > 0:
            self.start_aggregator()
        for _ in range(self.n_start):
            self.start_worker()
        self.start_producer()
        self.wait_assigned(self.n_start, self.join_timeout)
        return self

    def start_worker(self) -> int:
        """Start one more worker process (it joins the group); return its index."""
        i = len(self.workers)
        self.workers.append(_Child(f"worker-{i}", "consumers.worker",
                                   self.common + ["--config", str(self.config_path), "--partitions", str(self.P),
                                                  "--worker-id", str(i), "--timeout", str(self.timeout),
                                                  "--session-timeout", str(self.session_timeout)], self.log_dir))
        return i

    def kill_worker(self, i: int, sig=signal.SIGKILL) -> None:
        """Kill worker ``i`` (SIGKILL by default: no clean-up, no group leave)."""
        self.killed.add(id(self.workers[i]))
        self.workers[i].kill(sig)

    def start_aggregator(self) -> None:
        """Start an aggregator process (it resumes after the last published round)."""
        n = self._n_aggregators
        self._n_aggregators += 1
        self.aggregator = _Child("aggregator" if n == 0 else f"aggregator-{n}", "consumers.aggregator",
                                 self.common + ["--clients", str(self.M), "--rounds", str(self.rounds),
                                                "--timeout", str(max(300.0, 5 * self.timeout)),
                                                "--config", str(self.config_path)], self.log_dir)

    def kill_aggregator(self, sig=signal.SIGKILL) -> None:
        """Kill the aggregator (SIGKILL by default)."""
        if self.aggregator is not None:
            self.killed.add(id(self.aggregator))
            self.aggregator.kill(sig)

    def restart_aggregator(self, sig=signal.SIGKILL) -> None:
        """Kill the aggregator and start a new one."""
        self.kill_aggregator(sig)
        self.start_aggregator()

    def start_producer(self) -> None:
        """Publish the stream: the producer process, or (``hold_at``) an in-process producer behind a gate."""
        if self.hold_at is None:
            n = self.n_producers
            self.producers = [_Child("producer" if n == 1 else f"producer-{i}", "producers.stream_producer",
                                     self.common + ["--config", str(self.config_path), "--partitions", str(self.P),
                                                    "--share", f"{i}/{n}"], self.log_dir) for i in range(n)]
            return
        self._feeder = threading.Thread(target=self._feed, name="streamfl-gated-producer", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        from ..transport.format import Data, encode
        try:
            producer = resilient_producer(self.broker, f"streamfl-{self.run_id}-producer")
            try:
                keys = [key_of(m) for m in range(self.M)]
                parts = [partition_for(m, self.P) for m in range(self.M)]
                headers = [(CONFIG_HEADER, config_fingerprint(self.cfg))]
                for chunk in self.stream.chunks(self.cfg.chunk_size):
                    for i in range(chunk.n_steps):
                        t = chunk.t0 + i + 1
                        with self._gate:
                            while t > self._limit:
                                producer.flush(timeout=60)
                                self._gate.wait()
                        for m in range(self.M):
                            msg = Data(t=t, client=m, X=chunk.X[i, m], y=chunk.y[i, m],
                                       present=True if chunk.mask is None else bool(chunk.mask[i, m]),
                                       optimum=None if chunk.optimum is None else chunk.optimum[i, m])
                            producer.send(self.topics.data, value=encode(msg), key=keys[m], partition=parts[m],
                                          headers=headers if t == 1 else None)
                            self.produced += 1
                producer.flush(timeout=120)
            finally:
                producer.close(timeout=10)
        except BaseException as e:      # reported by check()
            self._feeder_error = e

    def release(self, upto: int | None = None) -> None:
        """Test hook: let the in-process producer publish steps ≤ ``upto`` (default: all)."""
        with self._gate:
            self._limit = self.T if upto is None else int(upto)
            self._gate.notify_all()

    # ---- observation ------------------------------------------------------------------------------
    def wait_assigned(self, n_members: int, timeout: float) -> bool:
        """Wait until ``n_members`` workers are in the group and all P partitions assigned; False on timeout."""
        quiet_kafka_logs()
        from kafka import KafkaAdminClient
        deadline = time.monotonic() + timeout
        admin = KafkaAdminClient(bootstrap_servers=self.broker, **client_config(), client_id=f"streamfl-{self.run_id}-watch")
        try:
            while time.monotonic() < deadline:
                self.check()
                try:
                    g = admin.describe_groups([self.topics.worker_group])[self.topics.worker_group]
                    parts = set()
                    members = g.get("members") or []
                    for mem in members:
                        parts |= _assigned_partitions(mem, self.topics.data)
                    if g.get("group_state") == "Stable" and len(members) >= n_members and len(parts) == self.P:
                        return True
                except Exception as e:       # group not there yet
                    log.debug("describe_groups: %s", e)
                time.sleep(0.2)
            log.warning("note: the workers' group has not assigned all %d partitions after %.0f s; the run goes on "
                        "(the workers take the rest when the group settles)", self.P, timeout)
            return False
        finally:
            admin.close()

    def wait_reported(self, t: int, timeout: float | None = None) -> None:
        """Test hook: block until the loss topic holds every client's LOSS for steps 1 … t.

        Raises
        ------
        KafkaRunError
            Not within ``timeout`` s (default: the run's timeout), or a process failed.
        """
        from ..transport.format import Loss, RankedLoss, decode
        if self._loss_reader is None:
            self._loss_reader = resilient_reader(self.broker, f"streamfl-{self.run_id}-watch", self.topics.loss)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not all(len(self._reported.get(s, ())) == self.M for s in range(1, t + 1)):
            self.check()
            if time.monotonic() > deadline:
                missing = next(s for s in range(1, t + 1) if len(self._reported.get(s, ())) < self.M)
                raise KafkaRunError(f"step {missing} was not reported by every client in time")
            for records in self._loss_reader.poll(timeout_ms=100).values():
                for rec in records:
                    msg = decode(rec.value)
                    if isinstance(msg, (Loss, RankedLoss)):
                        self._reported.setdefault(msg.t, set()).update(msg.clients.tolist())

    def check(self) -> None:
        """Raise :class:`KafkaRunError` if a process failed (processes killed on purpose do not count)."""
        if self._feeder_error is not None:
            raise KafkaRunError(f"producer: {self._feeder_error}")
        children = self.workers + self.producers
        if self.aggregator is not None:
            children.append(self.aggregator)
        for c in children:
            code = c.proc.poll()
            if code == WORKER_FENCED_EXIT and c in self.workers and id(c) not in self.killed:
                # another process with this worker's id fenced it and carries on with its partitions
                self.killed.add(id(c))
                log.warning("%s stopped: %s; the run goes on without it", c.name, c.error_line())
                continue
            if code not in (None, 0) and id(c) not in self.killed:
                raise KafkaRunError(f"{c.name} exited with code {code}: {c.error_line()}")

    def track(self, on_chunk=None, plots: bool | None = None) -> dict:
        """Run the regret tracker in the foreground until step T; return the summary.

        Raises
        ------
        KafkaRunError
            A process failed, or the tracker timed out.
        """
        from consumers.tracker import TrackerError, track
        extra = {"transport": {"kind": "kafka", "broker": self.broker, "run_id": self.run_id,
                               "workers": self.n_start, "workers_started": len(self.workers), "partitions": self.P,
                               "topics": self.topics.all() + [state_topic(self.run_id)],
                               "skipped_baselines": list(self.cfg.baselines)}}
        try:
            return track(self.cfg, self.stream, self.broker, self.run_id, self.run_dir, on_chunk=on_chunk,
                         check=self.check, timeout=self.timeout, plots=plots, extra=extra)
        except TrackerError as e:
            self.check()          # a dead child explains a stalled tracker better
            raise KafkaRunError(f"tracker: {e}") from None

    def close(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after a grace period) and delete the topics unless kept."""
        self.release()
        children = self.workers + self.producers + ([self.aggregator] if self.aggregator is not None else [])
        for c in children:
            c.terminate()
        for c in children:
            c.wait()
        if self._feeder is not None:
            self._feeder.join(10)
        if self._loss_reader is not None:
            self._loss_reader.close()
        if not self.keep_topics:
            delete_topics(self.broker, self.topics)
            delete_state_topic(self.broker, self.run_id)

    def remove_run_dir(self) -> None:
        """Delete the run folder if this run created it (or found it empty): a failed run leaves nothing behind."""
        self._undo_run_dir()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _absolute_source(cfg):
    """``cfg`` with a relative ``source.path`` made absolute against the current folder (where this process reads
    it), so the run folder's ``config.yaml`` names the same table for every role."""
    src = cfg.source
    if getattr(src, "kind", None) in ("file", "movielens") and not src.path.is_absolute():
        return cfg.model_copy(update={"source": src.model_copy(update={"path": src.path.resolve()})})
    return cfg


def _assigned_partitions(member: dict, topic: str) -> set:
    """Partitions of ``topic`` in a describe_groups member entry (decoded or raw assignment)."""
    a = member.get("member_assignment")
    out = set()
    if a is None:
        return out
    if isinstance(a, (bytes, bytearray)):
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
        a = ConsumerProtocolAssignment.decode(a)
    if hasattr(a, "partitions"):
        for tp in a.partitions():
            if tp.topic == topic:
                out.add(tp.partition)
        return out
    for entry in (a.get("assigned_partitions") or a.get("topic_partitions") or []):
        if entry.get("topic") == topic:
            out.update(entry.get("partitions") or [])
    return out


def run_kafka_experiment(cfg, broker: str, workers: int = 1, run_dir: Path | None = None, on_chunk=None,
                         plots: bool | None = None, partitions: int | None = None, timeout: float = 60.0,
                         keep_topics: bool = False, producers: int = 1) -> dict:
    """Run ``cfg``'s FedSEA learner over the Kafka broker at ``broker``; return the summary.

    Parameters
    ----------
    cfg : ExperimentConfig
    broker : str
        Bootstrap address ``HOST:PORT``.
    workers : int
        N ≥ 1 worker processes; at most the number of data partitions.
    run_dir : Path or None
        As in :func:`streamfl.runtime.experiment.run_experiment`.
    producers : int
        Producer processes sharing the data partitions, 1 ≤ n ≤ P (producing
        is CPU-bound: n > 1 uses more cores).
    on_chunk : callable(tracker, stream) or None
        Live-view hook.
    plots : bool or None
        Override ``cfg.output.plots``.
    partitions : int or None
        P, partitions of the data topic (client m → partition m mod P); default M.
    timeout : float
        Seconds any process may wait without progress before failing.
    keep_topics : bool
        Keep the run's topics on the broker (for inspection).

    Raises
    ------
    BrokerUnavailable
        The broker does not answer (within about 10 s).
    ValueError
        Unsupported config, or ``workers``/``partitions`` out of range.
    KafkaRunError
        A child process failed, or the tracker timed out.

    On any error the run folder is removed if this call created it (or found
    it empty), with the processes' logs: the error message quotes the failing
    process's error line.
    """
    run = KafkaRun(cfg, broker, workers=workers, run_dir=run_dir, partitions=partitions, timeout=timeout,
                   keep_topics=keep_topics, producers=producers)
    try:
        run.start()
        summary = run.track(on_chunk=on_chunk, plots=plots)
    except BaseException:
        try:
            run.close()
        finally:
            run.remove_run_dir()
        raise
    run.close()
    return summary
