"""Property-based checks of the fast paths against their plain references over randomized
shapes and settings (Hypothesis): the convolution (a one-channel input as a dense product over
its patches; MXNet's oneDNN operator otherwise) and max pooling against NumPy, values and
gradients, in every way the package runs them; the NumPy predictor's convolution and pooling in
one product, and the C kernel's in one pass at each vector width, against NumPy's; the NumPy
predictor and the networks' forward pass outside autograd (which takes the C kernel) against
MXNet's operators for randomly drawn networks. A hand-picked shape is an example; these are the
checks.

MXNet 1.9.1's oneDNN picks blocked memory layouts by shape and ISA (8 channels a block on AVX2,
16 on AVX-512), so the channel counts are drawn from 1-70 with the multiples of 8 and 16 drawn
often."""
import numpy as np
from hypothesis import given, strategies as st
from mxnet import autograd, nd, sym

from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.networks.layers import MaxPool2D, convolution
from gluon_bbb.networks.network import parse_network

def np_convolution(x, W, b, stride=1, pad=0, dilate=1):
    """out[n, c, i, j] = b[c] + sum W[c, k, u, v] xp[n, k, i s + u d, j s + v d] over k, u, v,
    xp: x with ``pad`` zeros on each side; and the same sums taken backwards for the gradients
    of sum(head * out). Returns (out, a function of head giving (d x, d W, d b))."""
    kernel = W.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    rows = (xp.shape[2] - dilate * (kernel - 1) - 1) // stride + 1
    cols = (xp.shape[3] - dilate * (kernel - 1) - 1) // stride + 1
    window = lambda u, v: (slice(None), slice(None),
                           slice(u * dilate, u * dilate + stride * (rows - 1) + 1, stride),
                           slice(v * dilate, v * dilate + stride * (cols - 1) + 1, stride))
    out = np.zeros((x.shape[0], W.shape[0], rows, cols)) + b[None, :, None, None]
    for u in range(kernel):
        for v in range(kernel):
            out += np.einsum("ck,nkij->ncij", W[:, :, u, v], xp[window(u, v)])

    def gradients(head):
        grad_W, grad_xp = np.zeros_like(W), np.zeros_like(xp)
        for u in range(kernel):
            for v in range(kernel):
                grad_W[:, :, u, v] = np.einsum("ncij,nkij->ck", head, xp[window(u, v)])
                grad_xp[window(u, v)] += np.einsum("ncij,ck->nkij", head, W[:, :, u, v])
        grad_x = grad_xp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]]
        return grad_x, grad_W, head.sum(axis=(0, 2, 3))
    return out, gradients


CHANNELS = st.one_of(st.integers(1, 70), st.sampled_from([8, 16, 24, 32, 40, 48, 64]))
SEEDS = st.integers(0, 2 ** 32 - 1)


@st.composite
def convolutions(draw):
    """(x, W, b, stride, pad, dilate) of a convolution MXNet defines: the padded input at
    least as large as the kernel's extent."""
    in_channels, out_channels = draw(st.integers(1, 4)), draw(CHANNELS)
    kernel, stride, dilate = draw(st.integers(1, 4)), draw(st.integers(1, 3)), \
        draw(st.integers(1, 2))
    extent = dilate * (kernel - 1) + 1
    pad = draw(st.integers(0, min(2, extent - 1)))  # MXNet's pooling needs pad < window
    low = max(1, extent - 2 * pad)
    height, width = draw(st.integers(low, low + 7)), draw(st.integers(low, low + 7))
    rng = np.random.default_rng(draw(SEEDS))
    x = rng.normal(size=(draw(st.integers(1, 3)), in_channels, height, width))
    W = rng.normal(size=(out_channels, in_channels, kernel, kernel))
    return x, W, rng.normal(size=out_channels), stride, pad, dilate


def in_a_flat_vector(array, ctx, rng):
    """``(flat, view)``: ``array`` as a view into a longer float32 vector, as a TrainingStep's
    mu holds every parameter."""
    before, after = rng.integers(0, 40), rng.integers(1, 40)
    flat = nd.array(rng.normal(size=before + array.size + after), ctx=ctx)
    flat[before:before + array.size] = nd.array(array.reshape(-1), ctx=ctx)
    return flat, flat[before:before + array.size].reshape(array.shape)


