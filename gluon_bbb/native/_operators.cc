/* MXNet operators of the C accelerator, for the network graphs the native backend runs.
 *
 * A library of MXNet's extension API (lib_api.h, shipped with MXNet), loaded by
 * gluon_bbb/native/operators.py with mx.library.load, which registers the operators below as
 * mx.nd.* and mx.sym.* operators that a CachedOp graph takes like MXNet's own:
 *
 *   bbb_lrt_output(mean, variance, noise, floor): mean + sqrt(variance + floor) * noise, the
 *       last step of the local reparametrization (networks/layers.py's local_reparametrization,
 *       the one formula it accelerates), in one pass forward and one backward (MXNet 1.9.1's
 *       sqrt is a scalar loop: docs/DESIGN.md).
 *   bbb_signed(x, noise): x times the signs of noise (+1, -1, or 0 at 0, as MXNet's sign),
 *       broadcast over the axes where noise has size 1, which follow those where it has x's
 *       size: Flipout's random signs per example and unit or channel (networks/layers.py's
 *       flipout). Its gradient is the same product for x and 0 for noise (MXNet 1.9.1's
 *       broadcast_mul also reduces the product into the signs' shape, a gradient nothing uses).
 *   bbb_lrt_convolution(h, W_mu, b_mu, W_sigma, b_sigma, noise; floor, input_gradient,
 *       widest) and bbb_flipout_convolution(h, W_mu, b_mu, W_delta, b_delta, noise_in,
 *       noise_out; input_gradient, widest): a convolution layer's local reparametrization and
 *       Flipout (networks/layers.py's local_reparametrization and flipout for Conv2D), forward
 *       and backward, on _conv_tiles.h's register tiles; described where they are defined.
 *   bbb_scaled(x, factors): x times factors broadcast over x's trailing axes where factors has
 *       size 1 (a gate drawn per example: networks/layers.py's Gate.perturbed), forward and
 *       backward.
 *   bbb_max_pool(x; size, relu): max pooling over size x size windows at stride size, and the
 *       ReLU after it where relu is 1 (networks/layers.py's MaxPool2D and ReLU), forward and
 *       backward.
 *
 * float32 on CPU contexts only. Compiled with -ffast-math (vectorized sqrtf) like _fused.c.
 */
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "_conv_tiles.h"
#include "lib_api.h"

using namespace mxnet::ext;

/* operators.py refuses a library whose version differs from its own ABI_VERSION: raise both
 * whenever an operator's inputs, attributes or meaning change. */
#define OPERATORS_ABI_VERSION 5

extern "C" int bbb_operators_abi_version(void) { return OPERATORS_ABI_VERSION; }

namespace {

typedef std::unordered_map<std::string, std::string> Attributes;
typedef std::vector<std::vector<unsigned int> > Shapes;

MXReturnValue has_attributes(const char *op, const Attributes &attributes,
                             std::initializer_list<const char *> names) {
    for (const char *name : names)
        if (attributes.count(name) == 0) {
            MX_ERROR_MSG << op << " takes the attribute " << name;
            return MX_FAIL;
        }
    return MX_SUCCESS;
}
/* the operators take and give float32 arrays only (each operator's type function, as
 * FLOAT32_ONLY("bbb_name") where it is registered) */
MXReturnValue float32_only(const char *op, const std::vector<int> &in_types,
                           std::vector<int> *out_types) {
    for (int type : in_types)
        if (type != kFloat32) {
            MX_ERROR_MSG << op << " takes float32 arrays";
            return MX_FAIL;
        }
    for (int &type : *out_types) type = kFloat32;
    return MX_SUCCESS;
}

#define FLOAT32_ONLY(op)                                                                 \
    [](const Attributes &, std::vector<int> *in_types, std::vector<int> *out_types) {    \
        return float32_only(op, *in_types, out_types);                                   \
    }

MXReturnValue lrt_output_attributes(const Attributes &attributes, int *inputs, int *outputs) {
    *inputs = 3;
    *outputs = 1;
    return has_attributes("bbb_lrt_output", attributes, {"floor"});
}

MXReturnValue lrt_output_shape(const Attributes &, Shapes *in_shapes, Shapes *out_shapes) {
    if ((*in_shapes)[1] != (*in_shapes)[0] || (*in_shapes)[2] != (*in_shapes)[0]) {
        MX_ERROR_MSG << "bbb_lrt_output takes mean, variance and noise of one shape";
        return MX_FAIL;
    }
    (*out_shapes)[0] = (*in_shapes)[0];
    return MX_SUCCESS;
}

float floor_of(const Attributes &attributes) {
    return std::strtof(attributes.at("floor").c_str(), nullptr);
}

/* out = mean + sqrt(variance + floor) * noise */
MXReturnValue lrt_output_forward(const Attributes &attributes, std::vector<MXTensor> *inputs,
                                 std::vector<MXTensor> *outputs, const OpResource &) {
    const float *mean = (*inputs)[0].data<float>(), *variance = (*inputs)[1].data<float>();
    const float *noise = (*inputs)[2].data<float>();
    float *out = (*outputs)[0].data<float>();
    const float floor = floor_of(attributes);
    const int64_t n = (*inputs)[0].size();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = mean[i] + sqrtf(variance[i] + floor) * noise[i];
    return MX_SUCCESS;
}

/* MXNet hands the backward pass the output's gradient g, then the forward inputs (mean,
 * variance, noise) and output: d/dmean = g, d/dvariance = g noise / (2 sqrt(variance + floor)),
 * d/dnoise = g sqrt(variance + floor). */
MXReturnValue lrt_output_backward(const Attributes &attributes, std::vector<MXTensor> *inputs,
                                  std::vector<MXTensor> *outputs, const OpResource &) {
    const float *g = (*inputs)[0].data<float>(), *variance = (*inputs)[2].data<float>();
    const float *noise = (*inputs)[3].data<float>();
    float *d_mean = (*outputs)[0].data<float>(), *d_variance = (*outputs)[1].data<float>();
    float *d_noise = (*outputs)[2].data<float>();
    const float floor = floor_of(attributes);
    const int64_t n = (*inputs)[0].size();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float spread = sqrtf(variance[i] + floor);
        d_mean[i] = g[i];
        d_variance[i] = g[i] * noise[i] * (0.5f / spread);
        d_noise[i] = g[i] * spread;
    }
    return MX_SUCCESS;
}

