"""Compressed FedSEA uploads (learner.compression): bytes hand-checked, counted in metrics.csv and summary.json."""

import numpy as np
import pandas as pd
import pytest

from streamfl.config import ConfigError, parse_config
from streamfl.runtime.experiment import run_experiment


def tiny(compression=None, steps=20):
    learner = {"tau": 5, "step_size": {"kind": "constant", "eta": 0.1}}
    if compression is not None:
        learner["compression"] = compression
    return parse_config({"name": "t", "steps": steps, "seed": 3, "baselines": [], "learner": learner,
                         "source": {"kind": "synthetic", "task": "logistic", "clients": 3, "dim": 4, "drift": []}})


def test_scalar_2_bit_uploads_byte_count_by_hand(tmp_path):
    s = run_experiment(tiny({"kind": "scalar", "bits": 2}), tmp_path / "a", plots=False)
    m = pd.read_csv(tmp_path / "a" / "metrics.csv")
    # d = 4, K = 1, M = 3, τ = 5, T = 20: 4 rounds.
    # up per client per round: header 6 (version, kind|scale flag, b, ndim = 2, dims 4 and 1) + scale 4
    #   + ⌈4 · 2 / 8⌉ = 1 byte of codes = 11;   down: header 6 + 4 float64 = 38 to each client
    assert (s["bytes_up"], s["bytes_down"]) == (4 * 3 * 11, 4 * 3 * 38) == (132, 456)
    assert m["bytes_up"].tolist() == [0] * 4 + [33] * 5 + [66] * 5 + [99] * 5 + [132]
    assert m["bytes_down"].iloc[-1] == 456


def test_uncompressed_uploads_are_float64_models_and_leave_the_numbers_unchanged(tmp_path):
    s = run_experiment(tiny(), tmp_path / "a", plots=False)
    assert (s["bytes_up"], s["bytes_down"]) == (456, 456)       # 4 rounds × 3 clients × (6 + 4 · 8)
    from streamfl.runtime.learners import Federated
    from streamfl.models import StackedLinear, StepSize
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(3, 1, 4)), (rng.random((3, 1)) > 0.5).astype(float)
    a = Federated(StackedLinear(3, 4, "logistic", StepSize("constant", eta=0.1)), tau=1)
    for t in range(1, 4):
        a.step(X, y, t)
    W = a.models.copy()
    b = StackedLinear(3, 4, "logistic", StepSize("constant", eta=0.1))
    for t in range(1, 4):
        b.test_then_train(X, y, t)
        b.W[:] = b.W.mean(axis=0)
    np.testing.assert_array_equal(W, b.W)                        # counting bytes changes no number


def test_compression_changes_the_models_and_top_k_sends_fewer_bytes(tmp_path):
    plain = run_experiment(tiny(steps=200), tmp_path / "p", plots=False)
    topk = run_experiment(tiny({"kind": "topk", "bits": 8}, steps=200), tmp_path / "k", plots=False)
    assert topk["cum_loss"]["fedsea"] != plain["cum_loss"]["fedsea"]
    # k = ⌊4 · 8 / 32⌋ = 1: header 6 + one 2-bit index (1 byte) + one float32 = 11 bytes per client per round
    assert topk["bytes_up"] == 40 * 3 * 11


def test_bad_compression_field_is_one_line():
    with pytest.raises(ConfigError, match="learner.compression.kind"):
        tiny({"kind": "zip", "bits": 2})


def test_compression_runs_over_kafka_with_the_engines_compressor():
    """Kafka runs accept learner.compression (tests/kafka/test_compressed_uploads.py); the workers and the
    aggregator build the compressor with the engine's function, so both ends use the same one."""
    from streamfl.compression import TopK, UniformScalarQuantizer
    from streamfl.generators.build import build_stream
    from streamfl.transport.spec import kafka_unsupported, upload_compressor
    cfg = tiny({"kind": "scalar", "bits": 2})
    assert kafka_unsupported(cfg, build_stream(cfg)) is None
    c = upload_compressor(cfg)
    assert isinstance(c, UniformScalarQuantizer) and c.range is None and c.bits == 2 and c.dithered
    assert isinstance(upload_compressor(tiny({"kind": "topk", "bits": 3})), TopK)
    assert upload_compressor(tiny(None)) is None


@pytest.mark.parametrize("compression", [None, {"kind": "scalar", "bits": 2}])
def test_a_diverging_run_stops_with_the_divergence_message_not_a_compressor_error(tmp_path, compression):
    from streamfl.runtime.engine import DivergenceError
    cfg = tiny(compression, steps=60)
    cfg = cfg.model_copy(update={"learner": cfg.learner.model_copy(
        update={"step_size": cfg.learner.step_size.model_copy(update={"eta": 1e308})})})
    with pytest.raises(DivergenceError, match="learner 'fedsea' diverged at step t="):
        run_experiment(cfg, tmp_path / "a", plots=False)


def test_a_top_k_raised_from_zero_to_one_is_said_in_the_run_header():
    # d = 10 logistic weights at b = 1: ⌊10·1/32⌋ = 0, and TopK keeps max(1, ·) = 1 per upload
    from streamfl.config import ExperimentConfig
    from streamfl.generators.build import build_stream
    from streamfl.runtime.header import describe_inputs
    cfg = ExperimentConfig.model_validate({"steps": 20, "learner": {"compression": {"kind": "topk", "bits": 1}}})
    notes = describe_inputs(cfg, build_stream(cfg))["notes"]
    assert ("learner.compression top-k: ⌊P·b/32⌋ = ⌊10·1/32⌋ = 0 for a model of P = 10 weights; "
            "each upload keeps k = 1") in notes
