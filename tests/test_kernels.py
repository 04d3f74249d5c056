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


def _centralized_python_loop(M, d, task, eta, K, radius, stream):
    """The centralized baseline as it was before its loop was compiled: one
    ``StackedLinear(1, d)`` stepped sample by sample, η_t / (present · b) each."""
    scale = [1.0]
    model = StackedLinear(1, d, task, lambda t: eta(t) * scale[0], K, radius)
    out = []
    for t, (X, y, mask) in enumerate(stream, start=1):
        b = X.shape[1]
        present = M if mask is None else int(mask.sum())
        scale[0] = 1.0 / (max(present, 1) * b)
        losses = np.zeros(M)
        for m in range(M):
            if mask is not None and not mask[m]:
                continue
            for j in range(b):
                losses[m] += model.test_then_train(X[m:m + 1, j:j + 1], y[m:m + 1, j:j + 1], t)[0]
        out.append((losses / b, model.W[0].copy()))
    return out


@pytest.mark.parametrize("task,K", [("least_squares", 1), ("logistic", 1), ("softmax", 4)])
@pytest.mark.parametrize("b,radius,masked", [(1, None, False), (3, None, True), (2, 0.3, True)])
def test_compiled_centralized_equals_the_per_sample_loop(task, K, b, radius, masked):
    from streamfl.runtime.learners import Centralized

    rng = np.random.default_rng(11)
    M, d, T = 6, 5, 40
    eta = StepSize("inv_sqrt", eta=0.8)
    stream = []
    for _ in range(T):
        X = rng.standard_normal((M, b, d)) * 2
        if task == "least_squares":
            y = rng.standard_normal((M, b)) * 3
        else:
            y = rng.integers(0, 2 if task == "logistic" else K, (M, b)).astype(float)
        mask = (rng.random(M) < 0.6) if masked else None
        stream.append((X, y, mask))
    want = _centralized_python_loop(M, d, task, eta, K, radius, stream)
    central = Centralized(M, d, task, eta, K, radius)
    for t, ((X, y, mask), (losses, w)) in enumerate(zip(stream, want), start=1):
        got = central.step(X, y, t, mask)
        np.testing.assert_allclose(got, losses, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(central.models[0], w, rtol=1e-12, atol=1e-12)
        if mask is not None:
            assert (got[~mask] == 0).all()
    assert central.models.shape == (M, d, K)
    assert abs(want[-1][1]).max() > 0.05          # the model moved: the comparison is not between zeros
