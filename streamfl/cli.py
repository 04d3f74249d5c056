"""The ``streamfl`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

# Heavy modules (numpy, numba, scipy, pandas, river, matplotlib) are imported inside the commands, after the
# config has been validated: a bad config or option is reported in a fraction of a second.

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Streaming federated online learning with live regret (FedSEA and baselines).")
console = Console()
err = Console(stderr=True)

USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, KeyError, UnicodeDecodeError, MemoryError)


def _message(e: Exception) -> str:
    """One line for the user; KeyError's repr quotes are dropped."""
    if isinstance(e, MemoryError) and not str(e):
        return ("out of memory: the input is too large for the memory available; use fewer rows, clients or "
                "features")
    text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    return " ".join(str(text).split())


def _fail(message: str, code: int = 2):
    _error_line(message)
    raise typer.Exit(code)


def _error_line(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr; the message is text, not rich markup (``[and 1 more]`` stays)."""
    from rich.markup import escape
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


@app.command()
def run(config: Optional[Path] = typer.Option(None, "--config", "-c", help="Experiment file (YAML). Default: the built-in default experiment."),
        out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: <output.dir>/<name>-<timestamp>)."),
        steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Override the number of steps T."),
        seed: Optional[int] = typer.Option(None, "--seed", min=0, help="Override the seed."),
        seeds: Optional[int] = typer.Option(None, "--seeds", min=1, help="Run N seeds (seed, seed+1, …) in parallel processes; report mean ± 95% t-interval (overrides the config's seeds)."),
        live: bool = typer.Option(True, "--live/--no-live", help="Show the live regret view."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots at the end."),
        broker: Optional[str] = typer.Option(None, "--broker", help="Run FedSEA over this Kafka broker (HOST:PORT) instead of embedded; baselines are skipped."),
        workers: int = typer.Option(1, "--workers", min=1, help="With --broker: number of worker processes."),
        producers: int = typer.Option(1, "--producers", min=1, help="With --broker: number of producer processes (they share the data partitions; producing is CPU-bound)."),
        partitions: Optional[int] = typer.Option(None, "--partitions", min=1, help="With --broker: P, partitions of the data topic (client m → partition m mod P; default M, one per client; at least --workers)."),
        keep_topics: bool = typer.Option(False, "--keep-topics", help="With --broker: keep the run's topics on the broker (e.g. to `streamfl replay` its data topic later; the run id is in summary.json under transport.run_id)."),
        metrics_port: Optional[int] = typer.Option(None, "--metrics-port", min=0, max=65535, help="With --broker: serve the tracker's Prometheus metrics on this port (e.g. 9464) during the run."),
        metrics_linger: float = typer.Option(0.0, "--metrics-linger", min=0, help="With --metrics-port: keep serving this many seconds after the summary is written (so the final regrets get scraped).")):
    """Run an experiment (embedded mode, or over Kafka with --broker) and write a run folder."""
    if broker is not None and seeds not in (None, 1):
        _fail("--seeds runs embedded; over Kafka run one seed per run (--seed)")
    if broker is not None:
        return _run_over_kafka(config, out, steps, seed, live, plots, broker, workers, keep_topics, metrics_port,
                               producers, metrics_linger, partitions)
    if keep_topics or metrics_port is not None or workers != 1 or producers != 1 or partitions is not None:
        _fail("--workers, --producers, --partitions, --keep-topics and --metrics-port need --broker HOST:PORT")
    try:
        cfg = _resolve(out, config, steps, seed)
    except USER_ERRORS as e:
        _fail(_message(e))
    from .runtime.experiment import run_experiment
    from .runtime.live import LiveView
    try:
        if seeds is not None:
            cfg = cfg.model_copy(update={"seeds": seeds})
        if cfg.sweep is not None:
            from .runtime.sweep import run_sweep     # imported only for a sweep: start-up of a single run
            result = run_sweep(cfg, out, console=console, live=live, plots=plots)
            console.print(f"[bold green]sweep done[/] → {result['dir']}")
            _print_sweep_rows(result["rows"])
            if result["plot"]:
                console.print(f"comparison plot: {result['plot']}")
            if result.get("agreement"):
                console.print(result["agreement"]["text"], soft_wrap=True)
            return
        if cfg.seeds > 1:
            from .runtime.experiment import build_stream
            from .runtime.seeds import run_seeds
            _print_inputs(cfg, build_stream(cfg))    # what seed s reads and decides; the other seeds alike
            summary = run_seeds(cfg, out, console=console, live=live, plots=plots and cfg.output.plots)
            _print_seeds(summary)
            return
        from .runtime.experiment import build_stream
        stream = build_stream(cfg)
        _print_inputs(cfg, stream)
        from .runtime.learners import bottleneck_note
        slow = bottleneck_note(cfg.baselines)
        if slow:
            console.print(slow, soft_wrap=True)
        learner = _learner_label(cfg)
        view = LiveView(f"{cfg.name}: {learner} τ={cfg.learner.tau}", stream.n_steps, console=console, enabled=live,
                        bottleneck=slow)
        with view:
            summary = run_experiment(cfg, out, on_chunk=view, plots=plots and cfg.output.plots, stream=stream)
    except USER_ERRORS as e:
        _fail(_message(e))
    _print_summary(summary)


def _print_sweep_rows(rows: list[dict]) -> None:
    """One line per setting of a finished sweep: the final metric (mean ± 95 % t half-width when seeds > 1)
    and, for sparse logistic settings, the loss gap to the fedavg baseline (FedSubAvg's lead when < 0)."""
    from .report.plots import SWEEP_METRICS

    def pm(row: dict, key: str) -> str:
        mean, hi = row.get(key), row.get(f"{key}_hi")
        if mean is None or mean != mean:
            return "n/a"
        return f"{mean:.4f}" + (f" ± {hi - mean:.4f}" if hi is not None and hi == hi else "")

    for row in rows:
        metric = next((m for m in SWEEP_METRICS if m in row), None)
        if metric is None:
            continue
        line = f"  {row['run']} (M = {row['M']}): {metric.replace('_', ' ')} {pm(row, metric)}"
        if "gap_fedavg" in row:
            line += f"; loss gap to fedavg {pm(row, 'gap_fedavg')} nats"
        console.print(line, highlight=False, soft_wrap=True)


def _learner_label(cfg) -> str:
    """The main learner as the live view's title names it."""
    if cfg.learner.model == "sparse_logistic":
        from .config import SparseConfig
        return "FedSubAvg" if (cfg.learner.sparse or SparseConfig()).rule == "fedsubavg" else "sparse FedAvg"
    return "FedNCF GMF" if cfg.learner.model == "gmf" else "FedSEA"


def _resolve(out: Optional[Path], config: Optional[Path], steps: Optional[int], seed: Optional[int]):
    """The experiment of ``run``: the config file (or the default) with --steps/--seed applied.

    The overrides are validated like the file's fields (a copy with ``model_copy`` would skip validation and
    let a value the config refuses reach the engine). Only pydantic and yaml are imported here.
    """
    from .config import ConfigError, config_data, default_config, load_config, parse_config
    _check_out(out)
    cfg = load_config(config) if config else default_config()
    from .runtime.folders import check_folder      # before the run header: a file where the run folder goes
    if out is not None:
        check_folder(out, "--out")
    else:
        check_folder(Path(cfg.output.dir), "output.dir")
    update = {k: v for k, v in (("steps", steps), ("seed", seed)) if v is not None}
    if not update:
        return cfg
    try:
        return parse_config({**config_data(cfg), **update})
    except ConfigError as e:
        given = " ".join(f"--{k} {v}" for k, v in update.items())
        raise ConfigError(f"{given}: {e}") from None


def _print_inputs(cfg, stream) -> None:
    """The run header: how the input was read, what was inferred, dropped or skipped (see runtime/header.py)."""
    from .runtime.experiment import check_learners
    from .runtime.header import describe_inputs, header_lines
    try:
        check_learners(cfg, stream)      # a refusal comes before the header and the progress bar
    except USER_ERRORS as e:
        _fail(_message(e))
    for line in header_lines(describe_inputs(cfg, stream)):
        console.print(line, highlight=False, soft_wrap=True,
                      style="bold red" if line.startswith("warning:") else
                      "yellow" if line.startswith(("note:", "dropped column")) else None)


def _check_out(out: Optional[Path]) -> None:
    """A run folder must be new (or empty): never mix two runs' files."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is an existing file; give a folder for the run")
    if out.is_dir() and any(out.iterdir()):
        raise FileExistsError(f"--out {out} already holds files; choose a new folder or remove it")


def _print_summary(summary: dict, finished: bool = True):
    if finished:
        console.print(f"\n[bold green]done[/] in {summary['elapsed_seconds']:.1f} s "
                      f"({summary['samples_per_second']:,.0f} client-samples/s)")
    console.print(f"run folder: {summary['run_dir']}", soft_wrap=True)
    tau = "never (local only)" if summary["tau"] is None else summary["tau"]
    console.print(f"T = {summary['n_steps']}, M = {summary['n_clients']}, τ = {tau}, rounds = {summary['rounds']}")
    if summary.get("model") == "gmf":
        comp = summary["comparator"]
        console.print(f"prequential HR@10: {summary['prequential_hr10']:.4f} over {summary['interactions']:,} "
                      f"interactions; BCE per interaction {summary['avg_loss_per_interaction']:.4f}")
        console.print(f"offline fixed GMF (estimated comparator): HR@10 {comp['prequential_hr10']:.4f}, "
                      f"BCE per interaction {comp['avg_loss_per_interaction']:.4f}")
    if summary.get("model") == "sparse_logistic":
        comp, concept = summary["comparator"], summary["concept"]
        from .report.labels import main_label
        per = "  ".join(f"{main_label(summary) if name == summary['main'] else name} {v:.4f}"
                        for name, v in summary["avg_loss_per_sample"].items())
        console.print(f"cumulative loss (nats): {summary['cum_loss']['fedsea']:.4f}; BCE per sample: {per}",
                      soft_wrap=True)
        console.print(f"best fixed model in hindsight: {comp['loss']:.4f} nats (gradient norm {comp['grad_norm']:.2g}); "
                      f"true concept (w*, b*): {concept['loss']:.4f} nats, regret against it {concept['regret']:.4f}",
                      soft_wrap=True)
    est = " (ESTIMATE)" if summary.get("regret_static_is_estimate") else ""
    console.print(f"static regret{est}: {_num(summary['regret_static'])}  [dim]({summary['regret_static_method']})[/dim]")
    for key in ("regret_expected", "regret_dynamic"):
        v, method = summary.get(key), summary.get(f"{key}_method")
        how = f"  [dim]({method})[/dim]" if method else ""
        if v is not None and v == v:
            console.print(f"{key.replace('_', ' ')}: {_num(v)}{how}")
        elif method:
            console.print(f"{key.replace('_', ' ')}: n/a{how}")
    for name, gap in summary.get("gaps", {}).items():
        from .report.labels import main_label
        main = main_label(summary)
        console.print(f"loss gap {main} − {name}: {_num(gap, sign=True)}")
    reg = (summary.get("heterogeneity") or {}).get("regime") or {}
    if reg:
        verdict = {True: "helps", False: "does not help"}.get(reg.get("parallelisation_helps"),
                                                              f"undetermined ({reg.get('reason')})")
        num = lambda key: "n/a" if reg.get(key) is None or reg[key] != reg[key] else f"{reg[key]:.4g}"  # noqa: E731
        console.print(f"parallelisation: noise term {num('noise_term')} vs temporal {num('temporal_term')} + "
                      f"transient {num('transient_term')} {reg.get('units', '')} ⇒ {verdict}", soft_wrap=True)
    said = set((summary.get("inputs") or {}).get("notes", []))     # the header's notes are not repeated
    for note in summary.get("tracker_notes", []):
        if note not in said:
            diverging = note.startswith(("diverging:", "the network loss rose"))     # streamfl.regret.stability
            console.print(f"{'warning' if diverging else 'note'}: {note}", style="bold red" if diverging else "yellow",
                          highlight=False, soft_wrap=True)
    for p in summary.get("plots", []):
        console.print(f"plot: {p}", soft_wrap=True)


def _num(v: float, sign: bool = False) -> str:
    """A summary figure: 4 decimals, or 5 significant digits in scientific notation from 10⁷ on (a diverging
    run's regrets have hundreds of digits).

    >>> _num(-155.91291), _num(2.5e180), _num(0.5, sign=True)
    ('-155.9129', '2.5000e+180', '+0.5000')
    """
    if v is None or v != v:
        return "n/a"
    s = "+" if sign else ""
    return f"{v:{s}.4e}" if abs(v) >= 1e7 else f"{v:{s}.4f}"


def _print_seeds(summary: dict):
    """Mean ± 95 % t-interval half-width of the headline figures of a seeds run."""
    iv = summary["intervals"]
    console.print(f"\n[bold green]done[/]: {len(summary['seeds'])} seeds {summary['seeds']} → {summary['run_dir']}",
                  soft_wrap=True)
    console.print(f"[dim]{summary['interval']}[/dim]")
    keys = ["regret_static", "regret_expected", "regret_dynamic",
            # FedSEA Lemma 1, one pair per regret: each adds up to the regret of its basis
            "regret_static_virtual", "consensus_part_static", "regret_expected_virtual", "consensus_part_expected",
            "heterogeneity.regime.noise_term", "heterogeneity.regime.temporal_term",
            "prequential_hr10", "avg_loss_per_interaction", "comparator.prequential_hr10"]   # the last 3: gmf runs
    sparse = summary.get("model") == "sparse_logistic"
    if sparse:
        keys += ["concept.regret"] + [k for k in iv if k.startswith("cum_loss.")]
    keys += [k for k in iv if k.startswith("gaps.")]
    estimate = summary.get("regret_static_is_estimate") is True        # gmf runs: an estimated comparator
    from .report.labels import main_label
    main = main_label(summary)

    def label(key: str) -> str:
        if key.startswith("gaps."):
            return f"loss gap {main} − {key[5:]}"
        if sparse and key.startswith("cum_loss."):
            name = key[9:]
            return f"cumulative loss {main if name == summary.get('main') else name} (nats)"
        if key == "concept.regret":
            return "regret against the true concept (w*, b*)"
        return key.replace('_', ' ') + (" (ESTIMATE)" if estimate and key == "regret_static" else "")

    for key in keys:
        r = iv.get(key)
        if r and r["n"] and r["mean"] == r["mean"]:
            half = (r["hi"] - r["mean"]) if r["hi"] == r["hi"] else float("nan")
            console.print(f"{label(key)}: {r['mean']:.4f} ± {half:.4f}  (n = {r['n']})", soft_wrap=True)
    if summary.get("wall_seconds") is not None:
        console.print(f"wall time: {summary['wall_seconds']:.1f} s for the {len(summary['seeds'])} seeds "
                      f"(one run: {summary.get('elapsed_seconds', float('nan')):.1f} s on average)", soft_wrap=True)
    for p in summary.get("plots", []):
        console.print(f"plot: {p}", soft_wrap=True)


@app.command(help="Re-render the plots of a finished run or sweep folder and print its summary.\n\n"
                  "A run folder (with summary.json): plots/*.png are drawn again from its metrics file and "
                  "summary.json. A sweep folder (with sweep.csv): every run's plots, then sweep.png (and regime.png "
                  "when sweep.json holds the regime check).\n\n"
                  "summary.json and sweep.csv are read, never rewritten: they keep the numbers of the run.")
def report(run_dir: Path = typer.Argument(..., help="A finished run folder (summary.json) or sweep folder (sweep.csv).")):
    try:
        summary_path = run_dir / "summary.json"
        if (run_dir / "sweep.csv").is_file() and not summary_path.is_file():
            from .report.plots import render_model_run, render_sweep
            return _report_sweep(run_dir, render_model_run, render_sweep)
        if not summary_path.is_file():
            raise FileNotFoundError(f"{run_dir} is neither a run folder (no summary.json) nor a sweep folder "
                                    f"(no sweep.csv)")
        summary = _read_summary(summary_path)
        from .report.plots import render_ranking_run, render_run, render_sparse_run   # matplotlib: once a run's
        try:
            paths = {"gmf": render_ranking_run, "sparse_logistic": render_sparse_run}.get(
                summary.get("model"), render_run)(run_dir)
        except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
            metrics = run_dir / str(summary.get("metrics_file", "metrics.csv"))
            text = _message(e)
            raise ValueError(f"{metrics} is damaged or was not written by streamfl: {text}" if str(metrics) in text
                             else f"{metrics} or {summary_path} is damaged or was not written by streamfl ({text})"
                             ) from None
    except USER_ERRORS as e:
        _fail(_message(e))
    summary["run_dir"] = str(run_dir)             # where the folder is now (it may have been moved)
    summary["plots"] = [str(p) for p in paths]
    _print_summary(summary, finished=False)


def _read_summary(path: Path) -> dict:
    """A run's summary.json, or ValueError with one line naming the file."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({_message(e)}); it is damaged or was not written by "
                         f"streamfl") from None
    needed = ("n_steps", "n_clients", "tau", "rounds", "regret_static", "regret_static_method")
    if not isinstance(summary, dict) or any(k not in summary for k in needed):
        missing = [k for k in needed if not isinstance(summary, dict) or k not in summary]
        raise ValueError(f"{path} is not a streamfl run summary (missing {', '.join(missing)})")
    return summary


def _report_sweep(root: Path, render_run, render_sweep):
    """``report`` on a sweep folder: each run's plots, then sweep.png and regime.png; prints the sweep's table."""
    import pandas as pd
    table = pd.read_csv(root / "sweep.csv")
    if "run" not in table.columns:
        raise ValueError(f"{root / 'sweep.csv'} has no 'run' column; it was not written by a sweep")
    console.print(f"sweep folder: {root}", soft_wrap=True)
    for rec in table.to_dict("records"):
        sub = root / str(rec["run"])
        if not (sub / "summary.json").is_file():
            raise FileNotFoundError(f"{sub} (a run of {root / 'sweep.csv'}) is missing or has no summary.json")
        render_run(sub)
        metric = next((k for k in rec if str(k).startswith("regret_")), None)
        value = f", {metric} = {rec[metric]:.4f}" if metric and rec[metric] == rec[metric] else ""
        console.print(f"  {rec['run']}: {rec.get('label')}, M = {rec.get('M')}{value}; plots in {sub / 'plots'}",
                      soft_wrap=True, highlight=False)
    console.print(f"comparison plot: {render_sweep(root)}", soft_wrap=True)
    saved = root / "sweep.json"
    agreement = json.loads(saved.read_text()).get("agreement") if saved.is_file() else None
    if agreement:
        from .report.plots import plot_regime_agreement
        console.print(f"regime check: {plot_regime_agreement(agreement, root / 'regime.png')}", soft_wrap=True)
        console.print(agreement["text"], soft_wrap=True, highlight=False)


@app.command()
def datasets():
    """List the real datasets bundled with River that `source.kind: river_dataset` accepts."""
    from .generators.tabular import river_dataset_names
    for name in river_dataset_names():
        console.print(name)


@app.command("default-config")
def default_config_cmd():
    """Print the default experiment as YAML (a starting point for your own)."""
    from .config import default_config, dump_config
    console.print(dump_config(default_config()), highlight=False)


reproduce_app = typer.Typer(no_args_is_help=True, help="Reproduce a paper's experiments on data available offline.")
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.command("cvfl")
def reproduce_cvfl(out: Optional[Path] = typer.Option(None, "--out", help="Results folder, new or empty (default: runs/reproduce-cvfl-<timestamp>)."),
                   seeds: int = typer.Option(5, "--seeds", min=1, help="Runs per configuration."),
                   epochs: int = typer.Option(15, "--epochs", min=1, help="Epochs of the compression grid."),
                   bits: list[int] = typer.Option([2, 3, 4], "--bits", help="b values of the grid, repeatable (b = 32 always runs as the baseline)."),
                   q_max_epochs: int = typer.Option(30, "--q-max-epochs", min=1, help="Cap on the epochs of the Q/latency runs."),
                   workers: int = typer.Option(2, "--workers", min=1, help="Processes running the jobs.")):
    """C-VFL (Compressed-VFL, ICML 2022): compressors × b on the digits in four quadrants, and Q against latency."""
    from .reproduce.cvfl import run_cli
    try:
        _check_out(out)
        run_cli(out, console, seeds=seeds, epochs=epochs, bits=tuple(bits), q_max_epochs=q_max_epochs,
                workers=workers)
    except USER_ERRORS as e:
        _fail(_message(e))


@reproduce_app.command("fedncf")
def reproduce_fedncf(
        data: Path = typer.Option(..., "--data", help="MovieLens 100K: the u.data file or the ml-100k folder holding it."),
        out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: runs/fedncf-<timestamp>)."),
        seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per method; figures are mean ± std over them."),
        rounds: int = typer.Option(400, "--rounds", min=1, help="Global rounds of federated training (each user trains once per global round; the paper's 400)."),
        epochs: int = typer.Option(20, "--epochs", min=1, help="Epochs of the centralized upper bound."),
        models: str = typer.Option("gmf", "--models", help="Comma-separated: gmf (always needed), mlp, neumf."),
        batch_size: int = typer.Option(8, "--batch-size", min=1, help="Local mini-batch size B of the clients."),
        embedding_adam: str = typer.Option("sparse", "--embedding-adam", help="Optimiser of the embeddings: sparse (SparseAdam: a row moves only at steps that use it) or dense (torch's Adam on every row used so far)."),
        jobs: int = typer.Option(1, "--jobs", min=1, help="Runs in parallel processes (one core each)."),
        trainer: str = typer.Option("compiled", "--trainer", help="How federated clients (GMF, MLP, NeuMF) train: compiled, batched, vmap or loop.")):
    """FedNCF (paper 003) on MovieLens 100K: GMF with MF-FedAvg, FedAvg and SimpleAvg, centralized and ItemPop bounds."""
    from datetime import datetime

    from .runtime.fedncf import TRAINERS, NCFSettings
    from .reproduce.fedncf import reproduce
    try:
        _check_out(out)
        if trainer not in TRAINERS:
            raise ValueError(f"--trainer must be one of {', '.join(TRAINERS)}; got {trainer!r}")
        if embedding_adam not in ("sparse", "dense"):
            raise ValueError(f"--embedding-adam must be sparse or dense; got {embedding_adam!r}")
        names = tuple(m.strip() for m in models.split(","))
        if "" in names:
            raise ValueError(f"--models: an empty name in {models!r}; give e.g. gmf or gmf,mlp,neumf")
        folder = out or Path("runs") / f"fedncf-{datetime.now():%Y%m%d-%H%M%S}"
        result = reproduce(data, folder, seeds=seeds, global_rounds=rounds, epochs=epochs, models=names,
                           settings=NCFSettings(batch_size=batch_size, global_rounds=rounds,
                                                embedding_adam=embedding_adam), jobs=jobs, trainer=trainer,
                           log=lambda s: console.print(s, highlight=False, soft_wrap=True))
    except USER_ERRORS as e:
        _fail(_message(e))
    console.print(f"\n[bold green]done[/] in {result['wall_seconds']:.0f} s → {folder}", soft_wrap=True)
    for label, v in sorted(result["summary"].items(), key=lambda kv: -kv[1]["hr"]):
        console.print(f"{label:<36} HR@10 {v['hr']:.4f} ± {v['hr_std']:.4f}   NDCG@10 {v['ndcg']:.4f} ± {v['ndcg_std']:.4f}"
                      f"   best HR@10 {v['hr_best']:.4f} ± {v['hr_best_std']:.4f}", highlight=False, soft_wrap=True)
    for name, ok in result["checks"].items():
        shown = f"{ok:.3f}" if isinstance(ok, float) else ok if isinstance(ok, str) else "yes" if ok else "NO"
        console.print(f"{name}: {shown}", highlight=False, soft_wrap=True)


def main():
    """The ``streamfl`` command. A usage error (bad option value, unknown or missing option) is one line
    naming the option, e.g. ``error: --seed: Input should be greater than or equal to 0 (got -1)``."""
    args = sys.argv[1:]
    try:
        code = app(args=args, prog_name="streamfl", standalone_mode=False)
    except Exception as e:
        if _is(e, "NoArgsIsHelpError"):        # `streamfl` alone: the help, as typer shows it
            e.show()
            code = 2
        elif _is(e, "UsageError"):
            _error_line(_usage_message(e, args))
            code = 2
        elif _is(e, "Abort"):
            _error_line("aborted")
            code = 1
        else:
            raise
    sys.exit(code if isinstance(code, int) else 0)


def _is(e: Exception, name: str) -> bool:
    """``e`` is a click exception of this class name (typer ships its own copy of click's exceptions)."""
    return any(c.__name__ == name for c in type(e).__mro__)


def _usage_message(e, args: list[str]) -> str:
    """One line for a click usage error: ``--option: what is wrong (got VALUE)``, or click's own sentence."""
    param = getattr(e, "param", None)
    if _is(e, "BadParameter") and not _is(e, "MissingParameter") and param is not None:
        names = [o for o in param.opts if o.startswith("--")] or list(param.opts) or [param.name]
        value = _given(args, param.opts)
        got = f" (got {value})" if value is not None and value not in e.message else ""
        return " ".join(f"{names[0]}: {e.message.rstrip('.')}{got}".split())
    command = e.ctx.command_path if getattr(e, "ctx", None) is not None else "streamfl"
    return " ".join(f"{e.format_message().rstrip('.')} (see {command} --help)".split())


def _given(args: list[str], opts) -> str | None:
    """The value given on the command line for an option with names ``opts`` (the last one wins)."""
    value = None
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(o + "="):
                value = a[len(o) + 1:]
    return value


def _run_over_kafka(config, out, steps, seed, live, plots, broker, workers, keep_topics=False, metrics_port=None,
                    producers=1, metrics_linger=0.0, partitions=None):
    """``run --broker``: FedSEA over a real Kafka broker (see :mod:`streamfl.runtime.kafka_run`)."""
    try:
        cfg = _resolve(out, config, steps, seed)
    except USER_ERRORS as e:
        _fail(_message(e))
    from .runtime.experiment import build_stream
    from .runtime.kafka_run import BrokerUnavailable, KafkaRunError, run_kafka_experiment
    from .runtime.live import LiveView
    from .transport.topics import check_broker
    if cfg.learner.model == "sparse_logistic":            # before the broker check, the header and any process
        from .transport.spec import SPARSE_OVER_KAFKA
        _fail(SPARSE_OVER_KAFKA)
    try:
        check_broker(broker)
        learner = "FedNCF GMF" if cfg.learner.model == "gmf" else "FedSEA"
        if cfg.baselines:
            err.print(f"note: over Kafka only {learner} runs; skipping baselines {', '.join(cfg.baselines)}",
                      highlight=False, soft_wrap=True)
        stream = build_stream(cfg)
        from .runtime.kafka_run import check_process_counts
        check_process_counts(stream.n_clients, partitions, workers, producers)     # before the run header
        _print_inputs(cfg, stream)
        view = LiveView(f"{cfg.name}: {learner} τ={cfg.learner.tau} over Kafka ({workers} worker(s))", stream.n_steps,
                        console=console, enabled=live)
        if metrics_port is not None:
            # the tracker runs in this process; it reads the port from the environment (see consumers.tracker)
            import os
            os.environ["STREAMFL_METRICS_PORT"] = str(metrics_port)
            os.environ["STREAMFL_METRICS_LINGER"] = str(metrics_linger)
            err.print(f"metrics: http://127.0.0.1:{metrics_port}/metrics", highlight=False)
        with view:
            summary = run_kafka_experiment(cfg, broker, workers=workers, run_dir=out, on_chunk=view,
                                           plots=plots and cfg.output.plots, keep_topics=keep_topics,
                                           producers=producers, partitions=partitions)
    except (BrokerUnavailable, KafkaRunError) + USER_ERRORS as e:
        _fail(_message(e))
    except Exception as e:  # e.g. the tracker's TrackerError (metrics port taken)
        if type(e).__name__ != "TrackerError":
            raise
        _fail(_message(e))
    _print_summary(summary)
    if keep_topics:
        console.print(f"topics kept on {broker}; replay the data with: streamfl replay --broker {broker} "
                      f"--from-run {summary['transport']['run_id']} --run-id NEW_RUN_ID")


# --------------------------------------------------------------------------- roles (multi-machine)
#
# `streamfl run --broker` starts every process of a run on this machine. The role commands start one
# process each, so a run can span machines: point every role at the same --broker, give them the same
# --run-id and the same --config (the stream is regenerated from it, so only numbers travel over Kafka).
# Each role creates the run's topics if they do not exist yet, so they may start in any order.

ROLES_HELP = ("Every role of one run needs the same --broker, --run-id and --config (and --partitions if not M); "
              "start them in any order.")

_BROKER = typer.Option(..., "--broker", help="Kafka bootstrap address HOST:PORT, shared by every role of the run.")
def _run_id_option(value: Optional[str]) -> Optional[str]:
    """Check a run id option (--run-id, --from-run) before anything else runs."""
    if value is not None:
        from .transport.topics import Topics
        try:
            Topics(value)
        except ValueError as e:
            raise typer.BadParameter(str(e).removeprefix("run id ")) from None
    return value


_RUN_ID = typer.Option(..., "--run-id", callback=_run_id_option, help="Run id: 1-64 characters from [A-Za-z0-9_-]; topics are streamfl.<run-id>.*")
_CONFIG = typer.Option(..., "--config", "-c", help="The run's experiment config (YAML); the same file for every role.")
_PARTS = typer.Option(None, "--partitions", min=1, help="P, partitions of the data topic (default M, one per client).")


def _paragraphs(text: str) -> str:
    """Help text: join the lines of each paragraph (the terminal re-wraps them)."""
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def _prepare_role(broker: str, run_id: str, config: Optional[Path], partitions: Optional[int]):
    """Validate the shared options, check the broker and create the run's topics if missing.

    Returns (cfg, stream, P); exits with a one-line error on a user mistake.
    """
    from .config import load_config
    try:
        cfg = load_config(config) if config is not None else None     # before the heavy imports below
    except USER_ERRORS as e:
        _fail(_message(e))
    from .runtime.experiment import build_stream
    from .transport.spec import kafka_unsupported
    from .transport.topics import BrokerUnavailable, Topics, check_broker, ensure_topics
    try:
        topics = Topics(run_id)
        stream = None
        if cfg is not None:
            stream = build_stream(cfg)
            why = kafka_unsupported(cfg, stream)
            if why:
                raise ValueError(why)
        P = partitions or (stream.n_clients if stream is not None else None)
        if stream is not None:
            from .runtime.kafka_run import check_process_counts
            check_process_counts(stream.n_clients, P, 1, 1)     # P ≤ M before any topic is created
        check_broker(broker)
        if P is not None:
            ensure_topics(broker, topics, P)
    except (BrokerUnavailable,) + USER_ERRORS as e:
        _fail(_message(e))
    return cfg, stream, P


def _exit_with(code: int):
    if code:
        raise typer.Exit(code)


@app.command(help=_paragraphs(f"""Role: publish the config's stream to a run's data topic (one DATA record per step and client).

The producer of `streamfl run --broker`, on its own: it regenerates the stream from --config and sends
client m's records to partition m mod P. Several producers can share the partitions: start
`--share 0/2` and `--share 1/2` (partitions p with p mod 2 = 0, and = 1). {ROLES_HELP}"""))
def produce(broker: str = _BROKER, run_id: str = _RUN_ID, config: Path = _CONFIG,
            partitions: Optional[int] = _PARTS,
            share: str = typer.Option("0/1", "--share", help="I/N: this is producer I of N; it sends the partitions p with p mod N = I.")):
    index, _, count = share.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        _fail(f"--share must be I/N with 0 ≤ I < N (e.g. 0/2), got {share!r}")
    _, _, P = _prepare_role(broker, run_id, config, partitions)
    if int(count) > P:
        _fail(f"--share {share}: N = {count} producers for {P} data partitions; N must be at most {P}")
    from producers import stream_producer
    _exit_with(stream_producer.main(["--bootstrap", broker, "--run-id", run_id, "--config", str(config),
                                     "--partitions", str(P), "--share", share]))


@app.command(help=_paragraphs(f"""Role: train the clients of some data partitions (test-then-train, FedSEA local steps).

Workers join the run's consumer group; Kafka assigns them data partitions (and so clients) and moves
them when a worker joins or dies: the new owner restores the clients' models from the run's state
changelog. A worker publishes its clients' losses every step and their models every τ steps (GMF:
losses, ranks and negatives; item rows and h, b), then waits for the aggregator's global model. Start as many as you like (up to P useful), on any machines.
{ROLES_HELP}"""))
def worker(broker: str = _BROKER, run_id: str = _RUN_ID, config: Path = _CONFIG,
           worker_id: str = typer.Option("0", "--worker-id", help="This worker's number, used in its logs and Kafka client id; 'auto' = $STREAMFL_WORKER_ID, else the replica number n of a Docker Compose container named <project>-worker-<n> (n − 1)."),
           workers: int = typer.Option(1, "--workers", min=1, help="Accepted for compatibility; partitions are assigned by the consumer group."),
           partitions: Optional[int] = _PARTS,
           timeout: float = typer.Option(60.0, "--timeout", min=1, help="Seconds without data or global model before failing.")):
    worker_id = _worker_id(worker_id)
    _, _, P = _prepare_role(broker, run_id, config, partitions)
    from consumers import worker as worker_mod
    _exit_with(worker_mod.main(["--bootstrap", broker, "--run-id", run_id, "--config", str(config),
                                "--partitions", str(P), "--worker-id", str(worker_id), "--workers", str(workers),
                                "--timeout", str(timeout)]))


def _worker_id(value: str) -> int:
    """``--worker-id``: an int ≥ 0, or ``auto`` (env STREAMFL_WORKER_ID, else the Compose replica number − 1)."""
    import os
    import re
    import socket
    if value != "auto":
        if not value.isdigit():
            _fail(f"--worker-id must be an integer ≥ 0 or 'auto', got {value!r}")
        return int(value)
    env = os.environ.get("STREAMFL_WORKER_ID")
    if env is not None:
        return _worker_id(env)
    names = [socket.gethostname()]
    try:      # Compose's DNS answers the reverse lookup of a replica's address with <project>-<service>-<n>.<network>
        names.append(socket.gethostbyaddr(socket.gethostbyname(socket.gethostname()))[0])
    except OSError:
        pass
    for name in names:
        m = re.search(r"[-_]worker[-_](\d+)(?:\.|$)", name)
        if m and int(m.group(1)) >= 1:
            return int(m.group(1)) - 1
    _fail("--worker-id auto: set STREAMFL_WORKER_ID, or run as a Docker Compose replica named <project>-worker-<n> "
          f"(this host is {', '.join(names)})")


@app.command(help=_paragraphs(f"""Role: the FedSEA server — average the workers' updates into one global model per round.

Reads the updates topic; once the client counts of round r add up to M it publishes
GLOBAL(r) = (1/M) Σ_m x_m (with learner.model gmf: MF-FedAvg of the item rows, FedAvg of h and b).
Malformed or NaN updates go to the dead-letter topic. One per run.
M and the number of rounds ⌊T/τ⌋ come from --config. {ROLES_HELP}"""))
def aggregate(broker: str = _BROKER, run_id: str = _RUN_ID, config: Path = _CONFIG,
              partitions: Optional[int] = _PARTS,
              timeout: float = typer.Option(300.0, "--timeout", min=1, help="Seconds without an update before failing.")):
    cfg, stream, _ = _prepare_role(broker, run_id, config, partitions)
    tau = cfg.learner.tau
    rounds = 0 if tau is None else stream.n_steps // tau
    if rounds == 0:
        err.print("note: this config never averages (tau: null or τ > T); the aggregator has nothing to do", highlight=False)
        return
    from consumers import aggregator
    _exit_with(aggregator.main(["--bootstrap", broker, "--run-id", run_id, "--clients", str(stream.n_clients),
                                "--rounds", str(rounds), "--timeout", str(timeout), "--config", str(config)]))


@app.command(help=_paragraphs(f"""Role: the regret tracker — consume the loss topic, track regret, write the run folder.

Writes --out (config.yaml, metrics.csv/parquet, summary.json, plots) like `streamfl run`. With
--metrics-port it serves Prometheus gauges (regret per comparator, samples/s, loss-topic lag, round
latency, dead letters) on http://HOST:PORT/metrics; 9464 is the conventional port. One per run.
{ROLES_HELP}"""))
def track(broker: str = _BROKER, run_id: str = _RUN_ID, config: Path = _CONFIG,
          out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: <output.dir>/<name>-<timestamp>)."),
          partitions: Optional[int] = _PARTS,
          timeout: float = typer.Option(300.0, "--timeout", min=1, help="Seconds without a LOSS record before failing."),
          metrics_port: Optional[int] = typer.Option(None, "--metrics-port", min=0, max=65535, help="Serve Prometheus metrics on this port (default off; 9464 is conventional)."),
          metrics_linger: float = typer.Option(0.0, "--metrics-linger", min=0, help="Keep serving metrics this many seconds after the run (so the final values get scraped)."),
          plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots at the end.")):
    cfg, stream, _ = _prepare_role(broker, run_id, config, partitions)
    from .runtime.experiment import claim_run_dir
    try:
        out, undo = claim_run_dir(cfg, out)       # removed again if the tracker fails
    except USER_ERRORS as e:
        _fail(_message(e))
    _print_inputs(cfg, stream)
    from consumers import tracker
    argv = ["--bootstrap", broker, "--run-id", run_id, "--config", str(config), "--out", str(out),
            "--timeout", str(timeout), "--metrics-linger", str(metrics_linger)]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if not plots:
        argv.append("--no-plots")
    code = tracker.main(argv)
    if code:
        undo()
    _exit_with(code)


@app.command(help=_paragraphs("""Replay a recorded stream into a run's data topic (the producer role, from a recording).

Sources: --from-run RUN_ID (the data topic of a previous run kept with `run --broker --keep-topics`),
--from-topic NAME, or --file data.csv|.parquet (a table; its columns come from --config's
`source.kind: file` or from --label/--features/--client-column/--time-column).
Start: --from-offset N (Kafka offset in every partition; for a file, skip N steps) or
--from-timestamp TS (epoch seconds/ms or ISO-8601; for a file, a time-column value); a start point
renumbers the first whole step to t = 1. Pace: --speed max (as fast as possible), 1 (real time from
the record timestamps / time column), k (k× real time). Start the new run's workers, aggregator and
tracker with `streamfl worker|aggregate|track --run-id NEW_RUN_ID --config ...` as usual."""))
def replay(broker: str = _BROKER,
           run_id: str = typer.Option(..., "--run-id", callback=_run_id_option, help="The NEW run that receives the records."),
           from_run: Optional[str] = typer.Option(None, "--from-run", callback=_run_id_option, help="Run id of a previous run whose data topic to replay."),
           from_topic: Optional[str] = typer.Option(None, "--from-topic", help="A topic of DATA records to replay."),
           file: Optional[Path] = typer.Option(None, "--file", help="A CSV or Parquet table to replay."),
           config: Optional[Path] = typer.Option(None, "--config", "-c", help="The new run's config; with --file its source (kind: file) says how to read the table."),
           label: Optional[str] = typer.Option(None, "--label", help="--file: label column."),
           features: Optional[str] = typer.Option(None, "--features", help="--file: comma-separated feature columns (default: all numeric)."),
           client_column: Optional[str] = typer.Option(None, "--client-column", help="--file: column of client ids (natural clients)."),
           time_column: Optional[str] = typer.Option(None, "--time-column", help="--file: time column (numbers = seconds, or datetimes)."),
           partitions: Optional[int] = _PARTS,
           from_offset: Optional[int] = typer.Option(None, "--from-offset", min=0, help="Start at this offset (file: skip this many steps)."),
           from_timestamp: Optional[str] = typer.Option(None, "--from-timestamp", help="Start at this time: epoch seconds, epoch ms, or ISO-8601."),
           speed: str = typer.Option("max", "--speed", help="'max', or k > 0 for k× the recorded pace (1 = real time).")):
    from producers.replay import ReplayError, parse_speed, parse_timestamp, replay_file, replay_topic
    from .transport.topics import BrokerUnavailable, Topics
    try:
        if sum(x is not None for x in (from_run, from_topic, file)) != 1:
            raise ValueError("give exactly one source: --from-run RUN_ID, --from-topic NAME or --file PATH")
        if from_offset is not None and from_timestamp is not None:
            raise ValueError("give at most one of --from-offset and --from-timestamp")
        k = parse_speed(speed)
        ts = None if from_timestamp is None else parse_timestamp(from_timestamp)
        if (from_topic or (from_run and Topics(from_run).data)) == Topics(run_id).data:
            raise ValueError(f"the source is run {run_id}'s own data topic: replaying a run into itself would "
                             f"append to its recording; pick a new --run-id")
        if file is not None:
            cfg = _file_config(config, file, label, features, client_column, time_column)
            from .runtime.experiment import build_stream
            P = partitions or build_stream(cfg).n_clients
            _prepare_topics(broker, run_id, P)
            stats = replay_file(broker, cfg, run_id, P, k, from_offset, ts)
        else:
            source = from_topic or Topics(from_run).data
            from .transport.topics import check_broker
            check_broker(broker)
            from producers.replay import _partitions
            have = len(_partitions(broker, source))
            if not have:
                raise ValueError(f"topic {source} does not exist on {broker} (keep a run's topics with "
                                 f"`streamfl run --broker ... --keep-topics`)")
            P = partitions or have
            _prepare_topics(broker, run_id, P)
            stats = replay_topic(broker, source, run_id, P, k, from_offset, ts)
    except (ReplayError, BrokerUnavailable) + USER_ERRORS as e:
        _fail(_message(e))
    console.print(f"replayed {stats.records} records ({stats.steps} steps, from original step {stats.first_step}) "
                  f"into {Topics(run_id).data} in {stats.wall_seconds:.2f} s (recorded span {stats.span_seconds:.2f} s"
                  + (f", {stats.undecodable} undecodable forwarded" if stats.undecodable else "") + ")")


def _prepare_topics(broker, run_id, P):
    from .transport.topics import Topics, check_broker, ensure_topics
    check_broker(broker)
    ensure_topics(broker, Topics(run_id), P)


def _file_config(config, file, label, features, client_column, time_column):
    """The experiment config of a --file replay: --config's, or one built from the column options."""
    from .config import config_data, load_config, parse_config
    if config is not None:
        cfg = load_config(config)
        if cfg.source.kind != "file":
            raise ValueError(f"--file needs a config whose source.kind is file, got {cfg.source.kind!r}")
        data = config_data(cfg)
    else:
        data = {"baselines": [], "source": {"kind": "file"}}
    src = data["source"]
    src["path"] = str(file.resolve())          # --file is relative to the current folder
    if label is not None:
        src["label"] = label
    if features is not None:
        src["features"] = [f.strip() for f in features.split(",") if f.strip()]
    if client_column is not None:
        src["split"] = {"kind": "column", "column": client_column}
    if time_column is not None:
        src["time_column"] = time_column
    return parse_config(data)



@app.command(help=_paragraphs("""Run streaming C-VFL (vertical FL: parties hold feature slices of the same samples) from a vertical config (kind: vertical; see docs/cvfl.md).

Embedded by default; with --broker, over Kafka: one topic per party carrying its slice keyed by sample id, a server that joins them by sample id, M party processes exchanging compressed embeddings with it. Writes metrics.csv (per round: prequential loss, cumulative bytes up and down) and summary.json to --out."""))
def vertical(config: Path = typer.Option(..., "--config", "-c", help="Vertical config file (YAML or JSON, kind: vertical)."),
             out: Path = typer.Option(..., "--out", help="Results folder, new or empty."),
             broker: Optional[str] = typer.Option(None, "--broker", help="Run over this Kafka broker (HOST:PORT) instead of embedded."),
             keep_topics: bool = typer.Option(False, "--keep-topics", help="With --broker: keep the run's topics."),
             timeout: float = typer.Option(600.0, "--timeout", min=1, help="With --broker: give up after this many seconds."),
             live: bool = typer.Option(True, "--live/--no-live", help="Embedded: print one line per round (loss, bytes).")):
    """Streaming C-VFL, embedded or over Kafka."""
    from .vertical.spec import load_vertical_config
    try:
        _check_out(out)
        cfg = load_vertical_config(config)
        from .vertical.spec import compressor_lines, resolved_compressors
        for line in compressor_lines(resolved_compressors(cfg)):
            console.print(line, highlight=False, soft_wrap=True)
        if broker is None:
            from .vertical.spec import run_embedded, write_results
            def show(row):      # the live view: one line per round
                console.print(f"round {row['round']:>4}  samples {row['samples']:>6,}  loss {row['loss']:.4f}  "
                              f"avg loss {row['cumulative_loss'] / row['samples']:.4f}  bytes up {row['bytes_up']:,}  "
                              f"down {row['bytes_down']:,}", highlight=False, soft_wrap=True)
            summary = write_results(out, cfg, run_embedded(cfg, show if live else None), "embedded")
        else:
            from .runtime.kafka_run import KafkaRunError
            from .runtime.vertical_kafka import run_vertical_kafka
            from .transport.topics import BrokerUnavailable, split_bootstrap
            split_bootstrap(broker)
            try:
                summary = run_vertical_kafka(cfg, broker, out, keep_topics=keep_topics, timeout=timeout)
            except (KafkaRunError, BrokerUnavailable) as e:
                _fail(_message(e), 1)
    except USER_ERRORS as e:
        _fail(_message(e))
    console.print(f"{summary['mode']}: {summary['rounds']} rounds, {summary['samples']} samples, mean prequential "
                  f"loss {summary['mean_loss']:.4f}, bytes up {summary['bytes_up']:,}, down {summary['bytes_down']:,}"
                  + (f", dead letters {summary['dead_letters']}" if summary.get("dead_letters") else ""),
                  highlight=False, soft_wrap=True)
    console.print(f"results in {out}", highlight=False)


if __name__ == "__main__":
    main()
