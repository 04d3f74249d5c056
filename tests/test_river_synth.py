import numpy as np
import pytest

from streamfl.generators.river_synth import RiverSynthStream, river_synth_names


def _collect(stream, chunk_size=256):
    chunks = list(stream.chunks(chunk_size))
    assert all(c.mask is None and c.optimum is None for c in chunks)
    return np.concatenate([c.X for c in chunks]), np.concatenate([c.y for c in chunks])


def test_hyperplane_shapes_labels_and_replay():
    s = RiverSynthStream("Hyperplane", n_clients=3, n_steps=40, batch_size=2, seed=1,
                         params={"n_features": 4, "mag_change": 0.01})
    assert (s.n_clients, s.n_steps, s.batch_size, s.n_features) == (3, 40, 2, 5)
    assert (s.task, s.n_classes, s.classes_) == ("logistic", 1, [0, 1])
    assert s.feature_names_ == ["0", "1", "2", "3", "intercept"]
    assert s.client_seeds_ == [1000, 1001, 1002]
    X, y = _collect(s)
    assert X.shape == (40, 3, 2, 5) and y.shape == (40, 3, 2)
    assert set(np.unique(y)) == {0.0, 1.0}
    np.testing.assert_array_equal(X[..., -1], 1.0)
    X2, y2 = _collect(s, 7)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    # Rebuilding with the same arguments gives the same stream.
    X3, y3 = _collect(RiverSynthStream("Hyperplane", n_clients=3, n_steps=40, batch_size=2, seed=1,
                                       params={"n_features": 4, "mag_change": 0.01}))
    np.testing.assert_array_equal(X, X3)
    np.testing.assert_array_equal(y, y3)
    # Each client has its own generator, so client streams differ.
    assert not np.array_equal(X[:, 0], X[:, 1]) and not np.array_equal(X[:, 1], X[:, 2])


def test_shared_concept_deals_one_generator_round_robin():
    shared = RiverSynthStream("Hyperplane", n_clients=3, n_steps=10, seed=2, shared_concept=True,
                              params={"n_features": 2})
    single = RiverSynthStream("Hyperplane", n_clients=1, n_steps=30, seed=2, params={"n_features": 2})
    Xs, ys = _collect(shared)
    X1, y1 = _collect(single)
    # Client m gets samples m, m + 3, m + 6, ... of the single generator with seed 2 * 1000.
    for m in range(3):
        np.testing.assert_array_equal(Xs[:, m, 0], X1[m::3, 0, 0])
        np.testing.assert_array_equal(ys[:, m, 0], y1[m::3, 0, 0])
    assert not np.array_equal(Xs[:, 0], Xs[:, 1])


def test_friedman_drift_is_least_squares():
    s = RiverSynthStream("FriedmanDrift", n_clients=2, n_steps=20, params={"position": (5, 10, 15)})
    assert (s.task, s.n_classes, s.classes_, s.n_features) == ("least_squares", 1, None, 11)
    _, y = _collect(s)
    assert len(np.unique(y)) > 20


def test_categorical_features_and_softmax():
    mv = RiverSynthStream("Mv", n_clients=2, n_steps=30, standardize=False)
    assert mv.task == "least_squares"
    onehot = [n for n in mv.feature_names_ if n.startswith("3=")]
    assert onehot == sorted(onehot) and len(onehot) >= 2
    X, _ = _collect(mv)
    cols = [mv.feature_names_.index(n) for n in onehot]
    np.testing.assert_array_equal(X[..., cols].sum(axis=-1), 1.0)
    led = RiverSynthStream("LED", n_clients=2, n_steps=10, intercept=False)
    assert (led.task, led.n_classes, led.has_intercept, led.n_features) == ("softmax", 10, False, 7)


def test_concept_drift_stream_with_nested_specs():
    s = RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=30,
                         params={"stream": {"name": "SEA", "params": {"variant": 0}},
                                 "drift_stream": {"name": "SEA", "params": {"variant": 3}},
                                 "position": 15, "width": 1})
    assert s.task == "logistic" and s.feature_names_ == ["0", "1", "2", "intercept"]


def test_error_messages():
    with pytest.raises(ValueError) as err:
        RiverSynthStream("Hyperplain")
    assert str(err.value) == f"Unknown River generator 'Hyperplain'; valid names are: {', '.join(river_synth_names())}."
    assert "Hyperplane" in str(err.value) and "Logical" not in str(err.value)
    with pytest.raises(ValueError) as err:
        RiverSynthStream("Hyperplane", n_steps=5, params={"n_feature": 3})
    assert str(err.value) == (
        "Invalid params for river.datasets.synth.Hyperplane: "
        "Hyperplane.__init__() got an unexpected keyword argument 'n_feature'"
    )
    with pytest.raises(ValueError, match="The 'n_clients' parameter of RiverSynthStream must be an int >= 1"):
        RiverSynthStream("SEA", n_clients=0)
    with pytest.raises(ValueError, match="produced only 100 samples"):
        RiverSynthStream("AnomalySine", n_clients=2, n_steps=150, params={"n_samples": 100, "n_anomalies": 10,
                                                                         "n_contextual": 10})


