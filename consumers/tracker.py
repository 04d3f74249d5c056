"""The regret tracker over Kafka: consumes LOSS records and writes the run folder.

Workers publish, per step, their clients' losses and played models. The
tracker reassembles them into the (n, M) losses and (n, M, d, K) played models
of each chunk, regenerates the chunk's data (X, y, mask, optimum) from the run
config — streams are deterministic given config and seed, so nothing but the
learners' numbers has to travel — and feeds
:meth:`streamfl.regret.RegretTracker.update` chunk by chunk, exactly as the
embedded engine does. The run folder is the embedded one: ``config.yaml``,
``metrics.csv``/``.parquet``, ``summary.json`` and ``plots/``.

Only the main learner runs over Kafka (no baselines). For a streaming
FedNCF GMF run (``learner.model: gmf``) the workers send RANKED_LOSS
records (losses, ranks of the arriving positives, training negatives)
instead of played models; the tracker feeds them to
:class:`streamfl.regret.ranking.RankingTracker` as the embedded engine does
and writes the same metrics file (the end-of-run comparator columns
included) and the embedded GMF summary keys, ``bytes_up``/``bytes_down``
from the GLOBAL records' headers.

Prometheus metrics
------------------
With ``metrics_port`` (``streamfl track --metrics-port 9464``, or the
environment variable ``STREAMFL_METRICS_PORT`` for ``streamfl run --broker``)
the tracker serves these gauges on ``http://HOST:PORT/metrics``
(:class:`TrackerMetrics`; all carry the label ``run_id``):

==================================  =========================================================
``streamfl_regret{comparator}``     cumulative regret (nats) per comparator: ``static``,
                                    ``expected``, ``dynamic``; live values after every chunk
                                    of steps, the exact end-of-run values once finished. A
                                    comparator appears once it has a value: the expected
                                    regret of a logistic/softmax run only at the end (its
                                    comparator needs the whole horizon)
``streamfl_cumulative_loss``        Σ_t network loss of FedSEA (nats)
``streamfl_step``                   t, steps tracked so far
``streamfl_rounds``                 rounds completed (all LOSS records of step rτ received)
``streamfl_samples_per_second``     client-samples tracked per second since the tracker started
``streamfl_samples_per_second_now`` client-samples tracked per second over the last
                                    ``RATE_WINDOW`` s (the current rate)
``streamfl_loss_consumer_lag``      LOSS records written but not yet read by the tracker
``streamfl_round_latency_seconds``  wall time between the tracker receiving the last LOSS
                                    record of step (r−1)τ and of step rτ for the latest round
                                    r, i.e. how long one round of τ steps takes end to end
``streamfl_dead_letters``           records on the run's dead-letter topic (committed records,
                                    counted; offsets also hold transaction markers)
``streamfl_finished``               1 once the summary is written, else 0
==================================  =========================================================

Lag and dead letters are refreshed at most every 0.5 s; the others per
received record or per chunk. Under ``streamfl run --metrics-port P
--metrics-linger S`` (environment ``STREAMFL_METRICS_PORT``,
``STREAMFL_METRICS_LINGER``) the server keeps serving the final values for S
seconds after the summary is written.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from streamfl.regret import RegretTracker
from streamfl.runtime.experiment import MAIN, _jsonable, tracker_learner
from streamfl.runtime.header import describe_inputs
from streamfl.runtime.sink import MetricsSink
from streamfl.transport.format import FormatError, GMFGlobal, Global, Loss, RankedLoss, decode
from streamfl.transport.spec import ConfigMismatch, check_fingerprint, config_fingerprint
from streamfl.transport.state import read_to_end
from streamfl.transport.topics import BrokerUnavailable, Topics, check_broker, make_reader


log = logging.getLogger("streamfl.tracker")
RATE_WINDOW = 5.0          # s over which streamfl_samples_per_second_now is measured


class BadLoss(ValueError):
    """A record on the loss topic that is not a valid LOSS record of this run (dead-lettered, not fatal)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class TrackerError(RuntimeError):
    """The tracker cannot continue; one-line message."""


