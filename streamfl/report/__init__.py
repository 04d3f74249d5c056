"""Reports of finished runs: PNG figures (:mod:`streamfl.report.plots`).

The names below are loaded from :mod:`streamfl.report.plots` on first use
(PEP 562), so that importing a light submodule such as
:mod:`streamfl.report.labels` does not import matplotlib and pandas.
"""

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


def __getattr__(name):
    if name in __all__:
        from . import plots
        return getattr(plots, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
