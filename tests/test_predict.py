"""commands/predict.py: a large stack of images is predicted in parts, with progress, to the
same figures as at once (the command's inputs and refusals: test_compression.py,
test_refusals.py)."""
import numpy as np

from test_compression import synthetic_model
from gluon_bbb.analysis.robustness import load_model
from gluon_bbb.commands.predict import probabilities_with_progress


def test_a_stack_predicted_in_parts_gives_the_figures_of_the_whole(tmp_path, capsys):
    # parts a whole number of the predictor's batches of 100, as PROGRESS_IMAGES is
    path = str(synthetic_model(tmp_path / "m.gbbb", sigma_bits=4))
    pixels = np.random.default_rng(0).integers(0, 256, (250, 28, 28)).astype(np.float32)
    for samples in (0, 3):
        model, run = load_model(path, samples, "samples")
        assert run is None and model.num_samples == samples
        whole = model.probabilities(model.inputs(pixels))
        parts = probabilities_with_progress(model, pixels, part=100)
        np.testing.assert_array_equal(parts, whole)
    assert capsys.readouterr().err.splitlines()[-1].startswith("predict: 250 of 250 images, ")
