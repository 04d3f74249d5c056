"""Offline evaluation: ranking metrics (HR@K, NDCG@K) and the ROC AUC."""

from .classification import roc_auc
from .ranking import hit_ratio, ndcg, ranks_with_random_ties

__all__ = ["hit_ratio", "ndcg", "ranks_with_random_ties", "roc_auc"]
