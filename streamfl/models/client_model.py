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

import numpy as np

from ..updates import GlobalUpdate, ModelUpdate  # noqa: F401  (also imported from here)


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
