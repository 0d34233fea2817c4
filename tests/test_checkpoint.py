"""learning/checkpoint.py: a parameter file of weights stored (inputs, outputs) still loads; the
file names its parametrization."""

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, load_checkpoint, train

from test_train import params_of


@pytest.mark.slow
def test_checkpoints_with_weights_as_inputs_outputs_still_load(tmp_path, mnist, ctx):
    # checkpoints without a layout key hold weights (inputs, outputs) and flat optimizer
    # state in that order: they load turned around, and resume to the same run
    config = Config(train_size=1000, epochs=2, seed=4, optimizer="adam", num_hidden_units=30)
    quiet = lambda line: None
    whole = train(config, mnist, ctx, out_dir=str(tmp_path / "whole"), log=quiet)
    train(Config(**dict(config.to_dict(), epochs=1)), mnist, ctx, out_dir=str(tmp_path / "old"),
          log=quiet)
    arrays = params_of(str(tmp_path / "old"))
    shapes = [arrays["mu:%d" % i].shape for i in range(6)]
    for key in [k for k in arrays if k.startswith(("mu:", "rho:"))]:
        if arrays[key].ndim == 2:
            arrays[key] = arrays[key].T.copy()
    for key in [k for k in arrays if k.startswith("opt:")]:
        flat, blocks, offset = arrays[key].asnumpy(), [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            block = flat[offset:offset + size].reshape(shape)
            blocks.append((block.T if len(shape) == 2 else block).ravel())
            offset += size
        arrays[key] = nd.array(np.concatenate(blocks))
    for key in ("layout", "checksum", "trained_as"):  # keys later than that layout
        del arrays[key]
    nd.save(str(tmp_path / "old" / "checkpoint.params"), arrays)
    assert nd.load(str(tmp_path / "old" / "checkpoint.params"))["mu:0"].shape == (784, 30)
    state = load_checkpoint(str(tmp_path / "old"))
    assert [m.shape for m in state["mus"]] == shapes
    resumed = train(config, mnist, ctx, out_dir=str(tmp_path / "old"), resume=True, log=quiet)
    for a, b in zip(whole.mus + whole.rhos, resumed.mus + resumed.rhos):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
