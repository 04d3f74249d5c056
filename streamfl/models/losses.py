"""Per-sample losses and their gradients for linear models, vectorised over clients.

Every function takes the stacked client parameters ``W`` of shape (M, d, K) and a
mini-batch per client, ``X`` of shape (M, b, d) and ``y`` of shape (M, b), and
works on all clients at once (no Python loop over clients or samples).

The loss of a mini-batch is the mean of its per-sample losses, so that
f(x, ξ) in FedSEA's notation (§2, "Federated Learning in SEA environment") is the
mini-batch mean and its gradient is the mini-batch stochastic gradient.

Losses (natural log units):

* ``least_squares``: f = ½ (a·x − y)², K = 1.
* ``logistic``: f = log(1 + exp(a·x)) − y·(a·x), y ∈ {0, 1}, K = 1.
* ``softmax``: f = logsumexp(a·W) − (a·W)_y, y ∈ {0..K-1}.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# scipy.special is imported inside the logistic and softmax functions: a least-squares run never pays
# its import (~0.25 s of start-up)


def _scores(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Linear scores z = a·W, shape (M, b, K), for W (M, d, K) and X (M, b, d)."""
    return X @ W


def _least_squares_of_scores(z, y):
    r = z[..., 0] - y
    return 0.5 * r * r


def _logistic_of_scores(z, y):
    from scipy.special import log_expit
    z = z[..., 0]
    return -log_expit(z) + (1.0 - y) * z


def _softmax_of_scores(z, y):
    from scipy.special import logsumexp
    yi = np.asarray(y).astype(np.int64)
    return logsumexp(z, axis=-1) - np.take_along_axis(z, yi[..., None], axis=-1)[..., 0]


def loss_of_scores(task: str, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample loss of linear scores, for a model whose scores come from elsewhere.

    The same formulas as :func:`least_squares`, :func:`logistic` and
    :func:`softmax` use for their loss, so any learner that exposes its raw
    scores z = a·W is charged exactly what the stacked clients are charged.

    Parameters
    ----------
    task : {"least_squares", "logistic", "softmax"}
    z : ndarray (..., K)
        Raw linear scores (K = 1 for least squares and logistic).
    y : ndarray (...)
        Labels: real targets, {0, 1}, or class indices 0..K-1.

    Returns
    -------
    ndarray (...)
        f per sample, in natural-log units; no clipping (a logistic loss at
        z = 1e9 with the wrong label is 1e9 nats).

    Raises
    ------
    ValueError
        For an unknown task.

    Examples
    --------
    >>> import numpy as np
    >>> float(loss_of_scores("logistic", np.array([[1e9]]), np.array([0.0]))[0])
    1000000000.0
    >>> loss_of_scores("softmax", np.zeros((1, 3)), np.array([2])) == np.log(3)   # K = 3 classes at zero: ln 3
    array([ True])
    """
    try:
        fn = _OF_SCORES[task]
    except KeyError:
        raise ValueError(f"Unknown task {task!r}; allowed: {', '.join(sorted(_OF_SCORES))}.") from None
    return fn(z, y)


_OF_SCORES = {"least_squares": _least_squares_of_scores, "logistic": _logistic_of_scores,
              "softmax": _softmax_of_scores}


def least_squares(W: np.ndarray, X: np.ndarray, y: np.ndarray, with_grad: bool = True):
    """Squared loss ½(a·x − y)² per sample and the mini-batch mean gradient.

    Returns
    -------
    loss : ndarray (M, b)
    grad : ndarray (M, d, 1) or None — mean over the mini-batch of ∇f.
    """
    z = _scores(W, X)
    loss = _least_squares_of_scores(z, y)
    r = z[..., 0] - y
    if not with_grad:
        return loss, None
    grad = np.einsum("mb,mbd->md", r, X)[..., None] / X.shape[1]
    return loss, grad


def logistic(W: np.ndarray, X: np.ndarray, y: np.ndarray, with_grad: bool = True):
    """Logistic loss log(1+e^z) − y z per sample (y ∈ {0,1}) and the mean gradient.

    Uses ``log(1+e^z) − y z = −log σ(z) + (1−y) z`` computed with a stable
    ``log_expit``.
    """
    from scipy.special import expit
    z = _scores(W, X)
    loss = _logistic_of_scores(z, y)
    z = z[..., 0]
    if not with_grad:
        return loss, None
    grad = np.einsum("mb,mbd->md", expit(z) - y, X)[..., None] / X.shape[1]
    return loss, grad


def softmax(W: np.ndarray, X: np.ndarray, y: np.ndarray, with_grad: bool = True):
    """Multinomial logistic loss logsumexp(z) − z_y per sample and the mean gradient."""
    z = _scores(W, X)
    yi = y.astype(np.int64)
    loss = _softmax_of_scores(z, y)
    if not with_grad:
        return loss, None
    from scipy.special import softmax as _softmax
    p = _softmax(z, axis=-1)
    np.put_along_axis(p, yi[..., None], np.take_along_axis(p, yi[..., None], axis=-1) - 1.0, axis=-1)
    grad = np.einsum("mbk,mbd->mdk", p, X) / X.shape[1]
    return loss, grad


LOSSES: dict[str, Callable] = {
    "least_squares": least_squares,
    "logistic": logistic,
    "softmax": softmax,
}


def get_loss(task: str) -> Callable:
    """The loss function for a task name; raises ValueError for an unknown task."""
    try:
        return LOSSES[task]
    except KeyError:
        raise ValueError(
            f"Unknown task {task!r}; allowed: {', '.join(sorted(LOSSES))}."
        ) from None