class TrackerMetrics:
    """The tracker's Prometheus gauges (see the module doc), served over HTTP on their own registry.

    Parameters
    ----------
    port : int
        TCP port; 0 picks a free one (see :attr:`port`).
    run_id : str
        Value of the ``run_id`` label.
    addr : str
        Listen address (default all interfaces).

    Raises
    ------
    OSError
        The port is taken.
    """

    COMPARATORS = ("static", "expected", "dynamic")

    def __init__(self, port: int, run_id: str, addr: str = "0.0.0.0"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server
        self.registry = CollectorRegistry()
        self.run_id = run_id

        def gauge(name, doc, labels=()):
            return Gauge(name, doc, ["run_id", *labels], registry=self.registry)

        self.regret = gauge("streamfl_regret", "Cumulative regret of FedSEA per comparator (nats)", ["comparator"])
        self.cum_loss = gauge("streamfl_cumulative_loss", "Cumulative network loss of FedSEA (nats)")
        self.step = gauge("streamfl_step", "Steps tracked so far")
        self.rounds = gauge("streamfl_rounds", "Averaging rounds whose last step the tracker has received")
        self.sps = gauge("streamfl_samples_per_second", "Client-samples tracked per second since the tracker started")
        self.sps_now = gauge("streamfl_samples_per_second_now",
                             f"Client-samples tracked per second over the last {RATE_WINDOW:g} s")
        self.lag = gauge("streamfl_loss_consumer_lag", "LOSS records not yet read by the tracker")
        self.round_latency = gauge("streamfl_round_latency_seconds",
                                   "Seconds between the last LOSS of step (r-1)tau and of step r*tau, latest round")
        self.dead = gauge("streamfl_dead_letters", "Records on the run's dead-letter topic")
        self.finished = gauge("streamfl_finished", "1 once the run's summary is written")
        for g in (self.cum_loss, self.step, self.rounds, self.sps, self.sps_now, self.lag, self.dead, self.finished):
            g.labels(run_id).set(0)
        self.round_latency.labels(run_id).set(float("nan"))
        self.server, self.thread = start_http_server(port, addr, registry=self.registry)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return self.server.server_port

    def set(self, gauge, value, *labels) -> None:
        """Set ``gauge`` for this run (None is stored as NaN)."""
        gauge.labels(self.run_id, *labels).set(float("nan") if value is None else float(value))

    def set_regrets(self, regrets: dict) -> None:
        """Set ``streamfl_regret`` from a {comparator: value} mapping; a comparator without a finite value yet
        (None or NaN) is not exported."""
        for c in self.COMPARATORS:
            v = regrets.get(c)
            if v is not None and np.isfinite(v):
                self.set(self.regret, v, c)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class LossAssembler:
    """Reassembles per-worker LOSS messages into whole steps.

    Parameters
    ----------
    n_clients, n_features, n_classes : int
        M, d, K (the played models of a linear run's LOSS records).
    negatives : int or None
        N for a streaming GMF run: its RANKED_LOSS records carry ranks (k,)
        and training negatives (k, N) instead of played models.

    Steps may arrive in any order and interleaved across workers. A client
    reported again for the same step with the same values (bit for bit: a
    replay after a rebalance) is counted once (:attr:`duplicates`); with
    other values it is an error naming both workers (two workers computed
    different numbers for one client).

    Examples
    --------
    >>> a = LossAssembler(2, 1)
    >>> msg = Loss(t=1, worker=0, clients=np.array([0]), losses=np.array([0.5]), played=np.zeros((1, 1, 1)))
    >>> a.add(msg); a.add(msg); a.duplicates, a.complete(1)
    (1, False)
    """

    def __init__(self, n_clients: int, n_features: int = 1, n_classes: int = 1, negatives: int | None = None):
        self.M, self.d, self.K = n_clients, n_features, n_classes
        self.kind = Loss if negatives is None else RankedLoss
        # per-client fields besides the loss: name → (shape of one client's value, dtype, fill)
        self.fields = ({"played": ((n_features, n_classes), np.float64, 0.0)} if negatives is None else
                       {"ranks": ((), np.int64, 0), "negatives": ((negatives,), np.int64, -1)})
        self.steps: dict[int, dict] = {}
        self.duplicates = 0        # (step, client) reports counted once

    def add(self, msg) -> None:
        """Store one LOSS (or RANKED_LOSS) message.

        Raises
        ------
        BadLoss
            The other record kind than this run's, an unknown client id, wrong
            shapes, or a client named twice in one record (nothing is stored;
            the caller dead-letters the record).
        TrackerError
            A client reported twice with different values.
        """
        if not isinstance(msg, self.kind):
            raise BadLoss("not_loss", f"a {type(msg).__name__} record on the loss topic of a run whose workers "
                                      f"send {'LOSS' if self.kind is Loss else 'RANKED_LOSS'} records")
        ids = msg.clients
        if ids.size and (ids.min() < 0 or ids.max() >= self.M):
            raise BadLoss("bad_field", f"LOSS from worker {msg.worker} at step {msg.t} names clients {ids.tolist()} "
                                       f"(M = {self.M})")
        values = {name: getattr(msg, name) for name in self.fields}
        for name, (shape, _, _) in self.fields.items():
            if values[name].shape[1:] != shape:
                what = "models" if name == "played" else name
                raise BadLoss("shape_mismatch", f"LOSS from worker {msg.worker} at step {msg.t}: {what} "
                                                f"{values[name].shape[1:]}, expected {shape}")
        if len(np.unique(ids)) != len(ids):
            raise BadLoss("bad_field", f"LOSS from worker {msg.worker} at step {msg.t} names a client twice: "
                                       f"{ids.tolist()}")
        slot = self.steps.get(msg.t)
        if slot is None:
            slot = self.steps[msg.t] = {"losses": np.zeros(self.M), "seen": np.zeros(self.M, bool),
                                        "worker": np.full(self.M, -1),
                                        **{n: np.full((self.M, *sh), fill, dt) for n, (sh, dt, fill) in self.fields.items()}}
        values["losses"] = msg.losses
        seen = slot["seen"][ids]
        if seen.any():
            old = ids[seen]
            same = np.ones(len(old), bool)
            for name, v in values.items():
                same &= (slot[name][old] == v[seen]).reshape(len(old), -1).all(axis=1)
            if not same.all():
                bad = old[~same]
                raise TrackerError(f"step {msg.t}: clients {bad.tolist()} reported twice with different values, by "
                                   f"worker {int(slot['worker'][bad[0]])} and worker {msg.worker}")
            self.duplicates += len(old)
            ids = ids[~seen]
            values = {name: v[~seen] for name, v in values.items()}
        for name, v in values.items():
            slot[name][ids] = v
        slot["seen"][ids], slot["worker"][ids] = True, msg.worker

    def complete(self, t: int) -> bool:
        slot = self.steps.get(t)
        return slot is not None and bool(slot["seen"].all())

    def missing(self, t: int) -> list[int]:
        slot = self.steps.get(t)
        return list(range(self.M)) if slot is None else np.flatnonzero(~slot["seen"]).tolist()

    def take(self, t0: int, n: int):
        """Remove and return steps t0+1 … t0+n: losses (n, M) and each field (n, M, …) — for a linear run
        the played models (n, M, d, K) as a second value, for a GMF run a dict ``rank``/``negatives``."""
        slots = [self.steps.pop(t) for t in range(t0 + 1, t0 + n + 1)]
        losses = np.stack([s["losses"] for s in slots])
        if self.kind is Loss:
            return losses, np.stack([s["played"] for s in slots])
        return losses, {"rank": np.stack([s["ranks"] for s in slots]),
                        "negatives": np.stack([s["negatives"] for s in slots])}


def track(cfg, stream, bootstrap: str, run_id: str, run_dir: Path, on_chunk: Callable | None = None,
          check: Callable[[], None] | None = None, timeout: float = 60.0, plots: bool | None = None,
          extra: dict | None = None, metrics_port: int | None = None, metrics: TrackerMetrics | None = None,
          metrics_linger: float = 0.0) -> dict:
    """Consume the run's LOSS topic until step T and write the run folder.

    Parameters
    ----------
    cfg : ExperimentConfig
    stream : Stream
        ``build_stream(cfg)``: regenerated locally for X, y, mask, optimum.
    bootstrap, run_id : str
    run_dir : Path
        Must exist and hold ``config.yaml``.
    on_chunk : callable(tracker, stream) or None
        Live-view hook, after every chunk.
    check : callable() or None
        Called while waiting; raise from it to abort (e.g. a worker died).
    timeout : float
        Seconds without any LOSS record before :class:`TrackerError`.
    plots : bool or None
        Override ``cfg.output.plots``.
    extra : dict or None
        Added to ``summary.json`` (transport details).
    metrics_port : int or None
        Serve Prometheus gauges on this port while tracking (0 = any free
        port); default: the environment variable ``STREAMFL_METRICS_PORT``,
        else no metrics.
    metrics : TrackerMetrics or None
        Use these gauges instead (the caller owns and closes them).
    metrics_linger : float
        Seconds to keep serving after the summary is written (so a scraper
        gets the final values), when this call started the server.

    Returns
    -------
    dict
        The summary, with the same keys as :func:`streamfl.runtime.experiment.run_experiment`.
    """
    run_dir = Path(run_dir)
    topics = Topics(run_id)
    own_metrics = False
    if metrics is None:
        if metrics_port is None and os.environ.get("STREAMFL_METRICS_PORT"):
            metrics_port = int(os.environ["STREAMFL_METRICS_PORT"])
            metrics_linger = metrics_linger or float(os.environ.get("STREAMFL_METRICS_LINGER") or 0)
        if metrics_port is not None:
            try:
                metrics = TrackerMetrics(metrics_port, run_id)
            except OSError as e:
                raise TrackerError(f"cannot serve metrics on port {metrics_port}: {e.strerror or e}") from None
            own_metrics = True
    try:
        return _track(cfg, stream, bootstrap, run_id, run_dir, topics, on_chunk, check, timeout, plots, extra, metrics)
    finally:
        if own_metrics:
            if metrics_linger > 0:
                time.sleep(metrics_linger)
            metrics.close()


def _track(cfg, stream, bootstrap, run_id, run_dir, topics, on_chunk, check, timeout, plots, extra, metrics):
    M = stream.n_clients
    K = stream.n_classes if stream.task == "softmax" else 1
    sink = MetricsSink(run_dir, cfg.output.format)
    gmf = cfg.learner.model == "gmf"
    if gmf:              # streaming FedNCF: ranks and negatives from RANKED_LOSS records, as the embedded engine
        from streamfl.regret.ranking import RankingTracker
        from streamfl.runtime.experiment import build_gmf_clients
        model = build_gmf_clients(cfg, stream, cfg.learner.tau)
        tracker = RankingTracker(stream, MAIN, [MAIN], model, sink=sink)
        assembler = LossAssembler(M, negatives=model.negatives)
    else:
        tracker = RegretTracker(stream, MAIN, [MAIN], radius=cfg.learner.radius, sink=sink,
                                spool_dir=str(run_dir / "spool"), reservoir_size=cfg.reservoir_size, seed=cfg.seed,
                                client_columns=cfg.output.client_columns,
                                client_columns_max=cfg.output.client_columns_max, **tracker_learner(cfg),
                                **cfg.tracker.model_dump())
        assembler = LossAssembler(M, stream.n_features, K)
    fingerprint = config_fingerprint(cfg, learner=True)
    reader = make_reader(bootstrap, f"streamfl-{run_id}-tracker", topics.loss)
    started = time.perf_counter()
    tau = cfg.learner.tau
    dead = _DeadCounter(bootstrap, run_id, topics)
    rejects = _Rejects(bootstrap, run_id, topics)
    watch = _Watch(reader, topics, metrics, tau, M, dead)
    comm = _RoundBytes(bootstrap, run_id, topics) if (cfg.learner.compression is not None or gmf) and tau else None
    up = down = None
    try:
        last = time.monotonic()
        ready = 1                      # the first step not yet known to be complete
        for chunk in stream.chunks(cfg.chunk_size):
            n = chunk.n_steps
            while True:
                while ready <= chunk.t0 + n and assembler.complete(ready):
                    ready += 1
                if ready > chunk.t0 + n:
                    break
                got = False
                for records in reader.poll(timeout_ms=100).values():
                    for rec in records:
                        try:
                            msg = decode(rec.value)
                            if not isinstance(msg, (Loss, RankedLoss)):
                                raise BadLoss("not_loss", f"a {type(msg).__name__} record on the loss topic")
                            try:
                                check_fingerprint(rec.headers, fingerprint, f"the LOSS record at offset {rec.offset}")
                            except ConfigMismatch as e:
                                raise TrackerError(str(e)) from None
                            assembler.add(msg)
                        except (FormatError, BadLoss) as e:     # a stray or broken writer must not end the run
                            rejects.send(rec, e.reason, e.detail)
                            got = True
                            continue
                        watch.on_loss(assembler, msg.t)
                        got = True
                if got:
                    last = time.monotonic()
                watch.poll()
                if check is not None:
                    check()
                if time.monotonic() - last > timeout:
                    raise TrackerError(f"no LOSS record for {timeout:.0f} s; step {ready} still lacks clients "
                                       f"{assembler.missing(ready)}")
            if comm is not None:
                up, down = comm.cumulative(chunk.t0, n, tau, check, timeout)
                tracker.count_bytes(up, down)
            losses, played = assembler.take(chunk.t0, n)
            if gmf:
                tracker.update(chunk, {MAIN: losses}, None, observed=played)
            else:
                tracker.update(chunk, {MAIN: losses}, played)
            watch.on_chunk(tracker, time.perf_counter() - started)
            if on_chunk is not None:
                on_chunk(tracker, stream)
        dead_letters = dead.count()
        watch.poll(force=True)          # final lag and dead-letter count, while the reader is open
    finally:
        reader.close()
        rejects.close()
        dead.close()
        sink.close()
        if comm is not None:
            comm.close()
    elapsed = time.perf_counter() - started
    summary = tracker.finalize()
    summary.update({
        "main": MAIN, "n_clients": M, "n_features": stream.n_features, "task": stream.task,
        "n_steps": tracker.state.t, "tau": tau, "rounds": 0 if tau is None else tracker.state.t // tau,
        "elapsed_seconds": elapsed, "samples_per_second": tracker.state.samples / max(elapsed, 1e-9),
        "config": json.loads(cfg.model_dump_json()), "run_dir": str(run_dir), "metrics_file": sink.path.name,
        "gaps": {}, "dead_letters": dead_letters, "duplicate_loss_reports": assembler.duplicates,
        "inputs": describe_inputs(cfg, stream),
    })
    if gmf:              # the embedded run's GMF summary keys (streamfl.runtime.experiment._run_gmf)
        from streamfl.runtime.experiment import _add_columns
        _add_columns(sink.path, tracker.static_columns)
        del summary["n_features"]      # items, not features: n_items below
        summary.update({"model": "gmf", "n_items": stream.n_items, "task": "bce (implicit feedback)",
                        "chunk_size_used": cfg.chunk_size, "bottleneck": None,
                        "bytes_up": int(up[-1]) if up is not None else 0,
                        "bytes_down": int(down[-1]) if down is not None else 0})
    if extra:
        summary.update(extra)
    (run_dir / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2))
    if cfg.output.plots if plots is None else plots:
        from streamfl.report.plots import render_ranking_run, render_run
        summary["plots"] = [str(p) for p in (render_ranking_run if gmf else render_run)(run_dir)]
    if metrics is not None:
        metrics.set_regrets({c: summary.get(f"regret_{c}") for c in TrackerMetrics.COMPARATORS})
        metrics.set(metrics.cum_loss, summary["cum_loss"][MAIN])
        metrics.set(metrics.sps, summary["samples_per_second"])
        metrics.set(metrics.finished, 1)
    return summary


