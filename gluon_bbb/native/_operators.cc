/* MXNet operators of the C accelerator, for the network graphs the native backend runs.
 *
 * A library of MXNet's extension API (lib_api.h, shipped with MXNet), loaded by
 * gluon_bbb/native/operators.py with mx.library.load, which registers the operators below as
 * mx.nd.* and mx.sym.* operators that a CachedOp graph takes like MXNet's own:
 *
 *   bbb_lrt_output(mean, variance, noise, floor): mean + sqrt(variance + floor) * noise, the
 *       last step of the local reparametrization (networks/layers.py's local_reparametrization,
 *       the one formula it accelerates), in one pass forward and one backward. MXNet 1.9.1's
 *       sqrt takes 6.5 ms over a Bayesian LeNet's first-layer pre-activations (1.5M floats, a
 *       scalar loop) where this pass takes about 1.3.
 *   bbb_signed(x, noise): x times the signs of noise (+1, -1, or 0 at 0, as MXNet's sign),
 *       broadcast over the axes where noise has size 1, which follow those where it has x's
 *       size: Flipout's random signs per example and unit or channel (networks/layers.py's
 *       flipout). Its gradient is the same product for x and 0 for noise. MXNet 1.9.1's
 *       broadcast_mul and its backward pass (which also reduces the product into the signs'
 *       shape) take 28 ms over a LeNet's first-layer outputs.
 *
 * float32 on CPU contexts only. Compiled with -ffast-math (vectorized sqrtf) like _fused.c.
 */
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "lib_api.h"

using namespace mxnet::ext;

/* operators.py refuses a library whose version differs from its own ABI_VERSION: raise both
 * whenever an operator's inputs, attributes or meaning change. */
#define OPERATORS_ABI_VERSION 2

extern "C" int bbb_operators_abi_version(void) { return OPERATORS_ABI_VERSION; }

namespace {

typedef std::unordered_map<std::string, std::string> Attributes;

MXReturnValue lrt_output_attributes(const Attributes &attributes, int *inputs, int *outputs) {
    if (attributes.count("floor") == 0) {
        MX_ERROR_MSG << "bbb_lrt_output takes the attribute floor";
        return MX_FAIL;
    }
    *inputs = 3;
    *outputs = 1;
    return MX_SUCCESS;
}

/* the operators take and give float32 arrays only */
MXReturnValue float32_only(const char *op, const std::vector<int> &in_types,
                           std::vector<int> *out_types) {
    for (int type : in_types)
        if (type != kFloat32) {
            MX_ERROR_MSG << op << " takes float32 arrays";
            return MX_FAIL;
        }
    (*out_types)[0] = kFloat32;
    return MX_SUCCESS;
}

MXReturnValue lrt_output_type(const Attributes &, std::vector<int> *in_types,
                              std::vector<int> *out_types) {
    return float32_only("bbb_lrt_output", *in_types, out_types);
}

MXReturnValue lrt_output_shape(const Attributes &,
                               std::vector<std::vector<unsigned int> > *in_shapes,
                               std::vector<std::vector<unsigned int> > *out_shapes) {
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

MXReturnValue signed_type(const Attributes &, std::vector<int> *in_types,
                          std::vector<int> *out_types) {
    return float32_only("bbb_signed", *in_types, out_types);
}

MXReturnValue signed_shape(const Attributes &,
                           std::vector<std::vector<unsigned int> > *in_shapes,
                           std::vector<std::vector<unsigned int> > *out_shapes) {
    if (signed_blocks((*in_shapes)[0], (*in_shapes)[1]).first < 0) {
        MX_ERROR_MSG << "bbb_signed takes noise of x's shape with trailing axes of size 1";
        return MX_FAIL;
    }
    (*out_shapes)[0] = (*in_shapes)[0];
    return MX_SUCCESS;
}

std::vector<unsigned int> shape_of(const MXTensor &tensor) {
    return std::vector<unsigned int>(tensor.shape.begin(), tensor.shape.end());
}

inline float sign_of(float value) {
    return value > 0.0f ? 1.0f : (value < 0.0f ? -1.0f : 0.0f);
}

/* out = x * sign(noise), block o of inner entries times sign(noise[o]) */
void signed_product(const float *x, const float *noise, int64_t outer, int64_t inner,
                    float *out) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
        const float s = sign_of(noise[o]);
        const float *xo = x + o * inner;
        float *yo = out + o * inner;
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) yo[i] = xo[i] * s;
    }
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

}  // namespace

REGISTER_OP(bbb_lrt_output)
    .setParseAttrs(lrt_output_attributes)
    .setInferType(lrt_output_type)
    .setInferShape(lrt_output_shape)
    .setForward(lrt_output_forward, "cpu")
    .setBackward(lrt_output_backward, "cpu");

REGISTER_OP(bbb_signed)
    .setParseAttrs(signed_attributes)
    .setInferType(signed_type)
    .setInferShape(signed_shape)
    .setForward(signed_forward, "cpu")
    .setBackward(signed_backward, "cpu");

/* MXNet 1.9.1's extension API (MX_LIBRARY_VERSION 11), the one this library is built against */
MXReturnValue initialize(int version) {
    if (version != 10901) {
        MX_ERROR_MSG << "gluon_bbb's operators are built for MXNet 1.9.1, not " << version;
        return MX_FAIL;
    }
    return MX_SUCCESS;
}
