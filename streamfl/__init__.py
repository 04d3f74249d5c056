"""streamfl: streaming federated online learning with live regret.

Layout (one concept per package):

* :mod:`streamfl.generators` — where samples come from (the SEA adversary,
  River generators, real tables, injected drift);
* :mod:`streamfl.models` — client models, losses, step sizes (where samples
  are learned from);
* :mod:`streamfl.aggregation` — how client models are averaged;
* :mod:`streamfl.regret` — where losses are counted and compared;
* :mod:`streamfl.runtime` — the engine loop, experiments, live view;
* :mod:`streamfl.report` — plots of finished runs.
"""

__version__ = "0.1.0"