def test_features_are_standardised_by_default():
    # Agrawal's salary is of order 1e5: unscaled, a logistic model's losses explode.
    s = RiverSynthStream("Agrawal", n_clients=2, n_steps=200)
    X, _ = _collect(s)
    body = X[..., :-1].reshape(-1, X.shape[-1] - 1)           # all but the intercept
    np.testing.assert_allclose(body.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(body.std(axis=0)[body.std(axis=0) > 0], 1.0, rtol=1e-9)
    raw = RiverSynthStream("Agrawal", n_clients=2, n_steps=200, standardize=False)
    assert np.abs(_collect(raw)[0]).max() > 1e4


def test_what_river_would_fail_on_is_refused_before_drawing():
    with pytest.raises(ValueError) as err:
        RiverSynthStream("ConceptDriftStream", n_steps=10, params={"position": 5, "width": 0})
    assert str(err.value) == ("Invalid params for river.datasets.synth.ConceptDriftStream: width must be an int >= 1 "
                              "(the number of samples the change takes); got 0.")
    with pytest.raises(ValueError) as err:
        RiverSynthStream("Hyperplane", n_steps=10, params={"n_features": 3, "n_drift_features": 5})
    assert str(err.value) == ("Invalid params for river.datasets.synth.Hyperplane: n_drift_features must be between "
                              "0 and n_features (3); got 5.")
    with pytest.raises(ValueError) as err:    # nested generators are checked too
        RiverSynthStream("ConceptDriftStream", n_steps=10,
                         params={"stream": {"name": "Hyperplane", "params": {"n_features": 2, "n_drift_features": 3}},
                                 "drift_stream": {"name": "Hyperplane", "params": {"n_features": 2}}, "width": 5})
    assert str(err.value) == ("Invalid params for river.datasets.synth.Hyperplane: n_drift_features must be between "
                              "0 and n_features (2); got 3.")


def test_an_error_river_raises_while_drawing_is_one_line(monkeypatch):
    import river.datasets.synth as synth

    def broken(self):
        raise OverflowError("math range error")
        yield
    monkeypatch.setattr(synth.SEA, "__iter__", broken)
    with pytest.raises(ValueError) as err:
        RiverSynthStream("SEA", n_clients=2, n_steps=10)
    assert str(err.value) == ("River generator SEA() failed while drawing samples: a number overflowed (math range "
                              "error)")


def test_concept_drift_too_narrow_for_its_position_is_refused_up_front():
    # River computes exp(4·(position − i)/width): it overflows for position 200, width 1 at the first sample,
    # while width 2 (4·200/2 = 400 < 709) draws.
    RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=10, params={"position": 200, "width": 2})
    with pytest.raises(ValueError) as err:
        RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=100, params={"position": 200, "width": 1})
    assert str(err.value) == ("Invalid params for river.datasets.synth.ConceptDriftStream: width 1 is too narrow for "
                              "position 200: River draws the new concept with probability 1/(1 + exp(4·(position − "
                              "i)/width)), which overflows for 4·position/width > 709; use width >= 2.")


def test_task_rule_columns_and_drift_after_the_end():
    s = RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=100, batch_size=2, params={"position": 5000})
    assert s.task_rule_ == "labels are integers, so classes → logistic"
    assert s.notes_ == ["ConceptDriftStream's drift position 5000 comes after sample 200, the last one each "
                        "generator draws (T·b = 200 samples, counted from 1 by River): no drift there"]
    assert s.columns_[0] == {"column": "salary", "read_as": "number", "why": "numbers"}
    assert s.columns_[-1]["why"].startswith("2 classes, numbered in sorted order: 0 → 0 (")
    assert RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=100, batch_size=2,
                            params={"position": 150, "width": 50}).notes_ == [
        "ConceptDriftStream: position 150 and width 50 count samples of each client's generator from 1 (2 per "
        "step), so the change is centred at step t = 75 (steps count from 1, as metrics.csv's t)"]
    # River's ConceptDriftStream centres the change on its sample `position`, counted from 1: sample 150 of a
    # client's generator is the 2nd sample of step 75 (samples 149, 150), and 200 (the last) is still inside
    assert RiverSynthStream("ConceptDriftStream", n_clients=2, n_steps=100, batch_size=2,
                            params={"position": 200, "width": 50}).notes_[0].endswith("centred at step t = 100 "
                                                                                      "(steps count from 1, as "
                                                                                      "metrics.csv's t)")
    # FriedmanDrift counts its samples from 0: position 5 is the 6th sample, step 6 with b = 1, step 3 with b = 2
    assert RiverSynthStream("FriedmanDrift", n_clients=2, n_steps=20, params={"position": (5, 10, 15)}).notes_ == [
        "FriedmanDrift: position 5, 10, 15 counts samples of each client's generator from 0 (1 per step), so the "
        "drift acts from step t = 6, 11, 16 (steps count from 1, as metrics.csv's t)"]
    assert "from step t = 3, 6, 8 " in RiverSynthStream("FriedmanDrift", n_clients=2, n_steps=20, batch_size=2,
                                                       params={"position": (5, 10, 15)}).notes_[0]
    mv = RiverSynthStream("Mv", n_clients=1, n_steps=30)
    assert {c["column"]: c["read_as"] for c in mv.columns_}["3"] == "category"
    assert mv.task_rule_ == "labels are real numbers, so a regression target → least_squares"


def test_standardize_label_for_regression_generators():
    raw = RiverSynthStream("FriedmanDrift", n_clients=2, n_steps=50, params={"position": (5, 10, 15)})
    z = RiverSynthStream("FriedmanDrift", n_clients=2, n_steps=50, params={"position": (5, 10, 15)},
                         standardize_label=True)
    _, y_raw = _collect(raw)
    _, y_z = _collect(z)
    np.testing.assert_allclose(y_z, (y_raw - y_raw.mean()) / y_raw.std(), rtol=1e-12, atol=1e-12)
    assert (z.label_mean_, z.label_scale_) == (pytest.approx(y_raw.mean()), pytest.approx(y_raw.std()))
    with pytest.raises(ValueError) as err:
        RiverSynthStream("SEA", n_steps=10, standardize_label=True)
    assert str(err.value) == "standardize_label needs a least_squares label; SEA's labels are classes."
