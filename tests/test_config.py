from pathlib import Path

import pytest

from streamfl.config import ConfigError, apply_override, default_config, load_config, parse_config


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
    # a misspelt path is named before any other sweep or cross-field message (the metric's was shown instead)
    ({"sweep": {"parameters": {"source.clients": [2, 4], "learner.etaa": [1, 2]}}},
     "config error: sweep.parameters.learner.etaa: learner has no field 'etaa' (fields: batch_size, compression, "
     "gmf, model, radius, sparse, step_size, tau, weighting)"),
    ({"sweep": {"parameters": {"source.foo": [1, 2]}}},
     "config error: sweep.parameters.source.foo: source has no field 'foo' (fields: adversary, clients, covariate, "
     "dim, drift, feature_scale, heterogeneity, heterogeneity_change, kind, noise, radius, tails, task)"),
    # a path into a value or a list (it crashed with a traceback in the sweep's override)
    ({"sweep": {"parameters": {"source.clients": [2, 4], "learner.tau.x": [1, 2]}}},
     "config error: sweep.parameters.learner.tau.x: learner.tau is a value, not a section; sweep learner.tau "
     "itself (each swept value replaces it whole)"),
    ({"sweep": {"parameters": {"source.clients": [2, 4], "source.drift.step": [1, 2]}}},
     "config error: sweep.parameters.source.drift.step: source.drift is a list, not a section; sweep "
     "source.drift itself (each swept value replaces it whole)"),
    ({"source": {"kind": "movielens", "path": "x"}, "learner": {"model": "gmf", "tau": 10}, "steps": None,
      "sweep": {"parameters": {"learner.tau": [5, 10]}}},
     "config error: sweep: not available with source.kind movielens (a sweep compares numbers of clients M; a "
     "MovieLens stream has one client per user); run each setting on its own"),
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


@pytest.mark.parametrize("data,message", [
    ({"source": {"kind": "synthetic", "clients": True}},
     "config error: source.clients: Input should be a valid integer (got True)"),
    ({"steps": "100"}, "config error: steps: Input should be a valid integer (got '100')"),
    ({"steps": 100.0}, "config error: steps: Input should be a valid integer (got 100.0)"),
    ({"learner": {"step_size": {"eta": True}}},
     "config error: learner.step_size.eta: Input should be a valid number (got True)"),
    ({"learner": {"step_size": {"eta": "0.1"}}},
     "config error: learner.step_size.eta: Input should be a valid number (got '0.1')"),
    ({"output": {"plots": 1}}, "config error: output.plots: Input should be a valid boolean (got 1)"),
    ({"output": {"plots": "no"}}, "config error: output.plots: Input should be a valid boolean (got 'no')"),
])
def test_numbers_and_booleans_are_not_coerced(data, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value) == message


def test_a_float_field_takes_an_integer():
    assert parse_config({"learner": {"step_size": {"eta": 1}}}).learner.step_size.eta == 1.0


@pytest.mark.parametrize("data,message", [
    ({"source": {"task": "least_squares"}},
     "config error: source.kind is required: one of synthetic, river_synth, river_dataset, file, movielens, "
         "sparse_powerlaw"),
    ({"source": {"kind": "synthetic", "drift": [{"speed": 0.1}]}},
     "config error: source.drift.0.kind is required: one of abrupt, rotation, linear, periodic, random_walk, adaptive"),
    ({"source": {"kind": "file", "path": "t.csv", "label": "y", "inject": [{"start": 3}]}},
     "config error: source.inject.0.kind is required: one of covariate_rotation, covariate_scale, label_flip"),
])
def test_a_section_without_kind_names_the_choices(data, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value) == message


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", ".", "", "a\\b"])
def test_a_run_name_is_one_folder_name(name):
    with pytest.raises(ConfigError) as err:
        parse_config({"name": name})
    assert str(err.value) == (f"config error: name: a run name is one folder name, without '/', '\\' or '..' "
                              f"(got {name!r})")