MXReturnValue signed_attributes(const Attributes &, int *inputs, int *outputs) {
    *inputs = 2;
    *outputs = 1;
    return MX_SUCCESS;
}

/* (outer, inner): noise's size, and the product of x's axes where noise has size 1; -1 where
 * noise's shape is not x's with trailing axes of size 1 (and inner 1: the same shape) */
std::pair<int64_t, int64_t> signed_blocks(const std::vector<unsigned int> &x,
                                          const std::vector<unsigned int> &noise) {
    if (x.size() != noise.size())
        return {-1, -1};
    int64_t outer = 1, inner = 1;
    bool trailing = false;
    for (size_t axis = 0; axis < x.size(); ++axis) {
        if (noise[axis] == x[axis] && !trailing) {
            outer *= x[axis];
        } else if (noise[axis] == 1) {
            trailing = true;
            inner *= x[axis];
        } else {
            return {-1, -1};
        }
    }
    return {outer, inner};
}

/* x's shape, where the second input (named `second`) has x's shape with trailing axes of
 * size 1: bbb_signed's and bbb_scaled's */
MXReturnValue blocks_shape(const char *op, const char *second, const Shapes &in_shapes,
                           Shapes *out_shapes) {
    if (signed_blocks(in_shapes[0], in_shapes[1]).first < 0) {
        MX_ERROR_MSG << op << " takes " << second << " of x's shape with trailing axes of size 1";
        return MX_FAIL;
    }
    (*out_shapes)[0] = in_shapes[0];
    return MX_SUCCESS;
}

MXReturnValue signed_shape(const Attributes &, Shapes *in_shapes, Shapes *out_shapes) {
    return blocks_shape("bbb_signed", "noise", *in_shapes, out_shapes);
}

std::vector<unsigned int> shape_of(const MXTensor &tensor) {
    return std::vector<unsigned int>(tensor.shape.begin(), tensor.shape.end());
}

inline float sign_of(float value) {
    return value > 0.0f ? 1.0f : (value < 0.0f ? -1.0f : 0.0f);
}

/* out = x times a factor a block: block o of inner entries times factor_of(o) */
template <typename Factor>
void blockwise_product(const float *x, Factor factor_of, int64_t outer, int64_t inner,
                       float *out) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
        const float f = factor_of(o);
        const float *xo = x + o * inner;
        float *yo = out + o * inner;
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) yo[i] = xo[i] * f;
    }
}

/* out = x * sign(noise), block o of inner entries times sign(noise[o]) */
void signed_product(const float *x, const float *noise, int64_t outer, int64_t inner,
                    float *out) {
    blockwise_product(x, [noise](int64_t o) { return sign_of(noise[o]); }, outer, inner, out);
}

MXReturnValue signed_forward(const Attributes &, std::vector<MXTensor> *inputs,
                             std::vector<MXTensor> *outputs, const OpResource &) {
    auto blocks = signed_blocks(shape_of((*inputs)[0]), shape_of((*inputs)[1]));
    signed_product((*inputs)[0].data<float>(), (*inputs)[1].data<float>(), blocks.first,
                   blocks.second, (*outputs)[0].data<float>());
    return MX_SUCCESS;
}

/* inputs: the output's gradient g, then x, noise and the output; d/dx = g * sign(noise),
 * d/dnoise = 0 (sign's derivative) */
MXReturnValue signed_backward(const Attributes &, std::vector<MXTensor> *inputs,
                              std::vector<MXTensor> *outputs, const OpResource &) {
    auto blocks = signed_blocks(shape_of((*inputs)[1]), shape_of((*inputs)[2]));
    signed_product((*inputs)[0].data<float>(), (*inputs)[2].data<float>(), blocks.first,
                   blocks.second, (*outputs)[0].data<float>());
    float *d_noise = (*outputs)[1].data<float>();
    for (int64_t o = 0; o < blocks.first; ++o) d_noise[o] = 0.0f;
    return MX_SUCCESS;
}

/* What a convolution layer's operators share: their shapes' check, the sizes of a call, the
 * images split among the threads with a buffer each, the patches and their gradient. */

/* The output's shape (N, OC, H - K + 1, W - K + 1) of h (N, C, H, W) and two pairs of kernels
 * (OC, C, K, K) and biases (OC,), the first four inputs after h; empty where they do not fit */
std::vector<unsigned int> convolution_output(const Shapes &in) {
    bool fits = in[0].size() == 4 && in[1].size() == 4 && in[1][1] == in[0][1]
                && in[1][2] == in[1][3] && in[1][2] <= in[0][2] && in[1][3] <= in[0][3]
                && in[3] == in[1] && in[2] == std::vector<unsigned int>{in[1][0]}
                && in[4] == in[2];
    if (!fits) return {};
    return {in[0][0], in[1][0], in[0][2] - in[1][2] + 1, in[0][3] - in[1][3] + 1};
}

