"""The ``streamfl`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console

from .config import ConfigError, default_config, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Streaming federated online learning with live regret (FedSEA and baselines).")
console = Console()
err = Console(stderr=True)

USER_ERRORS = (ConfigError, ValueError, FileNotFoundError, KeyError)


def _fail(message: str, code: int = 2):
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command()
def run(config: Optional[Path] = typer.Option(None, "--config", "-c", help="Experiment file (YAML). Default: the built-in default experiment."),
        out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: <output.dir>/<name>-<timestamp>)."),
        steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Override the number of steps T."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Override the seed."),
        live: bool = typer.Option(True, "--live/--no-live", help="Show the live regret view."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots at the end."),
        broker: Optional[str] = typer.Option(None, "--broker", help="Run FedSEA over this Kafka broker (HOST:PORT) instead of embedded; baselines are skipped."),
        workers: int = typer.Option(1, "--workers", min=1, help="With --broker: number of worker processes.")):
    """Run an experiment (embedded mode, or over Kafka with --broker) and write a run folder."""
    if broker is not None:
        return _run_over_kafka(config, out, steps, seed, live, plots, broker, workers)
    from .runtime.experiment import run_experiment
    from .runtime.live import LiveView
    from .runtime.sweep import run_sweep
    try:
        cfg = load_config(config) if config else default_config()
        update = {k: v for k, v in (("steps", steps), ("seed", seed)) if v is not None}
        if update:
            cfg = cfg.model_copy(update=update)
        if cfg.sweep is not None:
            result = run_sweep(cfg, out, console=console, live=live)
            console.print(f"[bold green]sweep done[/] → {result['dir']}")
            console.print(f"comparison plot: {result['plot']}")
            return
        from .runtime.experiment import build_stream
        total = build_stream(cfg).n_steps
        view = LiveView(f"{cfg.name}: FedSEA τ={cfg.learner.tau}", total, console=console, enabled=live)
        with view:
            summary = run_experiment(cfg, out, on_chunk=view, plots=plots and cfg.output.plots)
    except USER_ERRORS as e:
        _fail(str(e).strip("'\""))
    _print_summary(summary)


def _print_summary(summary: dict):
    console.print(f"\n[bold green]done[/] in {summary['elapsed_seconds']:.1f} s "
                  f"({summary['samples_per_second']:,.0f} client-samples/s) → {summary['run_dir']}")
    console.print(f"T = {summary['n_steps']}, M = {summary['n_clients']}, τ = {summary['tau']}, rounds = {summary['rounds']}")
    console.print(f"static regret (best fixed model, {summary['regret_static_method']}): {summary['regret_static']:.4f}")
    for key in ("regret_expected", "regret_dynamic"):
        v = summary.get(key)
        if v is not None and v == v:
            console.print(f"{key.replace('_', ' ')}: {v:.4f}")
    for name, gap in summary.get("gaps", {}).items():
        console.print(f"loss gap FedSEA − {name}: {gap:+.4f}")
    for p in summary.get("plots", []):
        console.print(f"plot: {p}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A finished run folder.")):
    """Render the plots and print the summary of a finished run."""
    from .report.plots import render_run
    try:
        summary_path = run_dir / "summary.json"
        if not summary_path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a run folder (no summary.json)")
        summary = json.loads(summary_path.read_text())
        paths = render_run(run_dir)
    except USER_ERRORS as e:
        _fail(str(e))
    summary["plots"] = [str(p) for p in paths]
    summary.setdefault("elapsed_seconds", float("nan"))
    _print_summary(summary)


@app.command()
def datasets():
    """List the real datasets bundled with River that `source.kind: river_dataset` accepts."""
    from .generators.tabular import river_dataset_names
    for name in river_dataset_names():
        console.print(name)


@app.command("default-config")
def default_config_cmd():
    """Print the default experiment as YAML (a starting point for your own)."""
    console.print(yaml.safe_dump(json.loads(default_config().model_dump_json()), sort_keys=False), highlight=False)


def main():
    app()


def _run_over_kafka(config, out, steps, seed, live, plots, broker, workers):
    """``run --broker``: FedSEA over a real Kafka broker (see :mod:`streamfl.runtime.kafka_run`)."""
    from .runtime.experiment import build_stream
    from .runtime.kafka_run import BrokerUnavailable, KafkaRunError, run_kafka_experiment
    from .runtime.live import LiveView
    from .transport.topics import check_broker
    try:
        cfg = load_config(config) if config else default_config()
        update = {k: v for k, v in (("steps", steps), ("seed", seed)) if v is not None}
        if update:
            cfg = cfg.model_copy(update=update)
        if cfg.baselines:
            err.print(f"note: over Kafka only FedSEA runs; skipping baselines {', '.join(cfg.baselines)}", highlight=False)
        check_broker(broker)
        total = build_stream(cfg).n_steps
        view = LiveView(f"{cfg.name}: FedSEA τ={cfg.learner.tau} over Kafka ({workers} worker(s))", total,
                        console=console, enabled=live)
        with view:
            summary = run_kafka_experiment(cfg, broker, workers=workers, run_dir=out, on_chunk=view,
                                           plots=plots and cfg.output.plots)
    except (BrokerUnavailable, KafkaRunError) + USER_ERRORS as e:
        _fail(str(e).strip("'\""))
    _print_summary(summary)


if __name__ == "__main__":
    main()
