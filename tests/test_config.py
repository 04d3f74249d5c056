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
