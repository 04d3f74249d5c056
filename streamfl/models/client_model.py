"""The client-model interface the engine, the learners and the trackers share.

A *client model* holds the M clients' models at once (stacked parameters, so
a step is a few batched operations, never a Python loop per client per
sample) and offers the engine the three things a federated online learner
needs:

* :meth:`ClientModel.test_then_train` — every present client is charged the
  loss of its current (played) model on its step's samples, then learns
  from them. Returns the losses, shape (M,): what the tracker counts.
* :meth:`ClientModel.upload` — what the clients send the server at the end
  of a round: for a dense model the (M, ...) stack of models, for a model
  with embedding tables a :class:`ModelUpdate` (sparse item rows with their
  ids and counts, dense weights stacked). The learner's aggregation
  strategy (:mod:`streamfl.aggregation.strategy`) turns it into a global
  model.
* :meth:`ClientModel.download` — the clients take the server's result.

and, for the tracker, :meth:`ClientModel.observations`: per-client values
measured while testing (e.g. the rank of an arriving positive for
prequential HR@10), shape (M,) each.

Implementations: :class:`~streamfl.models.linear.StackedLinear` (FedSEA's
linear models, dense (M, d, K) updates),
:class:`~streamfl.models.streaming_gmf.StreamingGMF` (FedNCF's GMF,
paper 003, sparse item rows with MF-FedAvg) and
:class:`~streamfl.models.streaming_sparse.StreamingSparseLogistic`
(FedSubAvg's sparse logistic regression, paper 000, sparse feature rows
with FedSubAvg).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ModelUpdate:
    """One round's upload of M clients whose model has embedding tables.

    Attributes
    ----------
    sparse : dict name -> SparseRound
        For every aggregated embedding table, the rows each client touched
        this round (client index, row ids, deltas = local row − global row,
        samples per row; :class:`streamfl.aggregation.sparse.SparseRound`).
    dense : dict name -> ndarray (M, ...)
        Stacked dense weights (e.g. the prediction layer), aggregated by a
        weighted average.
    n_samples : ndarray (M,)
        Samples each client learned from during the round.
    nbytes : int
        Payload bytes of the round's uploads (float64 rows and weights,
        int64 ids and counts) of the clients that took part.
    """

    sparse: dict
    dense: dict
    n_samples: np.ndarray
    nbytes: int = 0


@dataclass
class GlobalUpdate:
    """The server's answer to a :class:`ModelUpdate`: global deltas of sparse tables and new dense weights.

    Attributes
    ----------
    sparse : dict name -> SparseRows
        The global delta at the rows some client touched (sorted ids).
    dense : dict name -> ndarray
        The aggregated dense weights (one model, no client axis).
    nbytes : int
        Payload bytes of the broadcast (to every client).
    """

    sparse: dict = field(default_factory=dict)
    dense: dict = field(default_factory=dict)
    nbytes: int = 0


class ClientModel(ABC):
    """M client models trained online at once (see the module docstring).

    Subclasses set ``n_clients`` (M) and implement the abstract methods.
    """

    n_clients: int

    @abstractmethod
    def test_then_train(self, X: np.ndarray, y: np.ndarray, t: int,
                        mask: np.ndarray | None = None) -> np.ndarray:
        """Charge each present client its played model's loss on its samples, then learn from them.

        Parameters
        ----------
        X : ndarray (M, b, d)
            The step's samples (for an interaction stream, ``X[m, :, 0]``
            holds item ids; for a sparse-feature stream X is (M, b, nnz),
            ``X[m, j]`` the ids of sample j's active features).
        y : ndarray (M, b)
        t : int
            Global step, 1-based.
        mask : ndarray (M,) bool or None
            Clients without a sample this step neither learn nor lose.

        Returns
        -------
        ndarray (M,)
            The loss before the update (0 for masked clients).
        """

    @abstractmethod
    def upload(self, n_samples: np.ndarray):
        """What the M clients send the server at the end of a round.

        ``n_samples`` (M,) counts the samples each learned from in the round.
        Returns an ndarray (M, ...) for dense models or a :class:`ModelUpdate`.
        """

    @abstractmethod
    def download(self, global_model) -> None:
        """Every client takes the server's result (an ndarray or a :class:`GlobalUpdate`)."""

    def observations(self) -> dict:
        """Per-client values measured in the last :meth:`test_then_train`, name -> ndarray (M,). None by default."""
        return {}