@pytest.mark.parametrize("data,message", [
    ({"learner": {"step_size": {"kind": "strongly_convex", "t0": float("inf")}}},
     "config error: learner.step_size.t0: Input should be a finite number (got inf)"),
    ({"learner": {"radius": float("nan")}}, "config error: learner.radius: Input should be a finite number (got nan)"),
    ({"source": {"kind": "synthetic", "drift": [{"kind": "rotation", "speed": float("-inf")}]}},
     "config error: source.drift.0.speed: Input should be a finite number (got -inf)"),
    ({"learner": {"step_size": {"kind": "strongly_convex", "mu": 1e-320}}},
     "config error: learner.step_size: η at step 1 is 1/(mu·(1 + t0)) with mu = 9.99989e-321, t0 = 0 = inf; "
     "choose values giving a finite η > 0"),
    ({"learner": {"step_size": {"kind": "strongly_convex", "mu": 1e300, "t0": 1e300}}},
     "config error: learner.step_size: η at step 1 is 1/(mu·(1 + t0)) with mu = 1e+300, t0 = 1e+300 = 0; "
     "choose values giving a finite η > 0"),
    ({"steps": None, "source": {"kind": "river_dataset", "name": "Phishing", "task": "logistic",
                                "standardize_label": True}},
     "config error: source.standardize_label: only a least_squares label can be standardized "
     "(source.task is logistic)"),
    ({"steps": None, "source": {"kind": "file", "path": "t.csv", "label": "y", "thousands": ",,"}},
     "config error: source.thousands: Input should be ',', \"'\", '_' or ' ' (got ',,')"),
])
def test_values_that_make_no_sense_are_refused(data, message):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert str(err.value) == message


def test_saved_config_reads_back_equal_with_integer_class_keys_and_resolved_paths(tmp_path):
    from streamfl.config import dump_config
    (tmp_path / "exp").mkdir()
    src = tmp_path / "exp" / "a.yaml"
    src.write_text("steps: null\nsource: {kind: file, path: data/t.csv, label: y, task: softmax,\n"
                   "  prior_shift: {start: 0.5, class_weights: {1: 2.5, b: 0}}}\n"
                   "learner: {step_size: {kind: strongly_convex, mu: 2, t0: 10}}\n")
    cfg = load_config(src)
    assert cfg.source.path == tmp_path / "exp" / "data" / "t.csv"
    saved = tmp_path / "run" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text(dump_config(cfg))
    again = load_config(saved)
    assert again == cfg
    assert again.source.prior_shift.class_weights == {1: 2.5, "b": 0.0}


def test_tails_on_key_written_as_documented(tmp_path):
    # YAML 1.1 reads an unquoted `on` key as the boolean true; the README's
    # `tails: {df: 5, on: noise}` used to stop with "Keys should be strings (got True)".
    path = tmp_path / "t.yaml"
    path.write_text("source: {kind: synthetic, task: least_squares, tails: {df: 5, on: noise}}\n")
    assert load_config(path).source.tails.on == "noise"
    path.write_text("source: {kind: synthetic, task: least_squares, tails: {df: 5, on: nois}}\n")
    with pytest.raises(ConfigError, match="source.tails.on"):
        load_config(path)


