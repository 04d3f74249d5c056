"""Reports of finished runs: PNG figures (:mod:`streamfl.report.plots`)."""

from .plots import (
    load_metrics,
    load_summary,
    plot_client_losses,
    plot_heterogeneity,
    plot_regret,
    plot_regret_over_sqrt_t,
    plot_sweep,
    render_run,
    render_sweep,
)

__all__ = [
    "load_metrics",
    "load_summary",
    "plot_client_losses",
    "plot_heterogeneity",
    "plot_regret",
    "plot_regret_over_sqrt_t",
    "plot_sweep",
    "render_run",
    "render_sweep",
]
