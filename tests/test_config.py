import pytest

from streamfl.config import ConfigError, default_config, load_config, parse_config


def test_default_is_the_documented_experiment():
    cfg = default_config()
    assert (cfg.source.clients, cfg.source.task, cfg.learner.tau, cfg.steps) == (8, "logistic", 10, 2000)
    assert [d.kind for d in cfg.source.drift] == ["rotation", "abrupt"]


@pytest.mark.parametrize("data,message", [
    ({"learner": {"tau": 0}}, "config error: learner.tau: Input should be greater than or equal to 1 (got 0)"),
    ({"source": {"kind": "synthetic", "task": "hinge"}},
     "config error: source.task: Input should be 'least_squares' or 'logistic' (got 'hinge')"),
    ({"learner": {"step_size": {"kind": "adam"}}},
     "config error: learner.step_size.kind: Input should be 'constant', 'inv_sqrt' or 'strongly_convex' (got 'adam')"),
    ({"learner": {"taus": 3}}, "config error: learner.taus: unknown field"),
    ({"source": {"kind": "synthetic", "drift": [{"kind": "abrupt", "at": []}]}},
     "config error: source.drift.0.at: List should have at least 1 item after validation, not 0"),
    ({"source": {"kind": "csv"}}, "config error: source: Input tag 'csv' found using 'kind' does not match any of the expected tags: 'synthetic', 'river_synth', 'river_dataset', 'file'"),
])
def test_bad_field_gives_one_line_naming_the_field(data, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config error: no such file: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)


def test_example_configs_validate():
    from pathlib import Path
    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        load_config(path)


def test_an_empty_file_is_the_default_experiment():
    assert parse_config({}) == default_config()


@pytest.mark.parametrize("data,message", [
    ({"steps": None}, "config error: steps: a generator has no natural end; set steps to the number of steps T"),
    ({"seed": -1}, "config error: seed: Input should be greater than or equal to 0 (got -1)"),
    ({"sweep": {"parameters": {"learner.tau": [1, 10]}}},
     "config error: sweep.parameters must include source.clients: the comparison plot is regret against M"),
    ({"sweep": {"parameters": {"source.clients": [1, 4]}, "labels": {"source.clients": ["one"]}}},
     "config error: sweep.labels.source.clients has 1 labels for 2 values"),
    ({"sweep": {"parameters": {"source.clients": []}}},
     "config error: sweep.parameters.source.clients: List should have at least 1 item after validation, not 0"),
])
def test_cross_field_rules(data, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value) == message


def test_prior_shift_accepts_integer_class_keys():
    cfg = parse_config({"steps": None, "source": {"kind": "river_dataset", "name": "Phishing",
                                                  "prior_shift": {"start": 0.5, "class_weights": {1: 5.0}}}})
    assert cfg.source.prior_shift.class_weights == {1: 5.0}
