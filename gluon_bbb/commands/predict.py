"""The command ``gluon-bbb predict MODEL INPUT...``: classify
images with a model's predictive distribution and say where it is unsure."""
import json
import os
import sys
import warnings

from .cli import ArgumentParser, add_import_flag, import_modules, load_mxnet, run_main
from ..errors import GluonBBBError
from ..outputs import path_problem

PROG = "gluon-bbb predict"
SIDE = 28  # the images' height and width
MAX_PIXELS = 4096 * 4096  # the largest image --resize scales down to a digit
MODEL = "a file gluon-bbb compress wrote, or a run directory"  # what predict reads


class InputError(GluonBBBError):
    """An input that is not an image the model takes."""


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Classify images with a compressed model or "
                            "a run directory, with the predictive's uncertainty.")
    parser.add_argument("model", help=MODEL)
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="PNG images, .npy arrays of pixel values 0-255, or IDX image files")
    parser.add_argument("--invert", action="store_true", help="the images are dark digits on a "
                        "light background: turn them around (MNIST's are light on dark)")
    parser.add_argument("--resize", action="store_true", help="scale PNG images that are not "
                        "28x28 to 28x28")
    parser.add_argument("--samples", type=int, help="draws of the Monte Carlo predictive (default: "
                        "the model's: 10 where it has sigmas, else 0, its mean weights)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    add_import_flag(parser)
    return parser


# Reading the inputs.

def read_inputs(paths, invert=False, resize=False):
    """``(names, pixels)``: a name per image and their raw pixels (N, 28, 28) float32 in
    [0, 255]; InputError, naming the file, for what is not such an image."""
    import numpy as np
    from ..shipping.model_file import pixel_problem
    names, images = [], []
    for path in paths:
        if os.path.isdir(path):
            raise InputError("%s: a directory; give the image files in it (%s/*.png)", path,
                             path.rstrip(os.sep))
        problem = path_problem(path)
        if problem:
            raise InputError("%s: %s, not an image file", path, problem)
        if not os.path.isfile(path):
            raise InputError("%s: no such file", path)
        lower = path.lower()
        if lower.endswith(".png"):
            found = [_read_png(path, resize)]
        elif lower.endswith(".npy"):
            found = _read_npy(path)
        elif "idx3-ubyte" in lower or lower.endswith((".idx", ".idx.gz")):
            from ..data import read_idx
            from ..errors import DataError
            try:
                found = read_idx(path, ndim=3).astype(np.float32)
            except DataError as exc:
                raise InputError("%s", exc.describe()) from None
            if found.shape[0] == 0:
                raise InputError("%s: an IDX file that holds no image", path)
            if found.shape[1:] != (SIDE, SIDE):
                raise InputError("%s: images are %dx%d, the model takes %dx%d", path,
                                 found.shape[1], found.shape[2], SIDE, SIDE)
        else:
            raise InputError("%s: not a PNG image, a .npy array or an IDX image file (by its "
                             "name)", path)
        # the file's values, whatever its kind, checked once (as model.inputs checks a batch)
        problem = pixel_problem(found)
        if problem:
            raise InputError("%s: pixel values: %s", path, problem)
        for i, image in enumerate(found):
            names.append(path if len(found) == 1 else "%s[%d]" % (path, i))
            images.append(image)
    pixels = np.stack(images).astype(np.float32)
    return names, (255.0 - pixels if invert else pixels)


def _read_png(path, resize):
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    try:
        with warnings.catch_warnings():
            # PIL warns of, then refuses, images of over 89 and 179 million pixels as it opens
            # them: either is far too large to be a digit
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise InputError("%s: too large to be a digit (over %d million pixels by its header; at "
                         "most %d pixels are scaled)", path, Image.MAX_IMAGE_PIXELS // 10 ** 6,
                         MAX_PIXELS) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError("%s: not a readable PNG image (%s)", path, exc) from None
    try:
        with image:
            mode, size = image.mode, image.size
            # the header says how large it is: an image far larger than a digit is refused
            # before it is decoded (a 15000x15000 PNG takes PIL's decompression bomb check)
            if size != (SIDE, SIDE) and not resize:
                raise InputError("%s: is %dx%d, the model takes %dx%d (--resize scales it)",
                                 path, size[0], size[1], SIDE, SIDE)
            if size[0] * size[1] > MAX_PIXELS:
                raise InputError("%s: is %dx%d, too large to be a digit (at most %d pixels; "
                                 "crop it first)", path, size[0], size[1], MAX_PIXELS)
            image.load()
            if mode in ("I;16", "I;16B", "I"):
                array = np.asarray(image, dtype=np.float64)
                array = array * (255.0 / 65535.0)
            else:
                if mode == "P":
                    image = image.convert("RGBA")
                array = np.asarray(image, dtype=np.float64)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError("%s: not a readable PNG image (%s)", path, exc) from None
    if array.ndim == 3:
        # gray and alpha (LA), gray (L as three equal channels), RGB, RGBA
        channels = array.shape[2]
        colour = array[..., :1] if channels <= 2 else array[..., :3]
        alpha = array[..., channels - 1] if channels in (2, 4) else None
        if alpha is not None and np.any(alpha < 255):
            raise InputError("%s: has transparent pixels; give an opaque grayscale PNG", path)
        if np.any(colour != colour[..., :1]):
            raise InputError("%s: a colour image (%s); give a grayscale PNG", path, mode)
        array = colour[..., 0]
    if mode == "1":
        array = array * 255.0
    if array.shape != (SIDE, SIDE):
        if not resize:
            raise InputError("%s: is %dx%d, the model takes %dx%d (--resize scales it)", path,
                             size[0], size[1], SIDE, SIDE)
        array = np.asarray(Image.fromarray(array.astype(np.float32), mode="F").resize(
            (SIDE, SIDE), Image.LANCZOS), dtype=np.float64).clip(0, 255)
    return array.astype(np.float32)


def _read_npy(path):
    import numpy as np
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":  # NumPy would call any other content pickled data
            raise InputError("%s: not a .npy array file (it does not begin as NumPy's do)",
                             path)
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError("%s: not a readable .npy array (%s)", path, exc) from None
    shape = array.shape
    if shape in ((SIDE, SIDE), (SIDE * SIDE,)):
        array = array.reshape(1, SIDE, SIDE)
    elif shape[1:] in ((SIDE, SIDE), (SIDE * SIDE,)) and len(shape) in (2, 3):
        array = array.reshape(-1, SIDE, SIDE)
    else:
        raise InputError("%s: an array of shape %s; the model takes (28, 28), (784,), "
                         "(N, 28, 28) or (N, 784)", path, shape)
    if array.size == 0:
        raise InputError("%s: holds no image", path)
    return array  # its values are checked with every input's (read_inputs)


# The model: a compressed file, or a run directory (``analysis.robustness.load_model``).

def unsure_rule(model, run):
    """``(entropy threshold, probability floor)``: a compressed file's own, or for a run
    ``(RunDirectory, Config)`` calibrated now on its validation images (its test images where it
    holds out none)."""
    from ..shipping.model_file import UNSURE_PROBABILITY, unsure_entropy
    if run is None:
        return model.model.unsure_entropy, model.model.unsure_probability
    directory, config = run
    data = directory.load_data(remedy="set $GLUON_BBB_DATA to the directory it was trained on")
    held_out = config.validation
    images = data.train_images[-held_out:] if held_out else data.test_images
    return unsure_entropy(model.probabilities(images)), UNSURE_PROBABILITY


# a stack of more images than this is predicted in parts, with a line on stderr at most
# every PROGRESS_SECONDS
PROGRESS_IMAGES = 10000
PROGRESS_SECONDS = 5.0


def probabilities_with_progress(model, pixels, part=PROGRESS_IMAGES):
    """``model``'s probabilities of raw ``pixels``, in parts of ``part`` images where there
    are more, saying on stderr how many are done: each part draws the same weights (the draws
    are seeded per call), so the figures are the whole stack's."""
    import time
    import numpy as np
    count = pixels.shape[0]
    if count <= part:
        return model.probabilities(model.inputs(pixels))
    parts, started = [], time.time()
    last = started
    for start in range(0, count, part):
        parts.append(model.probabilities(model.inputs(pixels[start:start + part])))
        done = min(start + part, count)
        if time.time() - last >= PROGRESS_SECONDS or done == count:
            last = time.time()
            sys.stderr.write("predict: %d of %d images, %.0f s\n" % (done, count, last - started))
            sys.stderr.flush()
    return np.concatenate(parts)


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    import numpy as np
    from ..shipping.model_file import entropy_bits, unsure
    from ..errors import ConfigError
    if args.samples is not None and not 0 <= args.samples <= 1000:
        raise ConfigError("samples", args.samples, "an integer in [0, 1000]")
    problem = path_problem(args.model, "file" if not os.path.isdir(args.model) else "directory")
    if problem:
        raise InputError("%s: %s, not a model (%s)", args.model, problem, MODEL)
    if not os.path.exists(args.model):
        raise InputError("%s: no such model (%s)", args.model, MODEL)
    from ..analysis.robustness import load_model
    from ..learning.rundir import is_compressed_model
    if not is_compressed_model(args.model):
        load_mxnet()
    model, run = load_model(args.model, args.samples, "samples")
    threshold, probability_floor = unsure_rule(model, run)
    names, pixels = read_inputs(args.inputs, args.invert, args.resize)
    probs = probabilities_with_progress(model, pixels)
    if not np.isfinite(probs).all():
        raise InputError("%s gives non-finite probabilities for these inputs; nothing is "
                         "reported", args.model)
    entropy = entropy_bits(probs)
    labels = probs.argmax(axis=1)
    flagged = unsure(probs, threshold, probability_floor)
    records = [{"input": name, "label": int(label), "probability": float(p[label]),
                "entropy_bits": float(h), "unsure": bool(u)}
               for name, label, p, h, u in zip(names, labels, probs, entropy, flagged)]
    if args.json:
        print(json.dumps({"model": os.path.abspath(args.model), "samples": model.num_samples,
                          "unsure_above_bits": threshold,
                          "unsure_below_probability": probability_floor,
                          "predictions": records}, indent=2))
        return 0
    width = max(len(name) for name in names)
    for record in records:
        print("%-*s  %d  probability %.3f  entropy %.3f bits%s" % (
            width, record["input"], record["label"], record["probability"],
            record["entropy_bits"], "  unsure" if record["unsure"] else ""))
    return 0


def run(argv=None, prog=PROG):
    """The command as a program: its exit status. A compressed model needs no MXNet."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())