/* The sizes of one call: h (N, C, H, W), kernels (OC, C, K, K), outputs (N, OC, OH, OW) */
struct ConvolutionSizes {
    int64_t N, C, H, W, OC, K, OH, OW;
    explicit ConvolutionSizes(const std::vector<MXTensor> &inputs, int h, int weights)
        : N(inputs[h].shape[0]), C(inputs[h].shape[1]), H(inputs[h].shape[2]),
          W(inputs[h].shape[3]), OC(inputs[weights].shape[0]), K(inputs[weights].shape[2]),
          OH(H - K + 1), OW(W - K + 1) {}
    int64_t terms() const { return C * K * K; }
    int64_t positions() const { return OH * OW; }
    int64_t image() const { return C * H * W; }
};

/* The images of a call split among the threads (static schedule), each thread with a buffer
 * of its own, zeroed; the buffers are kept, in thread order, for the caller's sums. */
class ThreadBuffers {
  public:
    explicit ThreadBuffers(int64_t floats)
        : floats_(floats), buffers_(omp_get_max_threads(), nullptr) {}
    ~ThreadBuffers() {
        for (float *buffer : buffers_) free(buffer);
    }
    /* body(buffer, n) for each image n; false where memory ran out */
    template <typename Body>
    bool for_each_image(int64_t N, Body body) {
        int failed = 0;
#pragma omp parallel reduction(| : failed)
        {
            float *buffer = static_cast<float *>(calloc((size_t)floats_, sizeof(float)));
            failed = buffer == nullptr;
            buffers_[omp_get_thread_num()] = buffer;
#pragma omp for schedule(static)
            for (int64_t n = 0; n < N; ++n)
                if (buffer) body(buffer, n);
        }
        return !failed;
    }
    /* out (rows, length) = the threads' sums, in thread order, of the rows `stride` floats
     * apart from `at` in their buffers */
    void add_up(int64_t at, int64_t rows, int64_t length, int64_t stride, float *out) const {
        for (int64_t i = 0; i < rows * length; ++i) out[i] = 0.0f;
        for (const float *buffer : buffers_)
            if (buffer)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < length; ++k)
                        out[r * length + k] += buffer[at + r * stride + k];
    }

  private:
    int64_t floats_;
    std::vector<float *> buffers_;
};

MXReturnValue out_of_memory(const char *op) {
    MX_ERROR_MSG << op << ": no memory for an image's patches";
    return MX_FAIL;
}

std::vector<float> squared(const float *x, int64_t n) {
    std::vector<float> out(x, x + n);
    for (float &v : out) v *= v;
    return out;
}

/* a (rows, columns) transposed into out (columns, rows) */
void transpose(const float *a, int64_t rows, int64_t columns, float *out) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < columns; ++c) out[c * rows + r] = a[r * columns + c];
}

std::vector<float> transposed(const float *a, int64_t rows, int64_t columns) {
    std::vector<float> out(rows * columns);
    transpose(a, rows, columns, out.data());
    return out;
}

/* An image's patches as (positions, columns): row p holds the C K K inputs under the kernel
 * at output position p, zeros past them; and their squares where squares_t is given. Taken
 * from the image rather than by transposing its patches (C K K, positions), whose rows are a
 * power of two floats apart in the LeNet: writing down their columns took most of the
 * backward pass. */
void patches_transposed(const ConvolutionSizes &z, int64_t columns, const float *image,
                        float *patches_t, float *squares_t) {
    for (int64_t oy = 0; oy < z.OH; ++oy)
        for (int64_t ox = 0; ox < z.OW; ++ox) {
            float *row = patches_t + (oy * z.OW + ox) * columns;
            float *square = squares_t ? squares_t + (oy * z.OW + ox) * columns : nullptr;
            for (int64_t c = 0; c < z.C; ++c)
                for (int64_t ky = 0; ky < z.K; ++ky) {
                    const float *from = image + (c * z.H + oy + ky) * z.W + ox;
                    const int64_t at = (c * z.K + ky) * z.K;
                    for (int64_t kx = 0; kx < z.K; ++kx) row[at + kx] = from[kx];
                    if (squares_t)
                        for (int64_t kx = 0; kx < z.K; ++kx)
                            square[at + kx] = from[kx] * from[kx];
                }
        }
}

/* The gradient of an image (C, H, W) from that of its patches (C K K, positions): col, plus,
 * where col_var (the squared patches' gradient) is given, 2 input col_var, input the image
 * itself (a patch entry is the input value at the place its gradient goes) */
void col_to_image(const ConvolutionSizes &z, int64_t positions, const float *col,
                  const float *col_var, const float *input, float *image) {
    memset(image, 0, sizeof(float) * z.image());
    for (int64_t c = 0; c < z.C; ++c)
        for (int64_t ky = 0; ky < z.K; ++ky)
            for (int64_t kx = 0; kx < z.K; ++kx) {
                const int64_t row = ((c * z.K + ky) * z.K + kx) * positions;
                for (int64_t oy = 0; oy < z.OH; ++oy) {
                    const int64_t at = (c * z.H + oy + ky) * z.W + kx, from = row + oy * z.OW;
                    float *to = image + at;
                    if (col_var) {
#pragma omp simd
                        for (int64_t ox = 0; ox < z.OW; ++ox)
                            to[ox] += col[from + ox]
                                      + 2.0f * input[at + ox] * col_var[from + ox];
                    } else {
#pragma omp simd
                        for (int64_t ox = 0; ox < z.OW; ++ox) to[ox] += col[from + ox];
                    }
                }
            }
}