class _RoundBytes:
    """Bytes up and down of each round of a compressed run, from the GLOBAL records' headers.

    The aggregator writes on each GLOBAL(r) the headers ``bytes_up`` (lengths
    of the compressed payloads it averaged) and ``bytes_down`` (M float64
    payloads of the model, 0 when nobody took part): the embedded engine's
    count (:class:`streamfl.runtime.learners.Federated`), made from the
    payloads that travelled.
    """

    def __init__(self, bootstrap: str, run_id: str, topics: Topics):
        from consumers.aggregator import BYTES_DOWN, BYTES_UP
        self.keys = (BYTES_UP, BYTES_DOWN)
        self.topics = topics
        self.reader = make_reader(bootstrap, f"streamfl-{run_id}-tracker-global", topics.global_)
        self.rounds: dict[int, tuple[int, int]] = {}

    def cumulative(self, t0: int, n: int, tau: int, check, timeout: float) -> tuple[np.ndarray, np.ndarray]:
        """Cumulative bytes up and down after each step t0+1 … t0+n, (n,) int64 each (round r counts at step rτ).

        Waits for the GLOBAL records of the rounds that end in these steps.
        """
        need = (t0 + n) // tau
        last = time.monotonic()
        while any(r not in self.rounds for r in range(1, need + 1)):
            got = False
            for records in self.reader.poll(timeout_ms=100).values():
                for rec in records:
                    try:
                        msg = decode(rec.value)
                    except FormatError:
                        continue
                    h = dict(rec.headers or ())
                    if isinstance(msg, (Global, GMFGlobal)) and all(k in h for k in self.keys):
                        self.rounds.setdefault(msg.round, tuple(int(h[k].decode()) for k in self.keys))
                        got = True
            if got:
                last = time.monotonic()
            if check is not None:
                check()
            if time.monotonic() - last > timeout:
                missing = [r for r in range(1, need + 1) if r not in self.rounds]
                raise TrackerError(f"no GLOBAL record with byte counts for rounds {missing[:5]} for {timeout:.0f} s")
        per_round = np.array([(0, 0)] + [self.rounds[r] for r in range(1, need + 1)], dtype=np.int64)
        cum = np.cumsum(per_round, axis=0)
        rounds = np.arange(t0 + 1, t0 + n + 1) // tau
        return cum[rounds, 0], cum[rounds, 1]

    def close(self) -> None:
        self.reader.close()


