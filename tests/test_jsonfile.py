"""jsonfile.py: every JSON file the package reads, read one way. Drawn values: nesting of any
depth, NaN and infinity anywhere, each rule's types and extremes; then each file kind a command
reads back (config.json, history.json, a sweep spec, a trial's record, a compressed model's
header), corrupted in each way, refused on one line naming the file and the field."""
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from commands import EVALUATE, SWEEP, TRAIN, assert_one_line_error, run
from gluon_bbb import jsonfile
from gluon_bbb.errors import CheckpointError, ConfigError

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=3), max_leaves=20)


def depth(value):
    if isinstance(value, (list, dict)):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max((depth(item) for item in items), default=0)
    return 0


@given(JSON_VALUES, st.integers(0, 40))
def test_any_json_is_read_as_deep_as_the_bound_and_no_deeper(value, wrap):
    for _ in range(wrap):
        value = [value]
    text = json.dumps(value)
    if depth(value) <= jsonfile.MAX_DEPTH:
        assert jsonfile.parse(text, "f", CheckpointError) == json.loads(text)
    else:
        with pytest.raises(CheckpointError, match="nests %d levels deep" % depth(value)):
            jsonfile.parse(text, "f", CheckpointError)


def test_nesting_far_past_the_bound_and_constants_json_lacks_are_one_line():
    for text in ("[" * 100000 + "]" * 100000, '{"a": ' * 100000 + "1" + "}" * 100000):
        with pytest.raises(CheckpointError, match="nests 100000 levels deep"):
            jsonfile.parse(text, "f", CheckpointError)
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(CheckpointError, match="holds %s, which JSON does not" % constant):
            jsonfile.parse('{"loss": [1, %s]}' % constant, "f", CheckpointError)
    for data, words in ((b"\xff\xfe", "not UTF-8"), (b"{", "cannot read f: Expecting"),
                        (b" " * 10, "cannot read f: Expecting value")):
        with pytest.raises(CheckpointError, match=words):
            jsonfile.parse(data, "f", CheckpointError)
    with pytest.raises(CheckpointError, match="f: 12 bytes, more than the 10"):
        jsonfile.parse(b"[1, 2, 3, 4]", "f", CheckpointError, max_bytes=10)
    # a string holding brackets does not count as nesting
    assert jsonfile.parse(json.dumps(["[" * 100]), "f", CheckpointError) == ["[" * 100]


RULES = {"number": (jsonfile.number(-1.0, 1.0), lambda v: isinstance(v, (int, float))
                    and not isinstance(v, bool) and math.isfinite(v) and -1 <= v <= 1),
         "whole": (jsonfile.whole(1, 5), lambda v: isinstance(v, int)
                   and not isinstance(v, bool) and 1 <= v <= 5),
         "proportion": (jsonfile.proportion, lambda v: isinstance(v, (int, float))
                        and not isinstance(v, bool) and 0 <= v <= 1),
         "text": (jsonfile.text, lambda v: isinstance(v, str)),
         "flag": (jsonfile.flag, lambda v: isinstance(v, bool)),
         "scalar": (jsonfile.scalar, lambda v: not isinstance(v, (list, dict)) and not (
             isinstance(v, float) and not math.isfinite(v)))}


@given(st.sampled_from(sorted(RULES)), JSON_VALUES | st.floats() | st.integers(-10, 10))
def test_each_rule_takes_its_kind_of_value_and_names_the_field_otherwise(name, value):
    rule, takes = RULES[name]
    if takes(value):
        taken = rule(value, "field")
        assert taken == value or (math.isnan(taken) and math.isnan(value))
    else:
        with pytest.raises(ConfigError) as info:
            rule(value, "field")
        assert info.value.field == "field" and "\n" not in str(info.value)
    # in a list, in an object, absent
    assert jsonfile.optional(rule)(None, "field") is None
    with pytest.raises(ConfigError, match=r"items\[1\] must be"):
        jsonfile.list_of(rule)([RULES_EXAMPLE[name], [[]]], "items")
    checked = jsonfile.check({"a": RULES_EXAMPLE[name], "other": [1]}, {"a": rule}, "f",
                             CheckpointError)
    assert checked == {"a": RULES_EXAMPLE[name], "other": [1]}
    with pytest.raises(CheckpointError, match="^f: field a must be"):
        jsonfile.check({"a": [[]]}, {"a": rule}, "f", CheckpointError)


