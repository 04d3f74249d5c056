"""Regret: comparators, FedSEA's heterogeneity estimates and the live tracker."""

from .comparators import LeastSquaresHindsight, ReservoirHindsight, quadratic_min, solve_hindsight
from .tracker import LiveState, RegretTracker

__all__ = ["LeastSquaresHindsight", "LiveState", "RegretTracker", "ReservoirHindsight", "quadratic_min",
           "solve_hindsight"]