class _Rejects:
    """Sends records of the loss topic that are not valid LOSS records of this run to the dead-letter topic
    (unchanged, headers ``reason``, ``source`` = tracker, ``detail``, ``partition``/``offset``) and logs them."""

    def __init__(self, bootstrap: str, run_id: str, topics: Topics):
        self.bootstrap, self.run_id, self.topics, self.producer = bootstrap, run_id, topics, None

    def send(self, rec, reason: str, detail: str) -> None:
        from streamfl.transport.state import resilient_producer
        from streamfl.transport.topics import dead_letter
        log.warning("rejected LOSS record at offset %d -> %s: %s: %s", rec.offset, self.topics.dead, reason, detail)
        if self.producer is None:
            self.producer = resilient_producer(self.bootstrap, f"streamfl-{self.run_id}-tracker-dead")
        dead_letter(self.producer, self.topics, rec.value, rec.key, reason, "tracker", detail,
                    origin=(rec.partition, rec.offset))
        self.producer.flush(timeout=30)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=10)


class _DeadCounter:
    """Counts the committed records of the run's dead-letter topic (workers write it in transactions, whose
    commit markers take offsets too, so end − start offset over-counts)."""

    def __init__(self, bootstrap: str, run_id: str, topics: Topics):
        self.reader = make_reader(bootstrap, f"streamfl-{run_id}-tracker-dead", topics.dead)
        self.topic, self.n = topics.dead, 0

    def count(self, timeout: float = 10.0) -> int | None:
        """Records on the topic now (None if it cannot be read)."""
        def on_record(rec):
            self.n += 1
        try:
            read_to_end(self.reader, self.topic, on_record, timeout)
        except Exception:
            return None
        return self.n

    def close(self) -> None:
        self.reader.close()