RULES_EXAMPLE = {"number": 0.5, "whole": 2, "proportion": 1, "text": "x", "flag": True,
                 "scalar": "x"}


# What the commands read back, corrupted: each refused on one line naming its file.

CORRUPTIONS = {
    "nested": lambda value, field: dict(value, **{field: json.loads("[" * 50 + "]" * 50)}),
    "a string": lambda value, field: dict(value, **{field: "3"}),
    "huge": lambda value, field: dict(value, **{field: 1e300}),
    "null": lambda value, field: dict(value, **{field: None}),
}


@settings(max_examples=12)
@given(st.sampled_from(sorted(CORRUPTIONS)), st.sampled_from(["num_hidden_units", "epochs",
                                                              "prior_settings", "data_dir"]))
def test_a_runs_config_json_corrupted_is_one_line_naming_it(runs, tmp_path_factory, how, field):
    run_dir = runs.copy("small", tmp_path_factory.mktemp("config"))
    record = json.loads((run_dir / "config.json").read_text())
    changed = CORRUPTIONS[how](record, field)
    (run_dir / "config.json").write_text(json.dumps(changed))
    proc = run(EVALUATE, run_dir, "--test-samples", "1")
    # null settings are the prior's defaults; a directory that is not there, MNIST's default
    if (field, how) in (("data_dir", "null"), ("data_dir", "a string"),
                        ("prior_settings", "null")):
        assert proc.returncode == 0, proc.stderr
        return
    assert_one_line_error(proc, str(run_dir / "config.json"))


@settings(max_examples=12)
@given(st.sampled_from(sorted(CORRUPTIONS)), st.sampled_from(["loss", "test_accuracy",
                                                              "threads", "epoch_seconds"]))
def test_a_runs_history_corrupted_is_refused_on_resume(runs, tmp_path_factory, how, field):
    run_dir = runs.copy("small", tmp_path_factory.mktemp("history"))
    history = json.loads((run_dir / "history.json").read_text())
    history[0] = CORRUPTIONS[how](history[0], field)
    (run_dir / "history.json").write_text(json.dumps(history))
    before = (run_dir / "checkpoint.params").read_bytes()
    proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2")
    if how == "null" and field != "loss":  # an optional figure left out
        assert proc.returncode == 0, proc.stderr
        return
    assert_one_line_error(proc, str(run_dir / "history.json"))
    assert (run_dir / "checkpoint.params").read_bytes() == before


@settings(max_examples=8)
@given(st.sampled_from(sorted(CORRUPTIONS)), st.sampled_from(["base", "grid", "proportions"]))
def test_a_sweep_spec_corrupted_is_one_line(tmp_path_factory, how, field):
    tmp_path = tmp_path_factory.mktemp("spec")
    spec = {"base": {"epochs": 1}, "grid": {"seed": [0]}, "proportions": [0.5]}
    changed = CORRUPTIONS[how](spec, field)
    if how == "nested" and field != "proportions":
        changed[field] = {"seed" if field == "grid" else "epochs": changed[field]}
    (tmp_path / "spec.json").write_text(json.dumps(changed))
    proc = run(SWEEP, tmp_path / "spec.json", "--out", tmp_path / "out")
    assert_one_line_error(proc, str(tmp_path / "spec.json"))
    assert not (tmp_path / "out").exists()


def test_a_trials_record_corrupted_is_one_line_and_never_summarized(tmp_path, monkeypatch):
    from gluon_bbb.learning import trials
    from gluon_bbb.learning.trials import SpecError
    (tmp_path / "trial").mkdir()
    for record in ([], {"status": "done", "train_args": [], "proportions": ["0"],
                        "figures": {"epochs": 1, "seconds": 1.0, "test_error": {"0": "x"}}},
                   {"status": "done"}):
        (tmp_path / "trial" / trials.TRIAL_FILE).write_text(json.dumps(record))
        with pytest.raises(SpecError, match="trial.json"):
            trials.run_trial(str(tmp_path / "trial"), [], [0.0], 1)
