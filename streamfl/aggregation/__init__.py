"""How client models are combined: pure aggregation functions and strategies."""

from .functions import weighted_average
from .strategy import FedAvg, LocalOnly, Strategy

__all__ = ["FedAvg", "LocalOnly", "Strategy", "weighted_average"]