int64_t widest_of(const Attributes &attributes) {
    return std::strtol(attributes.at("widest").c_str(), nullptr, 10);
}

bool input_gradient_of(const Attributes &attributes) {
    return attributes.at("input_gradient") != "0";
}

/* bbb_lrt_convolution(h, W_mu, b_mu, W_sigma, b_sigma, noise; floor, input_gradient, widest):
 * the local reparametrization of a convolution layer (stride 1, no padding) in one operator,
 * (out, spread) with spread = sqrt(conv(h^2, W_sigma^2) + b_sigma^2 + floor) and out =
 * conv(h, W_mu) + b_mu + spread * noise. */
MXReturnValue lrt_convolution_attributes(const Attributes &attributes, int *inputs,
                                         int *outputs) {
    *inputs = 6;
    *outputs = 2;
    return has_attributes("bbb_lrt_convolution", attributes,
                          {"floor", "input_gradient", "widest"});
}

MXReturnValue lrt_convolution_shape(const Attributes &, Shapes *in_shapes, Shapes *out_shapes) {
    std::vector<unsigned int> out = convolution_output(*in_shapes);
    if (out.empty() || (*in_shapes)[5] != out) {
        MX_ERROR_MSG << "bbb_lrt_convolution takes h (N, C, H, W), W_mu and W_sigma (OC, C, K, K),"
                        " b_mu and b_sigma (OC,), noise (N, OC, H - K + 1, W - K + 1)";
        return MX_FAIL;
    }
    (*out_shapes)[0] = (*out_shapes)[1] = out;
    return MX_SUCCESS;
}

/* Each image: its patches P and their squares, the two products with W_mu and W_sigma^2
 * (_conv_tiles.h), then the output's formula position by position. */
MXReturnValue lrt_convolution_forward(const Attributes &attributes,
                                      std::vector<MXTensor> *inputs,
                                      std::vector<MXTensor> *outputs, const OpResource &) {
    const ConvolutionSizes z(*inputs, 0, 1);
    const conv_kernels kernels = conv_kernels_for(widest_of(attributes));
    const float *h = (*inputs)[0].data<float>(), *w_mu = (*inputs)[1].data<float>();
    const float *b_mu = (*inputs)[2].data<float>(), *noise = (*inputs)[5].data<float>();
    float *out = (*outputs)[0].data<float>(), *spread = (*outputs)[1].data<float>();
    const std::vector<float> w_var = squared((*inputs)[3].data<float>(), z.OC * z.terms());
    const std::vector<float> b_var = squared((*inputs)[4].data<float>(), z.OC);
    const float floor = floor_of(attributes);
    const int64_t terms = z.terms(), n_out = z.positions();
    const int64_t positions = conv_padded(n_out, kernels.width);
    ThreadBuffers buffers(2 * (terms + z.OC) * positions);
    bool done = buffers.for_each_image(z.N, [&](float *patches, int64_t n) {
        float *squares = patches + terms * positions, *mean = squares + terms * positions;
        float *variance = mean + z.OC * positions;
        kernels.patches(z.C, z.H, z.W, z.K, z.OH, z.OW, positions, h + n * z.image(), patches);
        for (int64_t i = 0; i < terms * positions; ++i) squares[i] = patches[i] * patches[i];
        conv_gemm(&kernels, z.OC, positions, terms, w_mu, terms, b_mu, 0, patches, positions,
                  mean, positions);
        conv_gemm(&kernels, z.OC, positions, terms, w_var.data(), terms, b_var.data(), 0,
                  squares, positions, variance, positions);
        for (int64_t oc = 0; oc < z.OC; ++oc) {
            const int64_t at = (n * z.OC + oc) * n_out;
#pragma omp simd
            for (int64_t p = 0; p < n_out; ++p) {
                const float s = sqrtf(variance[oc * positions + p] + floor);
                spread[at + p] = s;
                out[at + p] = mean[oc * positions + p] + s * noise[at + p];
            }
        }
    });
    return done ? MX_SUCCESS : out_of_memory("bbb_lrt_convolution");
}

/* MXNet hands the backward pass the outputs' gradients (g of out, g_s of spread), the inputs
 * (h, W_mu, b_mu, W_sigma, b_sigma, noise) and the outputs (out, spread). With d_mean = g and
 * d_var = (g noise + g_s) / (2 spread), each image's patches P give
 *     dW_mu += d_mean P^T,  d(W_sigma^2) += d_var (P^2)^T    (sums over positions)
 *     d_h = col2im(W_mu^T d_mean) + 2 h col2im((W_sigma^2)^T d_var)  (input_gradient 1)
 *     d_noise = g spread,  db_mu = sum d_mean,  d(b_sigma^2) = sum d_var,
 * then dW_sigma = 2 W_sigma d(W_sigma^2) and db_sigma alike. Each thread sums its images'
 * terms of the kernels' gradients apart; the threads' sums are added in thread order. */