class _Watch:
    """Feeds :class:`TrackerMetrics` from the tracking loop (no-op without metrics)."""

    def __init__(self, reader, topics, metrics, tau, n_clients, dead):
        self.reader, self.topics, self.m, self.tau, self.dead = reader, topics, metrics, tau, dead
        self.recent = collections.deque()       # (monotonic time, samples) of recent chunks
        self.next_poll = 0.0
        self.last_round = (0, None)          # (round, monotonic time its last LOSS arrived)
        self.rounds_done = set()
        if metrics is not None:
            from kafka import TopicPartition
            self.loss_tp = TopicPartition(topics.loss, 0)

    def on_loss(self, assembler, t: int) -> None:
        if self.m is None or not self.tau or t % self.tau or not assembler.complete(t):
            return
        r, now = t // self.tau, time.monotonic()
        if r in self.rounds_done:
            return
        self.rounds_done.add(r)
        prev_r, prev_time = self.last_round
        if prev_time is not None and r == prev_r + 1:
            self.m.set(self.m.round_latency, now - prev_time)
        self.last_round = (r, now) if r > prev_r else self.last_round
        self.m.set(self.m.rounds, len(self.rounds_done))

    def on_chunk(self, tracker, elapsed: float) -> None:
        if self.m is None:
            return
        st = tracker.state
        self.m.set_regrets(st.regret)
        self.m.set(self.m.cum_loss, st.cum_loss.get(MAIN))
        self.m.set(self.m.step, st.t)
        self.m.set(self.m.sps, st.samples / max(elapsed, 1e-9))
        now = time.monotonic()
        self.recent.append((now, st.samples))
        while len(self.recent) > 2 and now - self.recent[1][0] >= RATE_WINDOW:
            self.recent.popleft()
        if len(self.recent) >= 2:
            (t0, s0), (t1, s1) = self.recent[0], self.recent[-1]
            self.m.set(self.m.sps_now, (s1 - s0) / max(t1 - t0, 1e-9))

    def poll(self, force: bool = False) -> None:
        """Refresh lag and dead-letter count (broker round trip; at most every 0.5 s)."""
        now = time.monotonic()
        if self.m is None or (not force and now < self.next_poll):
            return
        self.next_poll = now + 0.5
        try:
            ends = self.reader.end_offsets([self.loss_tp])
            self.m.set(self.m.lag, max(0, ends[self.loss_tp] - self.reader.position(self.loss_tp)))
            self.m.set(self.m.dead, self.dead.count(timeout=2.0))
        except Exception:      # metrics must never stop the run
            pass


