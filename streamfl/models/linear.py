"""Stacked linear client models trained by online (projected) SGD.

All M client models live in one array ``W`` of shape (M, d, K), so a step of
test-then-train for every client is a handful of batched numpy operations.
This is where a sample is *learned from*: :meth:`StackedLinear.test_then_train`.
"""

from __future__ import annotations

import numpy as np

from .client_model import ClientModel
from .kernels import LEAST_SQUARES, LOGISTIC, sgd_step
from .losses import get_loss
from .step_sizes import StepSize

_KERNELS = {"least_squares": LEAST_SQUARES, "logistic": LOGISTIC}


def project_l2_ball(W: np.ndarray, radius: float | None) -> np.ndarray:
    """Project each client's model onto {x : ‖x‖₂ ≤ radius}, in place.

    ``W`` has shape (M, d, K); the norm is taken over (d, K). ``radius=None``
    means no constraint (FedSEA §3.1 assumes the iterates stay inside X).
    """
    if radius is None:
        return W
    norms = np.sqrt(np.einsum("mdk,mdk->m", W, W))
    scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    W *= scale[:, None, None]
    return W


class StackedLinear(ClientModel):
    """M linear models (one per client) updated by online SGD, all at once.

    A :class:`~streamfl.models.client_model.ClientModel`: its upload is the
    dense stack ``W`` (M, d, K) and it downloads one global model (d, K).

    Parameters
    ----------
    n_clients : int
        M.
    n_features : int
        d.
    task : {"least_squares", "logistic", "softmax"}
        Selects the loss (see :mod:`streamfl.models.losses`).
    step_size : StepSize
        η_t, indexed by the global step t = 1, 2, ….
    n_classes : int
        K (softmax only).
    radius : float or None
        D, radius of the L2 ball X onto which each iterate is projected.

    Attributes
    ----------
    W : ndarray (M, d, K)
        Current client models x_{t,m}; start at zero (FedSEA: common x_1).

    Examples
    --------
    >>> import numpy as np
    >>> m = StackedLinear(2, 1, "least_squares", StepSize("constant", eta=0.5))
    >>> X = np.ones((2, 1, 1)); y = np.array([[2.0], [4.0]])
    >>> m.test_then_train(X, y, t=1)          # losses with x = 0, then update
    array([2., 8.])
    >>> m.W[:, 0, 0]
    array([1., 2.])
    """

    def __init__(self, n_clients: int, n_features: int, task: str, step_size: StepSize,
                 n_classes: int = 1, radius: float | None = None):
        self.loss_fn = get_loss(task)
        self.task = task
        self.step_size = step_size
        self.radius = radius
        K = n_classes if task == "softmax" else 1
        self.n_clients = n_clients
        self.W = np.zeros((n_clients, n_features, K))
        self._kind = _KERNELS.get(task)
        self._out = np.empty(n_clients)

    def losses(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mini-batch mean loss of each client's current model, shape (M,)."""
        loss, _ = self.loss_fn(self.W, X, y, with_grad=False)
        return loss.mean(axis=1)

    def test_then_train(self, X: np.ndarray, y: np.ndarray, t: int,
                        mask: np.ndarray | None = None) -> np.ndarray:
        """Predict, record the loss, then take one SGD step — for every client.

        Parameters
        ----------
        X : ndarray (M, b, d)
        y : ndarray (M, b)
        t : int
            Global step, 1-based, for η_t.
        mask : ndarray (M,) bool or None
            Clients without a sample this step neither learn nor lose.

        Returns
        -------
        ndarray (M,)
            f(x_{t,m}, ξ_{t,m}): the mini-batch mean loss before the update
            (0 for masked clients).
        """
        if self._kind is not None:
            # least squares, logistic: one vectorised step (:func:`~streamfl.models.kernels.sgd_step`)
            out = self._out
            sgd_step(self.W, X, y, mask, self.step_size(t), self._kind, out)
            if self.radius is not None:
                project_l2_ball(self.W, self.radius)
            return out.copy()
        loss, grad = self.loss_fn(self.W, X, y)
        if mask is not None:
            grad *= mask[:, None, None]
            loss = loss * mask[:, None]
        self.W -= self.step_size(t) * grad
        project_l2_ball(self.W, self.radius)
        return loss.mean(axis=1)

    def upload(self, n_samples: np.ndarray) -> np.ndarray:
        """The clients' models, (M, d, K) (the array itself: the server only reads it)."""
        return self.W

    def download(self, global_model: np.ndarray) -> None:
        """Every client takes the global model (d, K): x_{t,m} ← x̄_t (FedSEA Algorithm 1)."""
        self.W[:] = global_model
