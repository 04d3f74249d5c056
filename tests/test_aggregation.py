import numpy as np
import pytest

from streamfl.aggregation import FedAvg, LocalOnly, weighted_average


def test_uniform_average_is_fedsea_mean():
    W = np.arange(12.0).reshape(3, 2, 2)
    np.testing.assert_array_equal(FedAvg().aggregate(W, np.array([1, 1, 1])), W.mean(axis=0))


def test_clients_without_samples_sit_out_the_round():
    W = np.array([[[1.0]], [[3.0]], [[100.0]]])
    np.testing.assert_allclose(FedAvg().aggregate(W, np.array([2, 5, 0])), [[2.0]])
    np.testing.assert_allclose(FedAvg("samples").aggregate(W, np.array([1, 3, 0])), [[2.5]])
    assert FedAvg().aggregate(W, np.zeros(3)) is None
    assert LocalOnly().aggregate(W, np.ones(3)) is None


def test_bad_weights_and_parameters_are_errors():
    with pytest.raises(ValueError, match="must be finite, non-negative and not all zero"):
        weighted_average(np.ones((2, 1)), np.array([-1.0, 2.0]))
    with pytest.raises(ValueError, match="The 'weighting' parameter of FedAvg must be 'uniform' or 'samples'. Got 'mean' instead."):
        FedAvg("mean")
