"""errors.py: a message names its fields as the caller names them (the field for the Python API,
the flag for a command), and shows values holding braces or percent signs as they are."""
import pytest

from gluon_bbb.errors import (CheckpointError, ConfigError, GluonBBBError, Interrupted,
                              check_proportion, is_real, is_whole)


def test_a_config_error_names_its_field_as_each_caller_does():
    error = ConfigError("learning_rate", -1.0, "a finite number > 0 (with {optimizer} adam: "
                        "at most 1)")
    assert isinstance(error, ValueError) and error.field == "learning_rate"
    assert str(error) == ("learning_rate must be a finite number > 0 (with optimizer adam: at "
                          "most 1), got -1.0")
    flag = lambda field: "--" + field.replace("_", "-")  # noqa: E731
    assert error.describe(flag) == ("--learning-rate must be a finite number > 0 (with "
                                    "--optimizer adam: at most 1), got -1.0")


@pytest.mark.parametrize("value", ["{seed}", "100%", "%s %d", "{", "}"])
def test_values_with_braces_and_percent_signs_are_shown_as_they_are(value):
    assert str(ConfigError("network", value, "a list of layers (50% of them relu)")) == (
        "network must be a list of layers (50% of them relu), got " + repr(value))
    assert str(CheckpointError("%s is not a run directory", value)) == (
        value + " is not a run directory")


def test_every_error_of_the_users_is_one_class_and_an_interrupt_says_what_it_keeps():
    assert issubclass(ConfigError, GluonBBBError) and issubclass(CheckpointError, GluonBBBError)
    stop = Interrupted("SIGTERM", "epochs 1-3 are saved", resumable=True)
    assert isinstance(stop, KeyboardInterrupt)
    assert (stop.signal_name, stop.saved, stop.resumable) == ("SIGTERM", "epochs 1-3 are saved",
                                                              True)


@pytest.mark.parametrize("value, real, whole", [
    (1, True, True), (0, True, True), (-3, True, True), (2.5, True, False),
    (float("nan"), True, False), (True, False, False), (False, False, False),
    ("1", False, False), (None, False, False), ([1], False, False)])
def test_a_number_is_an_int_or_float_never_a_bool(value, real, whole):
    assert is_real(value) is real and is_whole(value) is whole


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_a_proportion_outside_0_to_1_is_refused_naming_its_field(value):
    with pytest.raises(ConfigError) as caught:
        check_proportion(value, "pi")
    assert caught.value.field == "pi" and caught.value.requirement == "in [0, 1]"
    assert check_proportion(0.25) == 0.25
