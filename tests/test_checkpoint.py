"""learning/checkpoint.py: a parameter file of weights stored (inputs, outputs) still loads and
resumes to the run trained at once (its refusals of damaged files: test_prune.py)."""
import os

import numpy as np
from mxnet import nd

from gluon_bbb import Config, load_checkpoint, train
from test_rundir import QUIET, same_parameters


def test_checkpoints_with_weights_as_inputs_outputs_still_load(tmp_path, runs, mnist, ctx):
    # checkpoints without a layout key hold weights (inputs, outputs) and flat optimizer
    # state in that order: they load turned around, and resume to the same run
    config = Config(train_size=300, epochs=2, seed=4, optimizer="adam", num_hidden_units=30)
    whole = train(config, mnist, ctx, **QUIET)
    old = str(tmp_path / "old")
    train(Config(**dict(config.to_dict(), epochs=1)), mnist, ctx, out_dir=old, **QUIET)
    arrays = nd.load(os.path.join(old, "checkpoint.params"))
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
    nd.save(os.path.join(old, "checkpoint.params"), arrays)
    assert nd.load(os.path.join(old, "checkpoint.params"))["mu:0"].shape == (784, 30)
    assert [m.shape for m in load_checkpoint(old)["mus"]] == shapes
    same_parameters(whole, train(config, mnist, ctx, out_dir=old, resume=True, **QUIET))