MXReturnValue lrt_convolution_backward(const Attributes &attributes,
                                       std::vector<MXTensor> *inputs,
                                       std::vector<MXTensor> *outputs, const OpResource &) {
    const ConvolutionSizes z(*inputs, 2, 3);
    const conv_kernels kernels = conv_kernels_for(widest_of(attributes));
    const float *g = (*inputs)[0].data<float>(), *g_spread = (*inputs)[1].data<float>();
    const float *h = (*inputs)[2].data<float>(), *w_mu = (*inputs)[3].data<float>();
    const float *w_sigma = (*inputs)[5].data<float>(), *b_sigma = (*inputs)[6].data<float>();
    const float *noise = (*inputs)[7].data<float>(), *spread = (*inputs)[9].data<float>();
    float *d_h = (*outputs)[0].data<float>(), *d_noise = (*outputs)[5].data<float>();
    const bool input_gradient = input_gradient_of(attributes);
    const int64_t terms = z.terms(), n_out = z.positions(), OC = z.OC;
    const int64_t positions = conv_padded(n_out, kernels.width);
    const int64_t columns = conv_padded(terms, kernels.width);  /* of the kernels' gradients */
    const std::vector<float> w_mu_t = transposed(w_mu, OC, terms);
    const std::vector<float> w_var_t = transposed(squared(w_sigma, OC * terms).data(), OC, terms);
    /* a thread's buffer: an image's work, then its sums dW_mu, d(W_sigma^2) (OC, columns),
     * db_mu, d(b_sigma^2) (OC) */
    const int64_t sums = 2 * terms * positions + 2 * positions * columns + 2 * OC * positions;
    ThreadBuffers buffers(sums + 2 * OC * columns + 2 * OC);
    if (!input_gradient) memset(d_h, 0, sizeof(float) * z.N * z.image());
    bool done = buffers.for_each_image(z.N, [&](float *col, int64_t n) {
        float *col_var = col + terms * positions, *patches_t = col_var + terms * positions;
        float *squares_t = patches_t + positions * columns;
        float *d_mean = squares_t + positions * columns, *d_var = d_mean + OC * positions;
        float *my_w_mu = col + sums, *my_w_var = my_w_mu + OC * columns;
        float *my_b_mu = my_w_var + OC * columns, *my_b_var = my_b_mu + OC;
        const float *image = h + n * z.image();
        patches_transposed(z, columns, image, patches_t, squares_t);
        for (int64_t oc = 0; oc < OC; ++oc) {
            const int64_t at = (n * OC + oc) * n_out;
            float *dm = d_mean + oc * positions, *dv = d_var + oc * positions;
            float sum_mean = 0.0f, sum_var = 0.0f;
#pragma omp simd reduction(+ : sum_mean, sum_var)
            for (int64_t p = 0; p < n_out; ++p) {
                const float s = spread[at + p];
                dm[p] = g[at + p];
                dv[p] = (g[at + p] * noise[at + p] + g_spread[at + p]) * (0.5f / s);
                d_noise[at + p] = g[at + p] * s;
                sum_mean += dm[p];
                sum_var += dv[p];
            }
            my_b_mu[oc] += sum_mean;
            my_b_var[oc] += sum_var;
        }
        conv_gemm(&kernels, OC, columns, n_out, d_mean, positions, nullptr, 1, patches_t,
                  columns, my_w_mu, columns);
        conv_gemm(&kernels, OC, columns, n_out, d_var, positions, nullptr, 1, squares_t,
                  columns, my_w_var, columns);
        if (!input_gradient) return;
        conv_gemm(&kernels, terms, positions, OC, w_mu_t.data(), OC, nullptr, 0, d_mean,
                  positions, col, positions);
        conv_gemm(&kernels, terms, positions, OC, w_var_t.data(), OC, nullptr, 0, d_var,
                  positions, col_var, positions);
        col_to_image(z, positions, col, col_var, image, d_h + n * z.image());
    });
    if (!done) return out_of_memory("bbb_lrt_convolution");
    float *d_w_mu = (*outputs)[1].data<float>(), *d_b_mu = (*outputs)[2].data<float>();
    float *d_w_sigma = (*outputs)[3].data<float>(), *d_b_sigma = (*outputs)[4].data<float>();
    buffers.add_up(sums, OC, terms, columns, d_w_mu);
    buffers.add_up(sums + OC * columns, OC, terms, columns, d_w_sigma);
    buffers.add_up(sums + 2 * OC * columns, 1, OC, 0, d_b_mu);
    buffers.add_up(sums + 2 * OC * columns + OC, 1, OC, 0, d_b_sigma);
    for (int64_t i = 0; i < OC * terms; ++i) d_w_sigma[i] *= 2.0f * w_sigma[i];
    for (int64_t oc = 0; oc < OC; ++oc) d_b_sigma[oc] *= 2.0f * b_sigma[oc];
    return MX_SUCCESS;
}

/* bbb_flipout_convolution(h, W_mu, b_mu, W_delta, b_delta, noise_in, noise_out;
 * input_gradient, widest): a convolution layer's Flipout in one operator, conv(h, W_mu) + b_mu
 * + (conv(h s, W_delta) + b_delta) r, s and r the signs of noise_in (N, C, 1, 1) and noise_out
 * (N, OC, 1, 1). Image n's signs make it one convolution with the image's own kernels W_mu +
 * r s W_delta (r over the output channels, s over the input channels) and bias b_mu + r
 * b_delta: one matrix product each way where the two convolutions take two. */
MXReturnValue flipout_convolution_attributes(const Attributes &attributes, int *inputs,
                                             int *outputs) {
    *inputs = 7;
    *outputs = 1;
    return has_attributes("bbb_flipout_convolution", attributes, {"input_gradient", "widest"});
}

