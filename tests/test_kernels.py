import numpy as np
import pytest

from streamfl.models import StackedLinear, StepSize
from streamfl.models.losses import get_loss


@pytest.mark.parametrize("task", ["least_squares", "logistic"])
@pytest.mark.parametrize("b", [1, 3])
def test_compiled_step_equals_numpy_losses(task, b):
    rng = np.random.default_rng(7)
    M, d = 5, 4
    model = StackedLinear(M, d, task, StepSize("inv_sqrt", eta=0.4))
    W = np.zeros((M, d, 1))
    fn = get_loss(task)
    for t in range(1, 30):
        X = rng.standard_normal((M, b, d)) * 3
        y = rng.standard_normal((M, b)) if task == "least_squares" else (rng.random((M, b)) < 0.5).astype(float)
        mask = rng.random(M) < 0.7
        got = model.test_then_train(X, y, t, mask)
        loss, grad = fn(W, X, y)
        np.testing.assert_allclose(got, loss.mean(axis=1) * mask, rtol=1e-12, atol=1e-12)
        W -= 0.4 / np.sqrt(t) * grad * mask[:, None, None]
        np.testing.assert_allclose(model.W, W, rtol=1e-11, atol=1e-12)


def test_compiled_logistic_is_stable_for_huge_scores():
    model = StackedLinear(2, 1, "logistic", StepSize("constant", eta=1e-3))
    model.W[:, 0, 0] = [800.0, -800.0]
    got = model.test_then_train(np.ones((2, 1, 1)), np.array([[0.0], [1.0]]), t=1)
    np.testing.assert_allclose(got, [800.0, 800.0])
    assert np.isfinite(model.W).all()


def test_projection_keeps_every_client_inside_the_ball():
    rng = np.random.default_rng(0)
    model = StackedLinear(6, 3, "least_squares", StepSize("constant", eta=0.5), radius=0.5)
    for t in range(1, 50):
        X = rng.standard_normal((6, 2, 3))
        model.test_then_train(X, X @ np.array([3.0, 0.0, 0.0]).reshape(3) * 1.0, t)
    norms = np.linalg.norm(model.W[:, :, 0], axis=1)
    np.testing.assert_allclose(norms, 0.5, rtol=1e-12)      # the optimum (norm 3) lies outside: iterates sit on the sphere