# ---- faults found by a second new-user break test ------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("learner: {step_size: {eta: 1e-3}}\n", None),
    ("seed: 1\nseed: 2\n", "config error: the key 'seed' appears twice in one mapping (lines 1 and 2); keep one"),
    ("name: \"a\\nb\"\n", "config error: name: a run name is one line of printable text; it holds the control "
                          "character '\\n'"),
    ("name: " + "a" * 101 + "\n", "config error: name: a run name has at most 100 characters (got 101: "
                                  "'aaaaaaaaaaaaaaaaaaaa'…); the run folder is <name>-<timestamp>"),
    ("source: {kind: file, path: t.csv, label: y, split: {column: c}}\n",
     "config error: source.split.kind is required: one of contiguous, column, dirichlet"),
    ("source: {kind: file, path: t.csv, label: y, split: {kind: contiguous, column: c}}\n",
     "config error: source.split.column: only split.kind column uses a client column (split.kind is contiguous); "
     "set kind: column or remove column"),
    ("source: {kind: file, path: t.csv, label: y, time_column: y}\n",
     "config error: source.time_column: column 'y' is already the label; a column has one role (label, time or "
     "client)"),
    ("source: {kind: file, path: t.csv, label: y, split: {kind: column, column: y}}\n",
     "config error: source.split.column: column 'y' is already the label; a column has one role (label, time or "
     "client)"),
    ("source: {kind: file, path: t.csv, label: y, categorical: [a, a], features: [a]}\n",
     "config error: source.categorical: column 'a' is listed twice"),
    ("source: {kind: file, path: t.csv, label: y, thousands: '.'}\n",
     "config error: source.thousands: Input should be ',', \"'\", '_' or ' ' (got '.')"),
    ("source: {kind: river_synth, name: SEA, params: {seed: 3}}\n",
     "config error: source.params.seed: the generators' seeds come from the run's seed (client m gets seed·1000 + m, "
     "so clients draw different samples); set the top-level seed instead"),
    ("source: {kind: river_synth, name: Hyperplane, params: {noise_percentage: .nan}}\n",
     "config error: source.params.noise_percentage: nan is not a finite number"),
    ("source: {kind: river_synth, name: Agrawal, params: {seed_model: 1.5}}\n",
     "config error: source.params.seed_model: a seed is an integer >= 0 (got 1.5)"),
    ("steps: 5\nsweep: {parameters: {source.clients: [4, 4]}, metric: regret_static}\n",
     "config error: sweep.parameters.source.clients: the value 4 is listed twice; each value is run once (use seeds "
     "for repeated runs)"),
    ("learner: 5\n", "config error: learner: Input should be a mapping of fields (key: value) (got 5)"),
    ("baselines: [tau1, local, tau1]\n", "config error: baselines: tau1 listed twice; each baseline runs once"),
])
def test_second_break_test_config_faults(tmp_path, text, message):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    if message is None:
        assert load_config(path).learner.step_size.eta == 0.001      # YAML 1.2 float without a dot
        return
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == message


def test_bad_config_paths_are_one_line(tmp_path):
    (tmp_path / "t.csv").write_text("x,y\n1,2\n")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    for path, message in [(tmp_path, f"config error: --config {tmp_path} is a folder; give the experiment's YAML "
                                     f"file"),
                          (Path("/dev/null"), "config error: --config /dev/null is not a regular file; give the "
                                              "experiment's YAML file"),
                          (tmp_path / "t.csv", f"config error: {tmp_path / 't.csv'} does not hold a mapping of fields "
                                               f"(name, source, learner, …); is it the experiment's YAML file?"),
                          (tmp_path / "bin.yaml", f"config error: --config {tmp_path / 'bin.yaml'} is not a UTF-8 "
                                                  f"text file; give the experiment's YAML file")]:
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value) == message


def test_a_whole_config_rule_names_its_fields_without_a_file_prefix():
    # a model-level rule has no field location; the message read "config error: file: learner.model: ..."
    with pytest.raises(ConfigError) as e:
        parse_config({"name": "x", "source": {"kind": "synthetic"}, "learner": {"model": "gmf"}})
    assert str(e.value) == ("config error: learner.model: gmf learns from interaction streams; set source.kind: "
                            "movielens (source.kind is synthetic)")


def test_a_sweep_into_an_unset_section_starts_it_empty():
    # learner.gmf is null by default; the override used to call .get on None (a traceback)
    assert apply_override({"learner": {"gmf": None}}, "learner.gmf.dim", 4) == {"learner": {"gmf": {"dim": 4}}}