@given(convolutions(), SEEDS)
def test_the_convolution_and_its_gradients_match_numpy(ctx, case, seed):
    x, W, b, stride, pad, dilate = case
    expected, gradients = np_convolution(x, W, b, stride, pad, dilate)
    head = np.random.default_rng(seed).normal(size=expected.shape)
    scale = np.abs(expected).max() + 1
    options = dict(num_filter=W.shape[0], kernel=W.shape[2:], in_channels=W.shape[1],
                   stride=(stride,) * 2, pad=(pad,) * 2, dilate=(dilate,) * 2)
    inputs = [nd.array(a, ctx=ctx) for a in (x, W, b)]
    # recorded by autograd (the patches for one input channel)
    for array in inputs:
        array.attach_grad()
    with autograd.record():
        out = convolution(nd, *inputs, **options)
        loss = nd.sum(out * nd.array(head, ctx=ctx))
    loss.backward()
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-4, atol=1e-5 * scale)
    for array, want in zip(inputs, gradients(head)):
        np.testing.assert_allclose(array.grad.asnumpy(), want, rtol=1e-4,
                                   atol=1e-5 * (np.abs(want).max() + 1))
    # in a symbolic graph as the training step runs it, forward and backward
    graph = convolution(sym, sym.var("x"), sym.var("W"), sym.var("b"), **options)
    args = dict(zip("xWb", (nd.array(a, ctx=ctx) for a in (x, W, b))))
    grads = {name: nd.zeros_like(array) for name, array in args.items()}
    executor = graph.bind(ctx, args, args_grad=grads)
    executor.forward(is_train=True)
    executor.backward(nd.array(head, ctx=ctx))
    np.testing.assert_allclose(executor.outputs[0].asnumpy(), expected, rtol=1e-4,
                               atol=1e-5 * scale)
    for name, want in zip("xWb", gradients(head)):
        np.testing.assert_allclose(grads[name].asnumpy(), want, rtol=1e-4,
                                   atol=1e-5 * (np.abs(want).max() + 1))
    # not recorded (prediction), the weights a view into a flat vector, as a run's mu: the
    # output is the convolution's and the vector is left as it was
    rng = np.random.default_rng(seed + 1)
    flat, W_view = in_a_flat_vector(W, ctx, rng)
    flat_before = flat.asnumpy().copy()
    got = convolution(nd, inputs[0], W_view, inputs[2], **options).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_array_equal(flat.asnumpy(), flat_before)


@st.composite
def poolings(draw):
    size = draw(st.integers(1, 4))
    shape = (draw(st.integers(1, 3)), draw(CHANNELS), draw(st.integers(size, size + 9)),
             draw(st.integers(size, size + 9)))
    return np.random.default_rng(draw(SEEDS)).normal(size=shape).astype(np.float32), size


def np_max_pooling(h, k):
    """Max over k x k windows with stride k, the remainder dropped; and the gradient of
    sum(head * out): head routed to each window's maximum."""
    n, c, rows, cols = h.shape[0], h.shape[1], h.shape[2] // k, h.shape[3] // k
    windows = h[:, :, :rows * k, :cols * k].reshape(n, c, rows, k, cols, k)
    windows = windows.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, rows, cols, k * k)
    out, where = windows.max(axis=-1), windows.argmax(axis=-1)

    def gradient(head):
        grad = np.zeros((n, c, rows, cols, k * k))
        np.put_along_axis(grad, where[..., None], head[..., None], axis=-1)
        grad = grad.reshape(n, c, rows, cols, k, k).transpose(0, 1, 2, 4, 3, 5)
        full = np.zeros(h.shape)
        full[:, :, :rows * k, :cols * k] = grad.reshape(n, c, rows * k, cols * k)
        return full
    return out, gradient


