"""How client models are combined: pure aggregation functions and strategies.

Dense models: :func:`weighted_average` and the :class:`Strategy` classes.
Sparse tables (rows with ids): :mod:`streamfl.aggregation.sparse` (FedAvg,
SimpleAvg, MF-FedAvg, FedSubAvg).
"""

from .functions import weighted_average
from .sparse import SparseRound, SparseRows, SparseUpdate
from .strategy import FedAvg, FedSubAvg, LocalOnly, MFFedAvg, Strategy

__all__ = ["FedAvg", "FedSubAvg", "LocalOnly", "MFFedAvg", "SparseRound", "SparseRows", "SparseUpdate", "Strategy", "weighted_average"]
