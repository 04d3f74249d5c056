"""Property: every config the validator accepts, saved as a run saves it (config.yaml) and read back, is equal."""

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamfl.config import ConfigError, dump_config, load_config, parse_config, read_yaml, write_yaml

finite = st.floats(allow_nan=False, allow_infinity=False)
nonneg = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=0, exclude_min=True, allow_nan=False, allow_infinity=False)
count = st.integers(min_value=1, max_value=10**6)
text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
folder = text.filter(lambda s: s not in ("", ".", "..") and "/" not in s and "\\" not in s)
# River params are passed to River as they are: any YAML value, infinities included (NaN ≠ NaN, so not NaN)
param_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6)


def _maybe(d: dict, **fields) -> st.SearchStrategy:
    """``d`` plus any subset of the optional ``fields`` (strategies), so defaults are exercised too."""
    return st.fixed_dictionaries(d, optional=fields)


drift = st.one_of(
    st.fixed_dictionaries({"kind": st.just("abrupt"), "at": st.lists(st.integers(0, 10**6), min_size=1, max_size=3)}),
    st.fixed_dictionaries({"kind": st.sampled_from(["rotation", "linear"]), "speed": finite}),
    st.fixed_dictionaries({"kind": st.just("periodic"), "amplitude": finite, "period": positive}),
    st.fixed_dictionaries({"kind": st.just("random_walk"), "step": nonneg}),
    st.fixed_dictionaries({"kind": st.just("adaptive"), "budget": nonneg}),
)
inject = st.one_of(
    _maybe({"kind": st.just("covariate_rotation"), "start": st.integers(0, 10**6), "angle": finite},
           end=st.none() | st.integers(0, 10**6)),
    _maybe({"kind": st.just("covariate_scale"), "start": st.integers(0, 10**6), "factor": positive},
           end=st.none() | st.integers(0, 10**6)),
    _maybe({"kind": st.just("label_flip"), "start": st.integers(0, 10**6)},
           end=st.none() | st.integers(0, 10**6), fraction=st.floats(0, 1, exclude_min=True)),
)
table_fields = dict(
    label=text, task=st.none() | st.sampled_from(["least_squares", "logistic", "softmax"]),
    features=st.none() | st.lists(text, max_size=3), categorical=st.lists(text, max_size=2),
    time_column=st.none() | text, clients=count,
    split=_maybe({}, kind=st.sampled_from(["contiguous", "dirichlet"]), alpha=positive) |
    st.fixed_dictionaries({"kind": st.just("column"), "column": text.filter(bool)}),
    standardize=st.booleans(), intercept=st.booleans(),
    prior_shift=st.none() | st.fixed_dictionaries({
        "start": st.floats(0, 1), "class_weights": st.dictionaries(st.integers() | text, nonneg, max_size=3)}),
    inject=st.lists(inject, max_size=2),
)
source = st.one_of(
    _maybe({"kind": st.just("synthetic")}, task=st.sampled_from(["least_squares", "logistic"]), clients=count,
           dim=count, noise=nonneg, heterogeneity=nonneg, radius=nonneg, feature_scale=positive,
           drift=st.lists(drift, max_size=3)),
    _maybe({"kind": st.just("river_synth"), "name": text}, params=st.dictionaries(text, param_value, max_size=3),
           clients=count, shared_concept=st.booleans(), standardize=st.booleans(), standardize_label=st.booleans()),
    _maybe({"kind": st.just("river_dataset"), "name": text}, **table_fields),
    _maybe({"kind": st.just("file"), "path": folder, "label": text},
           **{k: v for k, v in table_fields.items() if k != "label"},
           thousands=st.none() | st.sampled_from([",", ".", "'", " "]), standardize_label=st.booleans()),
)
learner = _maybe({}, tau=st.none() | count,
                 step_size=_maybe({}, kind=st.sampled_from(["constant", "inv_sqrt", "strongly_convex"]),
                                  eta=positive, mu=positive, t0=nonneg),
                 batch_size=count, radius=st.none() | positive, weighting=st.sampled_from(["uniform", "samples"]))
experiment = _maybe(
    {}, name=folder, seed=st.integers(0, 2**63), steps=st.none() | count, source=source, learner=learner,
    baselines=st.lists(st.sampled_from(["tau1", "local", "centralized", "river"]), unique=True),
    output=_maybe({}, dir=folder, format=st.sampled_from(["csv", "parquet"]), plots=st.booleans(),
                  client_columns=st.booleans()),
    chunk_size=count, reservoir_size=st.integers(16, 10**6),
    sweep=st.none() | st.fixed_dictionaries(
        {"parameters": st.fixed_dictionaries({"source.clients": st.lists(count, min_size=1, max_size=3)},
                                             optional={"learner.tau": st.lists(count, min_size=1, max_size=2)}),
         "metric": st.just("regret_static")}),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(experiment)
def test_any_accepted_config_saved_and_read_back_is_the_same(data):
    try:
        parse_config(data)
    except ConfigError:
        assume(False)          # only configs the validator accepts are promised to round-trip
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "exp.yaml"
        written.write_text(write_yaml(data))   # what a user writes, in the YAML streamfl reads
        cfg = load_config(written)             # the resolved config (relative paths resolved)
        saved = Path(tmp) / "run" / "config.yaml"
        saved.parent.mkdir()
        saved.write_text(dump_config(cfg))     # what a run writes
        again = load_config(saved)
        assert again == cfg
        assert dump_config(again) == dump_config(cfg)


def test_a_name_that_yaml_12_reads_as_a_number_is_quoted_when_saved():
    # '0E0' is text in YAML 1.1 (what PyYAML writes) but a float in YAML 1.2 (what
    # streamfl reads); saved unquoted, the next run refused its own config.yaml.
    cfg = parse_config({"name": "0E0"})
    text = dump_config(cfg)
    assert "name: '0E0'" in text
    assert parse_config(read_yaml(text)).name == "0E0"