MXReturnValue flipout_convolution_shape(const Attributes &, Shapes *in_shapes,
                                        Shapes *out_shapes) {
    const Shapes &in = *in_shapes;
    std::vector<unsigned int> out = convolution_output(in);
    if (out.empty() || in[5] != std::vector<unsigned int>{out[0], in[0][1], 1, 1}
        || in[6] != std::vector<unsigned int>{out[0], out[1], 1, 1}) {
        MX_ERROR_MSG << "bbb_flipout_convolution takes h (N, C, H, W), W_mu and W_delta (OC, C, K,"
                        " K), b_mu and b_delta (OC,), noise_in (N, C, 1, 1), noise_out (N, OC, 1,"
                        " 1)";
        return MX_FAIL;
    }
    (*out_shapes)[0] = out;
    return MX_SUCCESS;
}

/* Image n's kernels W_mu + r s W_delta into w (OC, C K K) and bias b_mu + r b_delta, the
 * inputs from W_mu on */
void flipout_kernels(const ConvolutionSizes &z, int64_t n, MXTensor *from, float *w,
                     float *bias) {
    const float *w_mu = from[0].data<float>(), *b_mu = from[1].data<float>();
    const float *w_delta = from[2].data<float>(), *b_delta = from[3].data<float>();
    const float *noise_in = from[4].data<float>(), *noise_out = from[5].data<float>();
    const int64_t KK = z.K * z.K;
    for (int64_t oc = 0; oc < z.OC; ++oc) {
        const float r = sign_of(noise_out[n * z.OC + oc]);
        bias[oc] = b_mu[oc] + r * b_delta[oc];
        for (int64_t c = 0; c < z.C; ++c) {
            const float rs = r * sign_of(noise_in[n * z.C + c]);
            const int64_t at = (oc * z.C + c) * KK;
            for (int64_t k = 0; k < KK; ++k) w[at + k] = w_mu[at + k] + rs * w_delta[at + k];
        }
    }
}

MXReturnValue flipout_convolution_forward(const Attributes &attributes,
                                          std::vector<MXTensor> *inputs,
                                          std::vector<MXTensor> *outputs, const OpResource &) {
    const ConvolutionSizes z(*inputs, 0, 1);
    const conv_kernels kernels = conv_kernels_for(widest_of(attributes));
    const float *h = (*inputs)[0].data<float>();
    float *out = (*outputs)[0].data<float>();
    const int64_t terms = z.terms(), n_out = z.positions(), OC = z.OC;
    const int64_t positions = conv_padded(n_out, kernels.width);
    ThreadBuffers buffers((terms + OC) * positions + OC * terms + OC);
    bool done = buffers.for_each_image(z.N, [&](float *patches, int64_t n) {
        float *conv = patches + terms * positions, *w = conv + OC * positions;
        float *bias = w + OC * terms;
        kernels.patches(z.C, z.H, z.W, z.K, z.OH, z.OW, positions, h + n * z.image(), patches);
        flipout_kernels(z, n, &(*inputs)[1], w, bias);
        conv_gemm(&kernels, OC, positions, terms, w, terms, bias, 0, patches, positions, conv,
                  positions);
        for (int64_t oc = 0; oc < OC; ++oc)
            memcpy(out + (n * OC + oc) * n_out, conv + oc * positions, sizeof(float) * n_out);
    });
    return done ? MX_SUCCESS : out_of_memory("bbb_flipout_convolution");
}

/* Inputs: g, then h, W_mu, b_mu, W_delta, b_delta, noise_in, noise_out, then out. With image
 * n's product G = g P^T (OC, C K K) and kernels w_n = W_mu + r s W_delta:
 *     dW_mu = sum_n G,  dW_delta = sum_n r s G,  db_mu = sum g,  db_delta = sum r g,
 *     d_h = col2im(w_n^T g),  d_noise_in = d_noise_out = 0 (the signs' derivative).
 * The threads' sums are added in thread order, as bbb_lrt_convolution's. */
