import numpy as np
import pytest

from streamfl.models.losses import get_loss


@pytest.mark.parametrize("task,K", [("least_squares", 1), ("logistic", 1), ("softmax", 3)])
def test_gradient_matches_finite_differences(task, K):
    rng = np.random.default_rng(0)
    M, b, d = 3, 4, 5
    W = rng.standard_normal((M, d, K))
    X = rng.standard_normal((M, b, d))
    y = rng.standard_normal((M, b)) if task == "least_squares" else rng.integers(0, 2 if K == 1 else K, (M, b)).astype(float)
    fn = get_loss(task)
    _, grad = fn(W, X, y)
    eps = 1e-6
    num = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        Wp, Wm = W.copy(), W.copy()
        Wp[idx] += eps
        Wm[idx] -= eps
        num[idx] = (fn(Wp, X, y, False)[0].mean(axis=1) - fn(Wm, X, y, False)[0].mean(axis=1))[idx[0]] / (2 * eps)
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


def test_logistic_loss_values():
    W = np.array([[[0.0]], [[2.0]]])
    X = np.ones((2, 1, 1))
    y = np.array([[1.0], [0.0]])
    loss, _ = get_loss("logistic")(W, X, y, False)
    np.testing.assert_allclose(loss[:, 0], [np.log(2.0), np.log1p(np.exp(2.0))])


def test_unknown_task():
    with pytest.raises(ValueError, match="Unknown task 'hinge'; allowed: least_squares, logistic, softmax."):
        get_loss("hinge")