@given(poolings(), SEEDS)
def test_max_pooling_and_its_gradient_match_numpy(ctx, case, seed):
    h, k = case
    expected, gradient = np_max_pooling(h, k)
    head = np.random.default_rng(seed).normal(size=expected.shape)
    pool = MaxPool2D(k)
    x = nd.array(h, ctx=ctx)
    x.attach_grad()
    with autograd.record():
        out = pool(nd, x, [], h.shape[1:])
        loss = nd.sum(out * nd.array(head, ctx=ctx))
    loss.backward()
    np.testing.assert_array_equal(out.asnumpy(), expected)
    np.testing.assert_allclose(x.grad.asnumpy(), gradient(head), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(pool(compressed.NumPyOperators, h, [], h.shape[1:]), expected)


@st.composite
def pooled_convolutions(draw):
    """(x, W, b, pool) of a convolution (stride 1, no padding) that a max pooling of pool x pool
    windows follows, its output's sides at least pool and drawn to leave a remainder often;
    half the time the windows' columns are 8 to 32 in all, a whole number of 8 (the kernel's
    vectors of 4 or 8 floats, and of 16 for 16 or 32: with 2 x 2 windows, its convolution read
    from the image itself and pooled in registers, conv_direct_pooled)."""
    kernel, pool = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    height, width = (draw(st.integers(kernel + pool - 1, kernel + pool + 10)) for _ in "hw")
    if draw(st.booleans()):
        columns = draw(st.sampled_from([c for c in (8, 16, 24, 32) if c % pool == 0]))
        width = kernel - 1 + columns + draw(st.integers(0, pool - 1))
    rng = np.random.default_rng(draw(SEEDS))
    x = rng.normal(size=(draw(st.integers(1, 4)), draw(st.integers(1, 6)), height, width))
    W = rng.normal(size=(draw(CHANNELS), x.shape[1], kernel, kernel))
    return (x.astype(np.float32), W.astype(np.float32), rng.normal(size=W.shape[0])
            .astype(np.float32), pool)


@given(pooled_convolutions(), st.booleans(), st.booleans())
def test_the_numpy_convolution_pooled_in_one_product_matches_numpy(case, always_one_product,
                                                                   relu):
    # compressed.NumPyOperators.ConvolutionMaxPool: the shifted kernels' one product over the
    # windows' patches (forced for every kernel and window when always_one_product), or the
    # convolution then the pooling where the product's zeros would cost more; the ReLU after
    x, W, b, pool = case
    expected = np_max_pooling(np_convolution(x.astype(np.float64), W, b)[0], pool)[0]
    expected = np.maximum(expected, 0) if relu else expected
    limit = compressed.FUSED_MULTIPLY_ADDS
    compressed.FUSED_MULTIPLY_ADDS = np.inf if always_one_product else limit
    try:
        ours = compressed.NumPyOperators.ConvolutionMaxPool(
            x, W, b, num_filter=W.shape[0], kernel=W.shape[2:], pool=pool, relu=relu)
    finally:
        compressed.FUSED_MULTIPLY_ADDS = limit
    assert ours.shape == expected.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5 * (np.abs(expected).max() + 1))


@given(pooled_convolutions(), st.booleans(), st.sampled_from([4, 8, 16]))
def test_the_kernels_convolution_pooled_in_one_pass_matches_numpy(native_kernels, case, relu,
                                                                 widest):
    # bbb_conv_maxpool at each vector width the CPU has (a wider one than it has runs the
    # widest it has): output channels in blocks of two vectors, zeros past the last; a row's
    # outputs in tiles, the last one partial; the windows that fit; the ReLU after; read from
    # the image's patches, or, for 2 x 2 windows a whole number of vectors wide, from the image
    # itself
    x, W, b, pool = case
    expected = np_max_pooling(np_convolution(x.astype(np.float64), W, b)[0], pool)[0]
    expected = np.maximum(expected, 0) if relu else expected
    ours = native_kernels.conv_maxpool(nd.array(x), nd.array(W), nd.array(b), pool, relu,
                                       widest).asnumpy()
    assert ours.shape == expected.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5 * (np.abs(expected).max() + 1))


@st.composite
def networks(draw):
    """A network description of the layers the package trains, on square images of a drawn
    side, and the number of classes; a gate (group sparsity's factor per unit or channel) may
    follow any hidden dense or convolution layer."""
    side = draw(st.integers(6, 14))
    layers, shape = [], (1, side, side)
    gate = lambda: [",gate"] if draw(st.booleans()) else []  # noqa: E731
    for _ in range(draw(st.integers(0, 2))):
        kernel = draw(st.integers(1, min(4, shape[1])))
        layers.append("".join(["conv:%d:%d" % (draw(CHANNELS), kernel)] + gate()))
        shape = (0, shape[1] - kernel + 1, shape[2] - kernel + 1)
        if draw(st.booleans()):
            layers.append("relu")
        if min(shape[1:]) >= 2 and draw(st.booleans()):
            size = draw(st.integers(2, min(3, shape[1])))
            layers.append("pool:%d" % size)
            shape = (0, shape[1] // size, shape[2] // size)
    if layers and draw(st.booleans()):
        layers.append("flatten")
    for _ in range(draw(st.integers(0, 2))):
        layers += ["".join(["dense:%d" % draw(CHANNELS)] + gate()), "relu"]
        if draw(st.booleans()):
            layers.append("dropout:0.5")
    classes = draw(st.integers(2, 12))
    layers.append("dense:%d" % classes)
    return ",".join(layers), side * side, classes


@given(networks(), SEEDS)
def test_the_numpy_predictor_computes_mxnets_network(ctx, description, seed):
    description, features, classes = description
    # the mean network, as a compressed file keeps it (dropout is Monte Carlo's)
    network = parse_network(description, features, classes).without_dropout()
    rng = np.random.default_rng(seed)
    params = [(rng.normal(size=s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1))
              .astype(np.float32) for s in network.param_shapes()]
    X = rng.uniform(size=(rng.integers(1, 5), features)).astype(np.float32)
    theirs = network(nd.array(X, ctx=ctx), [nd.array(p, ctx=ctx) for p in params],
                     F=nd).asnumpy()
    ours = network(X, params, F=compressed.NumPyOperators)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * (np.abs(theirs).max() + 1))