MXReturnValue flipout_convolution_backward(const Attributes &attributes,
                                           std::vector<MXTensor> *inputs,
                                           std::vector<MXTensor> *outputs, const OpResource &) {
    const ConvolutionSizes z(*inputs, 1, 2);
    const conv_kernels kernels = conv_kernels_for(widest_of(attributes));
    const float *g = (*inputs)[0].data<float>(), *h = (*inputs)[1].data<float>();
    const float *noise_in = (*inputs)[6].data<float>(), *noise_out = (*inputs)[7].data<float>();
    float *d_h = (*outputs)[0].data<float>();
    const bool input_gradient = input_gradient_of(attributes);
    const int64_t terms = z.terms(), n_out = z.positions(), OC = z.OC, KK = z.K * z.K;
    const int64_t positions = conv_padded(n_out, kernels.width);
    const int64_t columns = conv_padded(terms, kernels.width);
    /* a thread's buffer: an image's work, then its sums dW_mu, dW_delta (OC, terms), db_mu,
     * db_delta (OC) */
    const int64_t sums = terms * positions + positions * columns + OC * columns
                         + OC * positions + 2 * OC * terms + OC;
    ThreadBuffers buffers(sums + 2 * OC * terms + 2 * OC);
    memset((*outputs)[5].data<float>(), 0, sizeof(float) * z.N * z.C);
    memset((*outputs)[6].data<float>(), 0, sizeof(float) * z.N * OC);
    if (!input_gradient) memset(d_h, 0, sizeof(float) * z.N * z.image());
    bool done = buffers.for_each_image(z.N, [&](float *col, int64_t n) {
        float *patches_t = col + terms * positions, *product = patches_t + positions * columns;
        float *g_image = product + OC * columns, *w = g_image + OC * positions;
        float *w_t = w + OC * terms, *bias = w_t + OC * terms;
        float *my_w_mu = col + sums, *my_w_delta = my_w_mu + OC * terms;
        float *my_b_mu = my_w_delta + OC * terms, *my_b_delta = my_b_mu + OC;
        patches_transposed(z, columns, h + n * z.image(), patches_t, nullptr);
        for (int64_t oc = 0; oc < OC; ++oc) {
            const float *from = g + (n * OC + oc) * n_out;
            const float r = sign_of(noise_out[n * OC + oc]);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t p = 0; p < n_out; ++p) sum += from[p];
            my_b_mu[oc] += sum;
            my_b_delta[oc] += r * sum;
            memcpy(g_image + oc * positions, from, sizeof(float) * n_out);
        }
        conv_gemm(&kernels, OC, columns, n_out, g_image, positions, nullptr, 0, patches_t,
                  columns, product, columns);
        for (int64_t oc = 0; oc < OC; ++oc) {
            const float r = sign_of(noise_out[n * OC + oc]);
            for (int64_t c = 0; c < z.C; ++c) {
                const float rs = r * sign_of(noise_in[n * z.C + c]);
                const float *from = product + oc * columns + c * KK;
                float *mu = my_w_mu + (oc * z.C + c) * KK;
                float *delta = my_w_delta + (oc * z.C + c) * KK;
                for (int64_t k = 0; k < KK; ++k) {
                    mu[k] += from[k];
                    delta[k] += rs * from[k];
                }
            }
        }
        if (!input_gradient) return;
        flipout_kernels(z, n, &(*inputs)[2], w, bias);
        transpose(w, OC, terms, w_t);
        conv_gemm(&kernels, terms, positions, OC, w_t, OC, nullptr, 0, g_image, positions, col,
                  positions);
        col_to_image(z, positions, col, nullptr, nullptr, d_h + n * z.image());
    });
    if (!done) return out_of_memory("bbb_flipout_convolution");
    buffers.add_up(sums, 1, OC * terms, 0, (*outputs)[1].data<float>());
    buffers.add_up(sums + OC * terms, 1, OC * terms, 0, (*outputs)[3].data<float>());
    buffers.add_up(sums + 2 * OC * terms, 1, OC, 0, (*outputs)[2].data<float>());
    buffers.add_up(sums + 2 * OC * terms + OC, 1, OC, 0, (*outputs)[4].data<float>());
    return MX_SUCCESS;
}

/* bbb_max_pool(x; size, relu): max pooling over size x size windows at stride size (MXNet's
 * Pooling with pool_type max and the "valid" convention: floor(H / size) by floor(W / size)
 * outputs), then max(0, .) where relu is 1 (the ReLU a Network computes after the pooling:
 * networks/layers.py's MaxPool2D and ReLU, the formulas it accelerates; docs/DESIGN.md times it
 * against MXNet 1.9.1's oneDNN pooling). */
MXReturnValue max_pool_attributes(const Attributes &attributes, int *inputs, int *outputs) {
    *inputs = 1;
    *outputs = 1;
    return has_attributes("bbb_max_pool", attributes, {"size", "relu"});
}

int64_t size_of(const Attributes &attributes) {
    return std::strtol(attributes.at("size").c_str(), nullptr, 10);
}

MXReturnValue max_pool_shape(const Attributes &attributes, Shapes *in_shapes,
                             Shapes *out_shapes) {
    const std::vector<unsigned int> &x = (*in_shapes)[0];
    const int64_t size = size_of(attributes);
    if (x.size() != 4 || size < 1 || x[2] < size || x[3] < size) {
        MX_ERROR_MSG << "bbb_max_pool takes x (N, C, H, W) with H and W at least size >= 1";
        return MX_FAIL;
    }
    (*out_shapes)[0] = {x[0], x[1], (unsigned int)(x[2] / size), (unsigned int)(x[3] / size)};
    return MX_SUCCESS;
}

/* The sizes of a pooling: x (N C planes of H x W), out (planes of OH x OW) */
struct PoolingSizes {
    int64_t planes, H, W, size, OH, OW;
    PoolingSizes(const MXTensor &x, int64_t size)
        : planes(x.shape[0] * x.shape[1]), H(x.shape[2]), W(x.shape[3]), size(size),
          OH(H / size), OW(W / size) {}
    /* the position in plane `from` of the first largest entry of window (oy, ox), row by row,
     * and that entry */
    std::pair<int64_t, float> largest(const float *from, int64_t oy, int64_t ox) const {
        int64_t at = oy * size * W + ox * size;
        float best = from[at];
        for (int64_t dy = 0; dy < size; ++dy)
            for (int64_t dx = 0; dx < size; ++dx) {
                const int64_t here = (oy * size + dy) * W + ox * size + dx;
                if (from[here] > best) {
                    best = from[here];
                    at = here;
                }
            }
        return {at, best};
    }
};

MXReturnValue max_pool_forward(const Attributes &attributes, std::vector<MXTensor> *inputs,
                               std::vector<MXTensor> *outputs, const OpResource &) {
    const PoolingSizes z((*inputs)[0], size_of(attributes));
    const bool relu = attributes.at("relu") != "0";
    const float *x = (*inputs)[0].data<float>();
    float *out = (*outputs)[0].data<float>();
    /* a row of outputs at a time, window entry by window entry: loops over the outputs that
     * the compiler vectorizes (the window's first largest entry is the backward pass's) */
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < z.planes; ++plane) {
        const float *from = x + plane * z.H * z.W;
        float *to = out + plane * z.OH * z.OW;
        for (int64_t oy = 0; oy < z.OH; ++oy) {
            float *row = to + oy * z.OW;
            const float *first = from + oy * z.size * z.W;
#pragma omp simd
            for (int64_t ox = 0; ox < z.OW; ++ox) row[ox] = first[ox * z.size];
            for (int64_t dy = 0; dy < z.size; ++dy)
                for (int64_t dx = 0; dx < z.size; ++dx) {
                    const float *entries = first + dy * z.W + dx;
#pragma omp simd
                    for (int64_t ox = 0; ox < z.OW; ++ox) {
                        const float v = entries[ox * z.size];
                        row[ox] = v > row[ox] ? v : row[ox];
                    }
                }
            if (relu) {
#pragma omp simd
                for (int64_t ox = 0; ox < z.OW; ++ox) row[ox] = row[ox] > 0.0f ? row[ox] : 0.0f;
            }
        }
    }
    return MX_SUCCESS;
}

