"""commands/cli.py: what every command shares, as a user meets it (the flags' one-line
errors and the signals are tested across the commands in test_refusals.py,
test_hostile_inputs.py and test_rundir.py)."""
import numpy as np

from commands import PREDICT, assert_one_line_error, run
from test_model_file import synthetic_model


def test_a_full_standard_output_is_named_not_the_disk(tmp_path):
    model = synthetic_model(tmp_path / "m.gbbb")
    digits = tmp_path / "digits.npy"
    np.save(digits, np.zeros((3000, 28, 28)))
    with open("/dev/full", "w") as full:
        proc = run(PREDICT, model, digits, stdout=full)
    assert_one_line_error(proc, "error: cannot write to standard output: No space left on "
                                "device")
