"""Run a FedSEA experiment over a real Kafka broker (``streamfl run --broker HOST:PORT``).

:func:`run_kafka_experiment` creates the run's topics
(:mod:`streamfl.transport.topics`), writes the run folder's ``config.yaml``
and starts, as separate processes,

* the aggregator (``python -m consumers.aggregator``), unless τ is unset,
* N workers (``python -m consumers.worker``) in one consumer group,
* the stream producer (``python -m producers.stream_producer``),

then runs the regret tracker (:func:`consumers.tracker.track`) in the
foreground. The numbers equal the embedded engine's (``streamfl run``) to
floating-point summation order in the server average (tested to 1e-9).

Only FedSEA runs over Kafka: configured baselines are skipped (the summary
says so under ``transport.skipped_baselines``). Adaptive drift, sweeps and
``weighting: samples`` are refused with a ValueError.

Each process logs to ``<run_dir>/logs/<name>.log``. A process that fails stops
the run with a one-line :class:`KafkaRunError` quoting its error. Topics are
deleted at the end unless ``keep_topics``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from ..transport.spec import kafka_unsupported
from ..transport.topics import BrokerUnavailable, Topics, check_broker, create_topics, delete_topics

_ROOT = Path(__file__).resolve().parents[2]      # the folder holding streamfl/, producers/, consumers/

__all__ = ["BrokerUnavailable", "KafkaRunError", "run_kafka_experiment"]


class KafkaRunError(RuntimeError):
    """A process of the Kafka run failed; the message is one line for the user."""


class _Child:
    """A child process with its log file."""

    def __init__(self, name: str, module: str, args: list[str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=str(_ROOT))

    def error_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [ln for ln in lines if ln.startswith("error:")]
        return (errors or lines or [""])[-1].strip()

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
        self.log.close()


def run_kafka_experiment(cfg, broker: str, workers: int = 1, run_dir: Path | None = None, on_chunk=None,
                         plots: bool | None = None, partitions: int | None = None, timeout: float = 60.0,
                         keep_topics: bool = False) -> dict:
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
    """
    if str(_ROOT) not in sys.path:    # an editable install made before consumers/ existed does not map it
        sys.path.append(str(_ROOT))
    from consumers.tracker import TrackerError, track

    from .experiment import build_stream, new_run_dir

    stream = build_stream(cfg)
    why = kafka_unsupported(cfg, stream)
    if why:
        raise ValueError(why)
    M = stream.n_clients
    P = M if partitions is None else int(partitions)
    if not 1 <= P:
        raise ValueError(f"--partitions must be ≥ 1, got {P}")
    if not 1 <= workers <= P:
        raise ValueError(f"--workers must be between 1 and the number of data partitions ({P}), got {workers}")
    check_broker(broker)

    run_id = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
    topics = Topics(run_id)
    run_dir = Path(run_dir) if run_dir else new_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
    log_dir = run_dir / "logs"
    log_dir.mkdir(exist_ok=True)

    create_topics(broker, topics, P)
    common = ["--bootstrap", broker, "--run-id", run_id]
    children: list[_Child] = []
    try:
        tau = cfg.learner.tau
        if tau is not None and stream.n_steps // tau > 0:
            children.append(_Child("aggregator", "consumers.aggregator",
                                   common + ["--clients", str(M), "--rounds", str(stream.n_steps // tau),
                                             "--timeout", str(max(300.0, 5 * timeout))], log_dir))
        for i in range(workers):
            children.append(_Child(f"worker-{i}", "consumers.worker",
                                   common + ["--config", str(config_path), "--partitions", str(P),
                                             "--worker-id", str(i), "--workers", str(workers),
                                             "--timeout", str(timeout)], log_dir))
        children.append(_Child("producer", "producers.stream_producer",
                               common + ["--config", str(config_path), "--partitions", str(P)], log_dir))

        def check():
            for c in children:
                code = c.proc.poll()
                if code not in (None, 0):
                    raise KafkaRunError(f"{c.name} exited with code {code}: {c.error_line()} "
                                        f"(log: {c.log_path})")

        extra = {"transport": {"kind": "kafka", "broker": broker, "run_id": run_id, "workers": workers,
                               "partitions": P, "topics": topics.all(),
                               "skipped_baselines": list(cfg.baselines)}}
        try:
            summary = track(cfg, stream, broker, run_id, run_dir, on_chunk=on_chunk, check=check,
                            timeout=timeout, plots=plots, extra=extra)
        except TrackerError as e:
            check()          # a dead child explains a stalled tracker better
            raise KafkaRunError(f"tracker: {e}") from None
        return summary
    finally:
        for c in children:
            c.terminate()
        for c in children:
            c.wait()
        if not keep_topics:
            delete_topics(broker, topics)