@given(networks(), SEEDS)
def test_a_networks_forward_pass_outside_autograd_computes_mxnets(native_kernels, ctx,
                                                                  description, seed):
    # F None: each convolution that a max pooling follows computed with it by the C kernel
    description, features, classes = description
    network = parse_network(description, features, classes).without_dropout()
    rng = np.random.default_rng(seed)
    params = [nd.array(rng.normal(size=s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1),
                       ctx=ctx) for s in network.param_shapes()]
    X = nd.array(rng.uniform(size=(rng.integers(1, 5), features)), ctx=ctx)
    theirs = network(X, params, F=nd).asnumpy()
    ours = network(X, params).asnumpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * (np.abs(theirs).max() + 1))


@st.composite
def tensors(draw):
    """(mu, sigma, precision, sigma_bits) of one array as ``compression.encode_tensor`` takes
    it: some entries pruned to 0."""
    rng = np.random.default_rng(draw(SEEDS))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)))
    mu = (rng.normal(size=shape) * 10.0 ** draw(st.integers(-3, 1))).astype(np.float32)
    mu[rng.uniform(size=shape) < draw(st.floats(0.0, 1.0))] = 0
    sigma = np.exp(rng.normal(draw(st.floats(-8.0, 0.0)), draw(st.floats(0.0, 2.0)),
                              size=shape)).astype(np.float32)
    return mu, sigma, draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0])), draw(st.integers(0, 8))


@given(tensors())
def test_an_array_round_trips_through_the_files_coding(case):
    from gluon_bbb.shipping.writer import encode_tensor
    mu, sigma, precision, sigma_bits = case
    tensor, blobs = encode_tensor(mu, sigma, precision, sigma_bits)
    decoded_mu, decoded_sigma, positions, offset = compressed._decode_tensor(
        mu.shape, tensor, b"".join(blobs), 0)
    assert offset == sum(len(b) for b in blobs)
    np.testing.assert_array_equal(positions, np.flatnonzero(mu))
    assert (decoded_mu[mu == 0] == 0).all()
    # a kept mean is within half a step of its own value (exact as float32 where the step is 0)
    np.testing.assert_allclose(decoded_mu, mu, rtol=1e-6, atol=tensor["step"] / 2 * (1 + 1e-5))
    if sigma_bits:
        low, high = tensor["log_sigma_range"]
        grid = (high - low) / ((1 << sigma_bits) - 1)
        kept = mu != 0
        np.testing.assert_allclose(np.log(decoded_sigma[kept]), np.log(sigma[kept]),
                                   atol=grid / 2 + 1e-5)
    else:
        assert decoded_sigma is None