/* Inputs: g (the output's gradient), x, out. Each window's gradient goes to its first largest
 * entry (the one MXNet's pooling picks), none where relu cut the output to 0. */
MXReturnValue max_pool_backward(const Attributes &attributes, std::vector<MXTensor> *inputs,
                                std::vector<MXTensor> *outputs, const OpResource &) {
    const PoolingSizes z((*inputs)[1], size_of(attributes));
    const bool relu = attributes.at("relu") != "0";
    const float *g = (*inputs)[0].data<float>(), *x = (*inputs)[1].data<float>();
    float *d_x = (*outputs)[0].data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < z.planes; ++plane) {
        const float *from = x + plane * z.H * z.W, *g_plane = g + plane * z.OH * z.OW;
        float *to = d_x + plane * z.H * z.W;
        memset(to, 0, sizeof(float) * z.H * z.W);
        for (int64_t oy = 0; oy < z.OH; ++oy)
            for (int64_t ox = 0; ox < z.OW; ++ox) {
                const std::pair<int64_t, float> best = z.largest(from, oy, ox);
                if (!relu || best.second > 0.0f) to[best.first] = g_plane[oy * z.OW + ox];
            }
    }
    return MX_SUCCESS;
}

/* bbb_scaled(x, factors): x times factors broadcast over the axes where factors has size 1,
 * which follow those where it has x's size (networks/layers.py's Gate.perturbed: a gate drawn
 * per example and unit or channel). Its gradients: g * factors for x, and for each factor the
 * sum of g x over its block, which MXNet 1.9.1's broadcast_mul takes by a slow reduction
 * (docs/DESIGN.md). */
MXReturnValue scaled_shape(const Attributes &, Shapes *in_shapes, Shapes *out_shapes) {
    return blocks_shape("bbb_scaled", "factors", *in_shapes, out_shapes);
}

MXReturnValue scaled_forward(const Attributes &, std::vector<MXTensor> *inputs,
                             std::vector<MXTensor> *outputs, const OpResource &) {
    auto blocks = signed_blocks(shape_of((*inputs)[0]), shape_of((*inputs)[1]));
    const float *factors = (*inputs)[1].data<float>();
    blockwise_product((*inputs)[0].data<float>(), [factors](int64_t o) { return factors[o]; },
                      blocks.first, blocks.second, (*outputs)[0].data<float>());
    return MX_SUCCESS;
}

/* inputs: the output's gradient g, then x, factors and the output */
MXReturnValue scaled_backward(const Attributes &, std::vector<MXTensor> *inputs,
                              std::vector<MXTensor> *outputs, const OpResource &) {
    auto blocks = signed_blocks(shape_of((*inputs)[1]), shape_of((*inputs)[2]));
    const float *g = (*inputs)[0].data<float>(), *x = (*inputs)[1].data<float>();
    const float *factors = (*inputs)[2].data<float>();
    float *d_x = (*outputs)[0].data<float>(), *d_factors = (*outputs)[1].data<float>();
    const int64_t inner = blocks.second;
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < blocks.first; ++o) {
        const float f = factors[o];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < inner; ++i) {
            d_x[o * inner + i] = g[o * inner + i] * f;
            sum += g[o * inner + i] * x[o * inner + i];
        }
        d_factors[o] = sum;
    }
    return MX_SUCCESS;
}

}  // namespace

/* Operator NAME, float32 only, of ATTRIBUTES and the functions PREFIX_shape, PREFIX_forward and
 * PREFIX_backward */
#define BBB_OPERATOR(NAME, ATTRIBUTES, PREFIX)                                               \
    REGISTER_OP(NAME)                                                                        \
        .setParseAttrs(ATTRIBUTES)                                                           \
        .setInferType(FLOAT32_ONLY(#NAME))                                                   \
        .setInferShape(PREFIX##_shape)                                                       \
        .setForward(PREFIX##_forward, "cpu")                                                 \
        .setBackward(PREFIX##_backward, "cpu")

BBB_OPERATOR(bbb_lrt_output, lrt_output_attributes, lrt_output);
BBB_OPERATOR(bbb_lrt_convolution, lrt_convolution_attributes, lrt_convolution);
BBB_OPERATOR(bbb_flipout_convolution, flipout_convolution_attributes, flipout_convolution);
BBB_OPERATOR(bbb_max_pool, max_pool_attributes, max_pool);
BBB_OPERATOR(bbb_scaled, signed_attributes, scaled);
BBB_OPERATOR(bbb_signed, signed_attributes, signed);

/* MXNet 1.9.1's extension API (MX_LIBRARY_VERSION 11), the one this library is built against */
MXReturnValue initialize(int version) {
    if (version != 10901) {
        MX_ERROR_MSG << "gluon_bbb's operators are built for MXNet 1.9.1, not " << version;
        return MX_FAIL;
    }
    return MX_SUCCESS;
}