def summary_line(summary: dict) -> str:
    """The tracker's last stdout line: the headline figures as strict JSON (NaN and ±inf become null).

    >>> summary_line({"run_dir": "r", "n_steps": 3, "regret_static": 1.5, "regret_expected": float("nan")})
    '{"run_dir": "r", "n_steps": 3, "regret_static": 1.5, "regret_expected": null, "regret_dynamic": null, "samples_per_second": null}'
    """
    keys = ("run_dir", "n_steps", "regret_static", "regret_expected", "regret_dynamic", "samples_per_second")
    return json.dumps(_jsonable({k: summary.get(k) for k in keys}), allow_nan=False)


def main(argv=None) -> int:
    """Entry point for a tracker on its own machine; exit 0, or 1 with ``error: tracker: …``."""
    ap = argparse.ArgumentParser(description="Consume a run's LOSS topic, track regret and write the run folder.")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--config", required=True, help="the run's experiment config (YAML)")
    ap.add_argument("--out", required=True, help="run folder to write")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds without a LOSS record before failing")
    ap.add_argument("--metrics-port", type=int, default=None)
    ap.add_argument("--metrics-linger", type=float, default=0.0)
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    undo = None
    try:
        check_broker(args.bootstrap)       # the same bounded check and message as every role and the CLI
    except (BrokerUnavailable, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        from streamfl.config import dump_config
        from streamfl.runtime.experiment import build_stream, claim_run_dir
        from streamfl.transport.spec import kafka_unsupported, read_config
        cfg = read_config(args.config)
        stream = build_stream(cfg)
        why = kafka_unsupported(cfg, stream)
        if why:
            raise ValueError(why)
        out, undo = claim_run_dir(cfg, Path(args.out))
        if not (out / "config.yaml").exists() or not (out / "config.yaml").samefile(args.config):
            (out / "config.yaml").write_text(dump_config(cfg))     # resolved: paths no longer relative
        summary = track(cfg, stream, args.bootstrap, args.run_id, out, timeout=args.timeout,
                        plots=False if args.no_plots else None, metrics_port=args.metrics_port,
                        metrics_linger=args.metrics_linger,
                        extra={"transport": {"kind": "kafka", "broker": args.bootstrap, "run_id": args.run_id,
                                             "topics": Topics(args.run_id).all(), "roles": "separate"}})
        print(summary_line(summary))
        return 0
    except Exception as e:
        if undo is not None:
            undo()                 # a failed run leaves no half-written folder behind
        print(f"error: tracker: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