@given(networks(), st.floats(0.0, 0.99), st.floats(0.0, 1.0), st.integers(0, 8), SEEDS)
def test_a_compressed_file_predicts_what_the_pruned_mean_network_does(description, proportion,
                                                                        gates_off, sigma_bits,
                                                                        seed):
    """compress -> read: the units the pruning cut off are removed, each gate folded into the
    layer before it (a gate switched off removes its unit), the rest is the pruned mean network
    (float32 means), and the file reads back as the model compress built."""
    from gluon_bbb.shipping.writer import compress_parameters, units_left
    from gluon_bbb.analysis.snr import keep_masks
    description, features, classes = description
    network = parse_network(description, features, classes).without_dropout()
    rng = np.random.default_rng(seed)
    shapes = network.param_shapes()
    mus = [(rng.normal(size=s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1))
           .astype(np.float32) for s in shapes]
    sigmas = [np.exp(rng.normal(-3, 1, size=s)).astype(np.float32) for s in shapes]
    keep = keep_masks(mus, sigmas, proportion)
    gates = network.gate_positions()
    for i in gates:  # whole units switched off, as group sparsity's prior does
        keep[i] &= rng.uniform(size=keep[i].shape) >= gates_off
    model, header, blobs, report = compress_parameters(network, mus, sigmas, sigmas, proportion,
                                                       0.0, sigma_bits, classes, keep=keep)
    read = compressed.decode(compressed.pack(dict(header, unsure_entropy_bits=1.0), blobs))
    assert "gate" not in header["network"]
    # each gated layer keeps at most its gates left on (one, putting out 0, where none is)
    narrow = [out[0] for _, _, out in parse_network(header["network"], features,
                                                      classes).linear_layers()]
    layer, gate = -1, iter(gates)
    for kind, _, _ in network.linear_layers():
        if str(kind) == "gate":
            assert narrow[layer] <= max(1, int(keep[next(gate)].sum()))
        else:
            layer += 1
    assert layer == len(narrow) - 1
    X = rng.uniform(size=(3, features)).astype(np.float32)
    pruned = network(X, [m * k for m, k in zip(mus, keep)], F=compressed.NumPyOperators)
    scale = np.abs(pruned).max() + 1
    np.testing.assert_allclose(read.logits(X), pruned, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_array_equal(read.predict(X), model.predict(X))
    assert report["kept_after_pruning"] == sum(int(k.sum()) for k in keep)
    if sigma_bits:
        np.testing.assert_array_equal(read.predict(X, 3, seed=1), model.predict(X, 3, seed=1))
    # what training reports of the rule's network each epoch is what the file holds, and
    # leaves the means it reads as they were
    pruned = [m * k for m, k in zip(mus, keep)]
    copies = [p.copy() for p in pruned]
    units, multiply_adds = units_left(network, pruned)
    assert units == narrow
    assert units == [b - r for b, r in zip(report["units_before"], report["units_removed"])]
    assert multiply_adds == read.network.multiply_adds() == report["multiply_adds_after"]
    for p, c in zip(pruned, copies):
        np.testing.assert_array_equal(p, c)


@given(networks(), SEEDS)
def test_a_gated_networks_best_units_compute_what_it_does_with_the_rest_switched_off(
        description, seed):
    """``init_best_units``'s start: each gated layer cut to the units whose gates have the
    highest |mu| / sigma computes what the wide network does with the other gates at 0."""
    from hypothesis import assume
    from gluon_bbb.shipping.writer import best_gated_units, keep_gated_units
    description, features, classes = description
    network = parse_network(description, features, classes).without_dropout()
    gates = network.gate_positions()
    assume(gates)
    rng = np.random.default_rng(seed)
    shapes = network.param_shapes()
    mus = [(rng.normal(size=s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1))
           .astype(np.float32) for s in shapes]
    sigmas = [np.exp(rng.normal(-1, 1, size=s)).astype(np.float32) for s in shapes]
    counts = [int(rng.integers(1, shapes[i][0] + 1)) for i in gates]
    kept = best_gated_units(network, mus, sigmas, counts)
    wide = [m.copy() for m in mus]
    for position, count, units in zip(gates, counts, kept):
        snr = np.abs(mus[position]) / sigmas[position]
        threshold = np.sort(snr)[::-1][count - 1]
        assert len(units) == count and (np.diff(units) > 0).all()
        assert (snr[units] >= threshold).all() and (np.delete(snr, units) <= threshold).all()
        off = np.ones(snr.size, dtype=bool)
        off[units] = False
        wide[position][off] = 0.0
    # the narrower network's description: each gated layer's units the count kept
    tokens, left = description.split(","), iter(counts)
    for i, token in enumerate(tokens[:-1]):
        if tokens[i + 1] == "gate":
            kind, _, rest = token.partition(":")
            tokens[i] = ":".join([kind, str(next(left))] + rest.split(":")[1:])
    narrow_network = parse_network(",".join(tokens), features, classes).without_dropout()
    before = [m.copy() for m in mus]
    narrow = keep_gated_units(network, mus, kept)
    assert [m.shape for m in narrow] == [tuple(s) for s in narrow_network.param_shapes()]
    X = rng.uniform(size=(3, features)).astype(np.float32)
    expected = network(X, wide, F=compressed.NumPyOperators)
    np.testing.assert_allclose(narrow_network(X, narrow, F=compressed.NumPyOperators), expected,
                               rtol=1e-4, atol=1e-5 * (np.abs(expected).max() + 1))
    for mu, copy in zip(mus, before):
        np.testing.assert_array_equal(mu, copy)  # the means given are left as they were
