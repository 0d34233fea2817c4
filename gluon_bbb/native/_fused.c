/* Fused CPU kernels for the Bayes-by-Backprop step over flat float32 parameter vectors.
 *
 * Loaded with ctypes by gluon_bbb/native/library.py (no Python API here): the native backend of the
 * training step, for every weight estimator. Two passes per step replace
 * about 40 MXNet elementwise operators, each of which reads and writes every parameter:
 *
 *   bbb_sample_weights: eps ~ N(0, 1) (Philox4x64-10 + Box-Muller), w = mu + softplus(rho) * eps
 *   bbb_perturb:        sigma, sigma * eps and w for given eps (Flipout, local reparametrization,
 *                       and weight sampling under log sigma^2 or with entries removed)
 *   bbb_kl_gradients:   the KL term (Monte Carlo or closed form) and dL/dmu, dL/drho given
 *                       the data term's gradients
 *   bbb_kept:           which entries the prior's rule leaves in the network (sparse
 *                       variational dropout's removal), the others' means set to 0
 *   bbb_sgd_update, bbb_adam_update: MXNet's optimizer updates, in place
 *   bbb_prior_terms:    the prior's log density, its gradient and precision at given weights
 *                       (a MAP model's prior, IVON's)
 *   bbb_ivon_draw, bbb_ivon_update: IVON's draw of the weights and its update from one draw
 *                       (learning/ivon.py), about 30 operators of a step in two passes
 *   bbb_conv_maxpool:   a convolution and the max pooling after it, forward only, in one pass
 *                       over each image (the Monte Carlo predictive of a convolutional network)
 *
 * Normal draws: element i of stream s belongs to chunk c = i / CHUNK; chunk c takes its
 * uniforms from the 64-bit words of Philox4x64-10 blocks with counter (c * BLOCKS_PER_CHUNK + j
 * + 1, s, 0, 0), j = 0, 1, ..., exactly the words NumPy's np.random.Philox(key=key,
 * counter=[c * BLOCKS_PER_CHUNK, s, 0, 0]).random_raw() returns. Each word gives two 24-bit
 * uniforms in (0, 1); noise.philox_normals_reference writes the same mapping in NumPy, and the
 * draws do not depend on the number of threads.
 *
 * Compiled with -ffast-math for vectorized expf/logf (glibc libmvec) but linked without it, so
 * that loading this library does not switch the process to flush-to-zero arithmetic.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_conv_tiles.h"

/* native/library.py refuses a library whose version differs from its own ABI_VERSION: raise both
 * whenever a function's signature or meaning changes. */
#define ABI_VERSION 12
#define CHUNK 8192
#define BLOCKS_PER_CHUNK 1024 /* CHUNK / 2 words per pair of normals / 4 words per block */
#define LOG_SQRT_2PI 0.91893853320467274178f
#define TWO_PI 6.28318530717958647692f

/* The loops over parameters are compiled three times and the loader picks the widest the CPU
 * has: 16 floats a vector (libmvec's _ZGVeN16v_* expf, logf, ...) where it has AVX-512, 8
 * with AVX2; the widths give the same formulas to a few ulps (docs/PERFORMANCE.md times them). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

typedef unsigned __int128 u128;

int bbb_abi_version(void) { return ABI_VERSION; }

/* Random123's Philox4x64 with 10 rounds (Salmon et al. 2011), as NumPy implements it; the round
 * keys of (k0, k1) are made once for all the blocks of a chunk (philox_keys). */
static void philox_keys(uint64_t k0, uint64_t k1, uint64_t keys[20]) {
    for (int round = 0; round < 10; ++round) {
        keys[2 * round] = k0 + (uint64_t)round * 0x9E3779B97F4A7C15ULL;
        keys[2 * round + 1] = k1 + (uint64_t)round * 0xBB67AE8584CAA73BULL;
    }
}

static inline void philox4x64_10(uint64_t c0, uint64_t c1, uint64_t c2, uint64_t c3,
                                 const uint64_t keys[20], uint64_t out[4]) {
    for (int round = 0; round < 10; ++round) {
        u128 p0 = (u128)0xD2E7470EE14C6C93ULL * c0;
        u128 p1 = (u128)0xCA5A826395121157ULL * c2;
        uint64_t hi0 = (uint64_t)(p0 >> 64), lo0 = (uint64_t)p0;
        uint64_t hi1 = (uint64_t)(p1 >> 64), lo1 = (uint64_t)p1;
        c0 = hi1 ^ c1 ^ keys[2 * round];
        c1 = lo1;
        c2 = hi0 ^ c3 ^ keys[2 * round + 1];
        c3 = lo0;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The raw 64-bit words of Philox4x64-10 for counters (first + 1, stream, 0, 0), ... (tests). */
void bbb_philox_words(int64_t count, uint64_t k0, uint64_t k1, uint64_t first,
                      uint64_t stream, uint64_t *words) {
    uint64_t block[4], keys[20];
    philox_keys(k0, k1, keys);
    for (int64_t q = 0; q < count; q += 4) {
        philox4x64_10(first + 1 + (uint64_t)(q / 4), stream, 0, 0, keys, block);
        for (int j = 0; j < 4 && q + j < count; ++j) words[q + j] = block[j];
    }
}

/* exp's argument is kept above -80 (libmvec's expf takes a slow scalar path for lanes that
 * underflow), so sigma bottoms out at softplus(-80) = 1.8e-35 for rho < -80; the same clamp
 * gives sigmoid(rho) = 1.8e-35 there. Both are zero for any purpose of a weight's noise. */
static inline float softplus_and_sigmoid(float rho, float *sigmoid) {
    float e = expf(fmaxf(-fabsf(rho), -80.0f));
    *sigmoid = (rho > 0.0f ? 1.0f : e) / (1.0f + e);
    return fmaxf(rho, 0.0f) + log1pf(e);
}

static inline float softplus(float rho) {
    float unused;
    return softplus_and_sigmoid(rho, &unused);
}

/* The codes of native/table.py, which library.py hands for the priors, KL estimates and
 * parametrizations of sigma it serves. */
enum { GAUSSIAN_PRIOR = 0, SCALE_MIXTURE_PRIOR = 1, LOG_UNIFORM_PRIOR = 2, NO_PRIOR = 3 };
enum { MONTE_CARLO_KL = 0, CLOSED_FORM_KL = 1 };
enum { SOFTPLUS_PARAMETRIZATION = 0, LOG_VARIANCE_PARAMETRIZATION = 1 };

/* sigma of rho and d sigma / d rho: softplus(rho), sigmoid(rho); or, for rho = log sigma^2,
 * exp(rho / 2) with rho floored at -160 (parametrizations.LogVariance: sigma >= exp(-80), where
 * softplus's floor also leaves it) and sigma / 2 above the floor, 0 below it. */
static inline float sigma_of(float rho, int parametrization, float *dsigma) {
    if (parametrization == LOG_VARIANCE_PARAMETRIZATION) {
        float s = expf(fmaxf(rho, -160.0f) * 0.5f);
        *dsigma = rho >= -160.0f ? 0.5f * s : 0.0f;
        return s;
    }
    return softplus_and_sigmoid(rho, dsigma);
}

/* The prior's log density as the KL loops take it: log(weight_k N(x | 0, s_k^2)) = c_k - k_k x^2
 * for component k (a Gaussian prior has only the first). */
struct prior_terms { float k1, k2, c1, c2; };

static struct prior_terms prior_terms_of(int prior, float pi, float s1, float s2) {
    struct prior_terms t = {0.5f / (s1 * s1), 0.5f / (s2 * s2), -logf(s1) - LOG_SQRT_2PI, 0.0f};
    if (prior == SCALE_MIXTURE_PRIOR) {
        t.c1 += logf(pi);
        t.c2 = log1pf(-pi) - logf(s2) - LOG_SQRT_2PI;
    }
    return t;
}

/* Uniforms of one chunk: 2 * half of them, two per Philox word (made first, then turned into
 * uniforms in a loop that vectorizes); (k + 0.5) / 2^24 lies in (0, 1). */
static void chunk_uniforms(int64_t chunk, int64_t half, uint64_t k0, uint64_t k1,
                           uint64_t stream, float *uniforms) {
    uint64_t words[CHUNK / 2 + 4], keys[20];
    const float scale = 1.0f / 16777216.0f;
    philox_keys(k0, k1, keys);
    for (int64_t q = 0; q < half; q += 4)
        philox4x64_10((uint64_t)chunk * BLOCKS_PER_CHUNK + 1 + (uint64_t)(q / 4), stream, 0, 0,
                      keys, words + q);
    for (int64_t i = 0; i < half; ++i) {
        uniforms[2 * i] = ((float)(int32_t)(words[i] >> 40) + 0.5f) * scale;
        uniforms[2 * i + 1] = ((float)(int32_t)((words[i] >> 8) & 0xFFFFFF) + 0.5f) * scale;
    }
}

/* Standard normals of one chunk of `length` entries by Box-Muller on the uniforms u[0..2 half):
 * radius from u[m], angle from u[half + m]; the cosines fill entries [0, half), the sines
 * entries [half, length). If mu and rho are given, also w = mu + softplus(rho) * eps. */
VECTOR_CLONES
static void chunk_normals(int64_t length, int64_t half, float *u, float *eps,
                          const float *mu, const float *rho, float *w) {
    for (int64_t m = 0; m < half; ++m) {
        u[m] = sqrtf(-2.0f * logf(u[m]));
        u[half + m] *= TWO_PI;
    }
    for (int64_t m = 0; m < half; ++m) eps[m] = u[m] * cosf(u[half + m]);
    for (int64_t m = 0; m < length - half; ++m) eps[half + m] = u[m] * sinf(u[half + m]);
    if (w)
        for (int64_t i = 0; i < length; ++i) w[i] = mu[i] + softplus(rho[i]) * eps[i];
}

static void sample(int64_t n, const float *mu, const float *rho, uint64_t k0, uint64_t k1,
                   uint64_t stream, float *eps, float *w) {
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        float uniforms[CHUNK];
        int64_t lo = c * CHUNK, length = (n - lo < CHUNK) ? n - lo : CHUNK;
        int64_t half = (length + 1) / 2;
        chunk_uniforms(c, half, k0, k1, stream, uniforms);
        chunk_normals(length, half, uniforms, eps + lo, w ? mu + lo : 0, w ? rho + lo : 0,
                      w ? w + lo : 0);
    }
}

/* n standard normals of stream `stream` under key (k0, k1). */
void bbb_normals(int64_t n, uint64_t k0, uint64_t k1, uint64_t stream, float *eps) {
    sample(n, 0, 0, k0, k1, stream, eps, 0);
}

/* eps: n standard normals of stream `stream`; w = mu + softplus(rho) * eps. */
void bbb_sample_weights(int64_t n, const float *mu, const float *rho, uint64_t k0,
                        uint64_t k1, uint64_t stream, float *eps, float *w) {
    sample(n, mu, rho, k0, k1, stream, eps, w);
}

/* One entry of the Monte Carlo KL, given log P(x) and d log P / dx at x = w[i]: writes
 * grad_mu[i] = g and grad_rho[i] = (g eps - kl_weight / sigma) sigmoid(rho) with
 * g = dNLL/dw + kl_weight * (-d log P / dx), and returns log q(x) - log P(x). */
static inline float kl_entry(int64_t i, const float *rho, const float *eps,
                             const float *grad_w, float kl_weight, float log_prior,
                             float dlog_prior, float *grad_mu, float *grad_rho) {
    float sigmoid, sigma = softplus_and_sigmoid(rho[i], &sigmoid);
    float z = eps[i], g = grad_w[i] - kl_weight * dlog_prior;
    grad_mu[i] = g;
    grad_rho[i] = (g * z - kl_weight / sigma) * sigmoid;
    return -logf(sigma) - 0.5f * z * z - LOG_SQRT_2PI - log_prior;
}

/* The priors' log densities, written once for the KL loops and bbb_prior_terms: log P(x), its
 * slope d log P / dx and the precision p(x) = -(d log P / dx) / x (finite at x = 0).
 * Gaussian prior N(0, s^2): log P = -x^2 / (2 s^2) - log s - log sqrt(2 pi), p = 1 / s^2. */
static inline float gaussian_log_density(float x, struct prior_terms t, float *slope,
                                         float *precision) {
    *slope = -2.0f * t.k1 * x;
    *precision = 2.0f * t.k1;
    return t.c1 - t.k1 * x * x;
}

/* Scale mixture pi N(0, s1^2) + (1 - pi) N(0, s2^2) in log space: with a, b the two
 * components' log densities and d = a - b, log P = max(a, b) + log1p(exp(-|d|)), and the
 * first component's share of the density is sigmoid(d), the second's sigmoid(-d);
 * p = share1 / s1^2 + share2 / s2^2. */
static inline float mixture_log_density(float x, struct prior_terms t, float *slope,
                                        float *precision) {
    float x2 = x * x;
    float a = t.c1 - t.k1 * x2, b = t.c2 - t.k2 * x2, d = a - b;
    /* exp(-80) is already negligible next to 1; larger arguments would take libmvec's
     * slow scalar path for underflowing lanes */
    float ed = expf(fmaxf(-fabsf(d), -80.0f));
    /* the components' shares of the density, each computed directly: 1 - share1 would
     * lose all precision where share1 is near 1, and k2 is large */
    float share1 = (d > 0.0f ? 1.0f : ed) / (1.0f + ed);
    float share2 = (d > 0.0f ? ed : 1.0f) / (1.0f + ed);
    *slope = -2.0f * x * (t.k1 * share1 + t.k2 * share2);
    *precision = 2.0f * (t.k1 * share1 + t.k2 * share2);
    return fmaxf(a, b) + log1pf(ed);
}

static inline float gaussian_entry(int64_t i, const float *rho, const float *eps,
                                   const float *w, const float *grad_w, float kl_weight,
                                   struct prior_terms t, float *grad_mu, float *grad_rho) {
    float slope, p, log_prior = gaussian_log_density(w[i], t, &slope, &p);
    return kl_entry(i, rho, eps, grad_w, kl_weight, log_prior, slope, grad_mu, grad_rho);
}

static inline float mixture_entry(int64_t i, const float *rho, const float *eps,
                                  const float *w, const float *grad_w, float kl_weight,
                                  struct prior_terms t, float *grad_mu, float *grad_rho) {
    float slope, p, log_prior = mixture_log_density(w[i], t, &slope, &p);
    return kl_entry(i, rho, eps, grad_w, kl_weight, log_prior, slope, grad_mu, grad_rho);
}

/* Closed-form KL(N(mu, sigma^2) || N(0, s^2)) = log(s / sigma) + (sigma^2 + mu^2) / (2 s^2) - 1/2,
 * with d/dmu = mu / s^2 and d/dsigma = sigma / s^2 - 1 / sigma. */
static inline float closed_form_entry(int64_t i, const float *mu, const float *rho,
                                      const float *eps, const float *grad_w, float kl_weight,
                                      float inv, float c, float *grad_mu, float *grad_rho) {
    float sigmoid, sigma = softplus_and_sigmoid(rho[i], &sigmoid);
    float m = mu[i];
    grad_mu[i] = grad_w[i] + kl_weight * m * inv;
    grad_rho[i] = (grad_w[i] * eps[i] + kl_weight * (sigma * inv - 1.0f / sigma)) * sigmoid;
    return c - logf(sigma) + 0.5f * (sigma * sigma + m * m) * inv;
}

/* The loops sit in the VECTOR_CLONES functions, so OpenMP's outlined bodies get the clones. */
#define SUM_ENTRIES(ENTRY)                                                              \
    _Pragma("omp parallel for simd reduction(+ : total) schedule(static)")              \
    for (int64_t i = 0; i < n; ++i) total += ENTRY

/* The Monte Carlo KL for either prior; the prior is chosen outside the loops, which then
 * run without a test per entry. */
VECTOR_CLONES
static double kl_monte_carlo(int64_t n, const float *rho, const float *eps, const float *w,
                             const float *grad_w, float kl_weight, struct prior_terms t,
                             int mixture, float *grad_mu, float *grad_rho) {
    double total = 0.0;
    if (mixture) {
        SUM_ENTRIES(mixture_entry(i, rho, eps, w, grad_w, kl_weight, t, grad_mu, grad_rho));
    } else {
        SUM_ENTRIES(gaussian_entry(i, rho, eps, w, grad_w, kl_weight, t, grad_mu, grad_rho));
    }
    return total;
}

VECTOR_CLONES
static double kl_closed_form(int64_t n, const float *mu, const float *rho, const float *eps,
                             const float *grad_w, float kl_weight, float sigma_p,
                             float *grad_mu, float *grad_rho) {
    const float inv = 1.0f / (sigma_p * sigma_p), c = logf(sigma_p) - 0.5f;
    double total = 0.0;
    SUM_ENTRIES(closed_form_entry(i, mu, rho, eps, grad_w, kl_weight, inv, c, grad_mu,
                                  grad_rho));
    return total;
}

/* The log-uniform prior of sparse variational dropout (priors.LogUniformPrior): log alpha =
 * log sigma^2 - log(mu^2 + 1e-8) clipped to [-10, 10], and its KL up to a constant by Molchanov
 * et al.'s approximation, KL = k1 - k1 sigmoid(k2 + k3 la) + softplus(-la) / 2. */
#define LOG_UNIFORM_K1 0.63576f
#define LOG_UNIFORM_K2 1.87320f
#define LOG_UNIFORM_K3 1.48695f
#define LOG_ALPHA_LIMIT 10.0f
#define PRUNE_LOG_ALPHA 3.0f

/* log alpha before the clip */
static inline float raw_log_alpha(float mu, float sigma) {
    return 2.0f * logf(sigma) - logf(mu * mu + 1e-8f);
}

static inline float clipped_log_alpha(float raw) {
    return fminf(fmaxf(raw, -LOG_ALPHA_LIMIT), LOG_ALPHA_LIMIT);
}

/* The data term's gradients (the negative log-likelihood's, NLL) as an estimator gives them:
 * WEIGHTS_SAMPLED: dNLL/dw, which is dNLL/dmu and, times eps, dNLL/dsigma; EPS_COEFFICIENT:
 * dNLL/dmu, and the coefficient of eps in dNLL/dsigma (Flipout's dNLL/d(sigma eps));
 * SIGMA_GIVEN: dNLL/dmu and dNLL/dsigma (the local reparametrization). */
struct data_gradients { const float *mu, *sigma; };
enum { WEIGHTS_SAMPLED = 0, EPS_COEFFICIENT = 1, SIGMA_GIVEN = 2 };

/* The entries above take weight sampling's dNLL/dw; the other estimators' gradients go through
 * them too, as dNLL/dw the one of their two arrays the entry uses where it matters most (the
 * eps coefficient for Flipout, dNLL/dmu for the local reparametrization), and the other term
 * corrected here. Weight sampling's arithmetic is left as it is: the presets' runs stay the
 * same to the bit. */
static inline void correct_for_data(int64_t i, const float *rho, const float *eps,
                                    struct data_gradients data, int kind, float *grad_mu,
                                    float *grad_rho) {
    float sigmoid;
    softplus_and_sigmoid(rho[i], &sigmoid);
    if (kind == EPS_COEFFICIENT)
        grad_mu[i] += data.mu[i] - data.sigma[i];
    else
        grad_rho[i] += (data.sigma[i] - data.mu[i] * eps[i]) * sigmoid;
}

VECTOR_CLONES
static void correct_all_for_data(int64_t n, const float *rho, const float *eps,
                                 struct data_gradients data, int kind, float *grad_mu,
                                 float *grad_rho) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) correct_for_data(i, rho, eps, data, kind, grad_mu, grad_rho);
}

/* dNLL/dsigma at entry i: given (the local reparametrization), else the coefficient of eps (or
 * dNLL/dw, weight sampling) times eps */
static inline float data_sigma_of(int64_t i, struct data_gradients data, const float *eps,
                                  int kind) {
    return kind == SIGMA_GIVEN ? data.sigma[i] : data.sigma[i] * eps[i];
}

/* The log-uniform prior's KL per entry and the loss's gradients for any data term ``kind`` and
 * either parametrization: dL/dmu = dNLL/dmu + kl_weight dKL/dmu and dL/drho = (dNLL/dsigma +
 * kl_weight dKL/dsigma) dsigma/drho, with dKL/dla = -k1 k3 s (1 - s) - sigmoid(-la) / 2
 * (s = sigmoid(k2 + k3 la)), 0 where the clip holds la (MXNet's clip passes the gradient on the
 * closed interval), dla/dmu = -2 mu / (mu^2 + 1e-8) and dla/dsigma = 2 / sigma. */
VECTOR_CLONES
static double kl_log_uniform(int64_t n, const float *mu, const float *rho, const float *eps,
                             struct data_gradients data, int kind, float kl_weight,
                             int parametrization, float *grad_mu, float *grad_rho) {
    double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float dsigma, sigma = sigma_of(rho[i], parametrization, &dsigma);
        float m = mu[i], m2 = m * m + 1e-8f;
        float raw = raw_log_alpha(m, sigma), la = clipped_log_alpha(raw);
        float s = 1.0f / (1.0f + expf(-(LOG_UNIFORM_K2 + LOG_UNIFORM_K3 * la)));
        float inside = (raw >= -LOG_ALPHA_LIMIT && raw <= LOG_ALPHA_LIMIT) ? 1.0f : 0.0f;
        float dkl = inside * (-LOG_UNIFORM_K1 * LOG_UNIFORM_K3 * s * (1.0f - s)
                              - 0.5f / (1.0f + expf(la)));
        float data_sigma = data_sigma_of(i, data, eps, kind);
        grad_mu[i] = data.mu[i] + kl_weight * dkl * (-2.0f * m / m2);
        grad_rho[i] = (data_sigma + kl_weight * dkl * (2.0f / sigma)) * dsigma;
        total += LOG_UNIFORM_K1 - LOG_UNIFORM_K1 * s + 0.5f * softplus(-la);
    }
    return total;
}

/* No prior (priors.NoPrior: a KL term of 0, the weights under a gated network's gates): the
 * loss's gradients are the data term's, dL/dmu = dNLL/dmu and dL/drho = dNLL/dsigma dsigma/drho,
 * for any data term ``kind`` and either parametrization. */
VECTOR_CLONES
static void kl_none(int64_t n, const float *rho, const float *eps, struct data_gradients data,
                    int kind, int parametrization, float *grad_mu, float *grad_rho) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float dsigma;
        sigma_of(rho[i], parametrization, &dsigma);
        grad_mu[i] = data.mu[i];
        grad_rho[i] = data_sigma_of(i, data, eps, kind) * dsigma;
    }
}

/* Entries outside the network (keep[i] == 0) get no gradient. */
static void mask_gradients(int64_t n, const float *keep, float *grad_mu, float *grad_rho) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i)
        if (keep[i] == 0.0f) grad_mu[i] = grad_rho[i] = 0.0f;
}

/* 1 where bbb_kl_gradients implements the data term ``kind``, the KL estimate, the prior and
 * the parametrization these codes name, 0 otherwise: a guard, so that codes native/table.py
 * (which declares what is served) never hands give NaN rather than another's formulas. */
static int served(int kind, int kl_estimate, int prior, int parametrization) {
    int known = (kind == WEIGHTS_SAMPLED || kind == EPS_COEFFICIENT || kind == SIGMA_GIVEN)
        && (parametrization == SOFTPLUS_PARAMETRIZATION
            || parametrization == LOG_VARIANCE_PARAMETRIZATION);
    if (!known)
        return 0;
    /* no density: the closed form (the log-uniform prior's, or none's 0), either
     * parametrization */
    if (prior == LOG_UNIFORM_PRIOR || prior == NO_PRIOR)
        return kl_estimate == CLOSED_FORM_KL;
    if (parametrization != SOFTPLUS_PARAMETRIZATION)
        return 0;
    return (kl_estimate == MONTE_CARLO_KL
            && (prior == GAUSSIAN_PRIOR || prior == SCALE_MIXTURE_PRIOR))
        || (kl_estimate == CLOSED_FORM_KL && prior == GAUSSIAN_PRIOR);
}

/* The KL term of the step and the gradients of the whole loss with respect to mu and rho, for
 * the prior GAUSSIAN_PRIOR, N(0, s1^2), SCALE_MIXTURE_PRIOR, (pi, s1, s2) with 0 < pi < 1,
 * LOG_UNIFORM_PRIOR or NO_PRIOR (a KL of 0), estimated by MONTE_CARLO_KL (the sum of log q(w) -
 * log P(w)) or CLOSED_FORM_KL (the sum of KL(q || P) per entry; not the scale mixture's), at w =
 * mu + sigma * eps, given the data term's gradients grad_data_mu and grad_data_sigma of the
 * ``kind`` ``struct data_gradients`` describes. Writes grad_mu and grad_rho = dL/dsigma *
 * dsigma/drho of L = NLL + kl_weight * KL (0 for both where keep is given and 0), and returns the
 * KL term's sum (in double, over every entry). */
double bbb_kl_gradients(int64_t n, const float *mu, const float *rho, const float *eps,
                        const float *w, const float *grad_data_mu, const float *grad_data_sigma,
                        int kind, float kl_weight, int kl_estimate, int prior,
                        int parametrization, float pi, float s1, float s2, const float *keep,
                        float *grad_mu, float *grad_rho) {
    if (!served(kind, kl_estimate, prior, parametrization)) {
        /* never another prior's or estimate's formulas: NaN everywhere, which stops training */
        for (int64_t i = 0; i < n; ++i) grad_mu[i] = grad_rho[i] = NAN;
        return NAN;
    }
    struct data_gradients data = {grad_data_mu, grad_data_sigma};
    const float *grad_w = kind == EPS_COEFFICIENT ? grad_data_sigma : grad_data_mu;
    double total;
    if (prior == LOG_UNIFORM_PRIOR) {
        total = kl_log_uniform(n, mu, rho, eps, data, kind, kl_weight, parametrization, grad_mu,
                               grad_rho);
    } else if (prior == NO_PRIOR) {
        kl_none(n, rho, eps, data, kind, parametrization, grad_mu, grad_rho);
        total = 0.0;
    } else {
        if (kl_estimate == CLOSED_FORM_KL)
            total = kl_closed_form(n, mu, rho, eps, grad_w, kl_weight, s1, grad_mu, grad_rho);
        else
            total = kl_monte_carlo(n, rho, eps, w, grad_w, kl_weight,
                                   prior_terms_of(prior, pi, s1, s2),
                                   prior == SCALE_MIXTURE_PRIOR, grad_mu, grad_rho);
        if (kind != WEIGHTS_SAMPLED)
            correct_all_for_data(n, rho, eps, data, kind, grad_mu, grad_rho);
    }
    if (keep)
        mask_gradients(n, keep, grad_mu, grad_rho);
    return total;
}

/* Which entries stay in the network under the prior's rule (sparse variational dropout's
 * removal, priors.removed): keep[i] = 0 where the log-uniform prior switches the entry off (log
 * alpha > 3) or its mean is exactly 0 (a removed entry's), else 1; and mu[i] = 0 where keep[i]
 * is 0. Another prior (none has such a rule here): NaN in keep, mu untouched. */
VECTOR_CLONES
void bbb_kept(int64_t n, float *mu, const float *rho, int prior, int parametrization,
              float *keep) {
    if (prior != LOG_UNIFORM_PRIOR || !served(SIGMA_GIVEN, CLOSED_FORM_KL, prior,
                                                  parametrization)) {
        for (int64_t i = 0; i < n; ++i) keep[i] = NAN;
        return;
    }
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float unused, sigma = sigma_of(rho[i], parametrization, &unused), m = mu[i];
        int off = clipped_log_alpha(raw_log_alpha(m, sigma)) > PRUNE_LOG_ALPHA || m == 0.0f;
        keep[i] = off ? 0.0f : 1.0f;
        mu[i] = off ? 0.0f : m;
    }
}

/* The prior's terms at x (a MAP model's prior as weight decay, IVON's prior): returns the sum
 * of log P(x_i) (in double) and writes gradient_i = -scale d log P / dx at x_i, the gradient of
 * -scale log P, and, where precision is given, precision_i = scale p(x_i), for the prior
 * GAUSSIAN_PRIOR (s1) or SCALE_MIXTURE_PRIOR (pi, s1, s2); another code: NaN everywhere. */
#define PRIOR_TERMS_LOOP(LOG_DENSITY, WRITE_PRECISION)                                      \
    _Pragma("omp parallel for simd reduction(+ : total) schedule(static)")                  \
    for (int64_t i = 0; i < n; ++i) {                                                      \
        float slope, p, log_prior = LOG_DENSITY(x[i], t, &slope, &p);                       \
        gradient[i] = -scale * slope;                                                       \
        WRITE_PRECISION;                                                                      \
        total += log_prior;                                                                  \
    }

VECTOR_CLONES
double bbb_prior_terms(int64_t n, const float *x, int prior, float pi, float s1, float s2,
                       float scale, float *gradient, float *precision) {
    struct prior_terms t = prior_terms_of(prior, pi, s1, s2);
    double total = 0.0;
    if (prior == SCALE_MIXTURE_PRIOR && precision) {
        PRIOR_TERMS_LOOP(mixture_log_density, precision[i] = scale * p)
    } else if (prior == SCALE_MIXTURE_PRIOR) {
        PRIOR_TERMS_LOOP(mixture_log_density, (void)0)
    } else if (prior == GAUSSIAN_PRIOR && precision) {
        PRIOR_TERMS_LOOP(gaussian_log_density, precision[i] = scale * p)
    } else if (prior == GAUSSIAN_PRIOR) {
        PRIOR_TERMS_LOOP(gaussian_log_density, (void)0)
    } else {
        for (int64_t i = 0; i < n; ++i) {
            gradient[i] = NAN;
            if (precision) precision[i] = NAN;
        }
        return NAN;
    }
    return total;
}

/* The draw's sigma, perturbation and weights for given noise eps (the estimators that draw more
 * than the weights take their noise in one vector, drawn beforehand), each written where its
 * array is given: sigma of rho under the parametrization, delta = sigma * eps, w = mu + delta,
 * and drawn_mu = mu. With keep, an entry at keep 0 is out of the network: its mu and sigma are
 * taken as 0. */
VECTOR_CLONES
void bbb_perturb(int64_t n, const float *mu, const float *rho, const float *eps,
                 int parametrization, const float *keep, float *drawn_mu, float *sigma,
                 float *delta, float *w) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float unused, s = sigma_of(rho[i], parametrization, &unused), m = mu[i];
        if (keep) {
            s *= keep[i];
            m *= keep[i];
        }
        if (drawn_mu) drawn_mu[i] = m;
        if (sigma) sigma[i] = s;
        if (delta) delta[i] = s * eps[i];
        if (w) w[i] = m + s * eps[i];
    }
}

/* MXNet's sgd_update (no momentum) and adam_update, in place, for float32 vectors:
 *   g = rescale_grad * grad + wd * param   (Adam; SGD decays the weight as (1 - lr * wd))
 *   SGD:  param = (1 - lr * wd) * param - lr * rescale_grad * grad
 *   Adam: mean = beta1 mean + (1 - beta1) g;  var = beta2 var + (1 - beta2) g^2;
 *         param -= lr * mean / (sqrt(var) + epsilon)
 * with lr already bias-corrected for Adam, as mx.optimizer.Adam passes it. */
VECTOR_CLONES
void bbb_sgd_update(int64_t n, float *param, const float *grad, float lr, float wd,
                    float rescale_grad) {
    const float decay = 1.0f - lr * wd, step = lr * rescale_grad;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) param[i] = decay * param[i] - step * grad[i];
}

VECTOR_CLONES
void bbb_adam_update(int64_t n, float *param, const float *grad, float *mean, float *var,
                     float lr, float wd, float rescale_grad, float beta1, float beta2,
                     float epsilon) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float g = rescale_grad * grad[i] + wd * param[i];
        float m = beta1 * mean[i] + (1.0f - beta1) * g;
        float v = beta2 * var[i] + (1.0f - beta2) * g * g;
        mean[i] = m;
        var[i] = v;
        /* -ffast-math's square root goes through a reciprocal square root that takes a
         * subnormal v for 0 and gives NaN (tiny gradients: a deterministic run's prior term);
         * such a v counts as 0 here, its root (below 1.1e-19) being far below epsilon */
        param[i] -= lr * m / (sqrtf(v * (float)(v >= 1.17549435e-38f)) + epsilon);
    }
}

/* IVON (learning/ivon.py, class IVON), per entry, with p the prior's precision over ess at the
 * means (prior_precision; NULL: none) and floor = wd / 1000:
 *   precision = max(h + wd + p, floor),  sigma = 1 / sqrt(ess precision)
 * bbb_ivon_draw (IVON.draw_weights): noise = z sigma, w = mu + noise, for the standard normals
 * z of a Philox stream.
 * bbb_ivon_update (IVON.step_one_draw): IVON.update from one draw, its gradient at w
 * (g = rescale grad) and that draw's noise:
 *   m = beta1 m + (1 - beta1) g, 0 where its magnitude is below FLT_MIN
 *   f = ess precision (rescale noise grad)
 *   h = beta2 h + (1 - beta2) f + half_beta2c (h - f)^2 / precision   (the precision before;
 *       half_beta2c = (1 - beta2)^2 / 2, from which 1 - beta2 is taken)
 *   direction = (m / bias_correction + wd mu + prior_gradient) / max(h + wd + p, floor),
 *               clipped to [-clip_radius, clip_radius]
 *   mu = mu - step_size direction, 0 where its magnitude is below FLT_MIN
 * and log sigma^2 = -log(ess max(h + wd, floor)), the log-variance where there is no prior.
 * Written in the order of IVON's operators, so the two differ by float rounding only. */
/* Branch-free loops (the vectorizer takes no control flow): each kernel's loop is written once
 * as a macro of the prior's terms, PRIOR_GRADIENT(i) and PRIOR_PRECISION(i), and expanded
 * with the arrays' entries and with 0 (no prior). */
#define IVON_PRECISION(h, i) fmaxf((h) + wd + PRIOR_PRECISION(i), floor)

#define IVON_DRAW_LOOP                                                                      \
    _Pragma("omp simd")                                                                      \
    for (int64_t i = 0; i < n; ++i) {                                                      \
        float d = z[i] * (1.0f / sqrtf(ess * IVON_PRECISION(hessian[i], i)));              \
        noise[i] = d;                                                                        \
        w[i] = mu[i] + d;                                                                    \
    }

/* clip_radius: FLT_MAX where the update is not clipped; log_variance is written always (with
 * a prior, the caller writes it again from the prior's terms at the new means) */
#define IVON_UPDATE_LOOP                                                                    \
    _Pragma("omp parallel for simd schedule(static)")                                       \
    for (int64_t i = 0; i < n; ++i) {                                                      \
        float g = grad[i] * rescale, noise_grad = (noise[i] * grad[i]) * rescale;           \
        float m = beta1 * momentum[i] + (1.0f - beta1) * g;                                 \
        m = m * (float)(fabsf(m) >= 1.17549435e-38f);                                       \
        float damped = IVON_PRECISION(hessian[i], i);                                       \
        float f = (ess * damped) * noise_grad;                                              \
        float diff = hessian[i] - f;                                                        \
        float h = beta2 * hessian[i] + beta2c * f                                           \
                  + half_beta2c * (diff * diff) / damped;                                   \
        float numerator = m / bias_correction + wd * mu[i] + PRIOR_GRADIENT(i);             \
        float direction = fminf(fmaxf(numerator / IVON_PRECISION(h, i), -clip_radius),     \
                                clip_radius);                                               \
        float updated = mu[i] - step_size * direction;                                      \
        momentum[i] = m;                                                                     \
        hessian[i] = h;                                                                      \
        mu[i] = updated * (float)(fabsf(updated) >= 1.17549435e-38f);                       \
        log_variance[i] = -logf(ess * fmaxf(h + wd, floor));                                \
    }

VECTOR_CLONES
static void ivon_draw(int64_t n, const float *mu, const float *hessian,
                      const float *prior_precision, float ess, float wd, float floor,
                      const float *z, float *noise, float *w) {
    if (prior_precision) {
#define PRIOR_PRECISION(i) prior_precision[i]
        IVON_DRAW_LOOP
#undef PRIOR_PRECISION
    } else {
#define PRIOR_PRECISION(i) 0.0f
        IVON_DRAW_LOOP
#undef PRIOR_PRECISION
    }
}

/* z: the normals of stream `stream` under key (k0, k1), as bbb_normals draws them, chunk by
 * chunk while they are in the cache; then the draw of each chunk (one thread a chunk). */
void bbb_ivon_draw(int64_t n, const float *mu, const float *hessian,
                   const float *prior_precision, float ess, float wd, float floor,
                   uint64_t k0, uint64_t k1, uint64_t stream, float *noise, float *w) {
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        float uniforms[CHUNK], z[CHUNK];
        int64_t lo = c * CHUNK, length = (n - lo < CHUNK) ? n - lo : CHUNK;
        int64_t half = (length + 1) / 2;
        chunk_uniforms(c, half, k0, k1, stream, uniforms);
        chunk_normals(length, half, uniforms, z, 0, 0, 0);
        ivon_draw(length, mu + lo, hessian + lo, prior_precision ? prior_precision + lo : 0,
                  ess, wd, floor, z, noise + lo, w + lo);
    }
}

/* log sigma^2 = -log(ess max(h + wd + p, floor)) (IVON.log_variance): after an update with a
 * prior, from its terms at the new means. */
VECTOR_CLONES
void bbb_ivon_log_variance(int64_t n, const float *hessian, const float *prior_precision,
                           float ess, float wd, float floor, float *log_variance) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i)
        log_variance[i] = -logf(ess * fmaxf(hessian[i] + wd + prior_precision[i], floor));
}

VECTOR_CLONES
void bbb_ivon_update(int64_t n, float *mu, float *momentum, float *hessian, const float *grad,
                     const float *noise, const float *prior_gradient,
                     const float *prior_precision, float rescale, float ess, float wd,
                     float floor, float beta1, float beta2, float half_beta2c,
                     float bias_correction, float step_size, float clip_radius,
                     float *log_variance) {
    /* 1 - beta2 from the caller's double: 1.0f - beta2 is 0.14% off at beta2 = 0.99999 */
    float beta2c = sqrtf(2.0f * half_beta2c);
    if (prior_gradient) {
#define PRIOR_PRECISION(i) prior_precision[i]
#define PRIOR_GRADIENT(i) prior_gradient[i]
        IVON_UPDATE_LOOP
#undef PRIOR_PRECISION
#undef PRIOR_GRADIENT
    } else {
#define PRIOR_PRECISION(i) 0.0f
#define PRIOR_GRADIENT(i) 0.0f
        IVON_UPDATE_LOOP
#undef PRIOR_PRECISION
#undef PRIOR_GRADIENT
    }
}

/* The largest of each window of the convolution's outputs (OC, positions), rows of `cols`,
 * into out (OC, PH, PW): the windows' rows first, as vectors, then each window's columns */
#define CONV_POOL_FUNCTION(NAME, TARGET)                                                     \
TARGET static void NAME(int64_t OC, int64_t P, int64_t PH, int64_t PW, int64_t cols,         \
                        int64_t positions, int64_t rectify, const float *conv,               \
                        float *rowmax, float *out) {                                          \
    float floor = rectify ? 0.0f : -FLT_MAX;                                                 \
    for (int64_t oc = 0; oc < OC; ++oc)                                                      \
        for (int64_t py = 0; py < PH; ++py) {                                                \
            const float *first = conv + oc * positions + py * P * cols;                      \
            float *o = out + (oc * PH + py) * PW;                                            \
            if (P == 2) { /* the pooling the networks take: a loop the compiler vectorizes */ \
                const float *second = first + cols;                                          \
                for (int64_t px = 0; px < PW; ++px) {                                        \
                    float a = first[2 * px] > first[2 * px + 1] ? first[2 * px]              \
                                                                : first[2 * px + 1];         \
                    float b = second[2 * px] > second[2 * px + 1] ? second[2 * px]           \
                                                                  : second[2 * px + 1];      \
                    float m = a > b ? a : b;                                                 \
                    o[px] = m > floor ? m : floor;                                           \
                }                                                                            \
                continue;                                                                    \
            }                                                                                \
            for (int64_t x = 0; x < cols; ++x)                                               \
                rowmax[x] = first[x];                                                        \
            for (int64_t dy = 1; dy < P; ++dy)                                               \
                for (int64_t x = 0; x < cols; ++x)                                           \
                    rowmax[x] = first[dy * cols + x] > rowmax[x] ? first[dy * cols + x]      \
                                                                 : rowmax[x];                \
            for (int64_t px = 0; px < PW; ++px) {                                            \
                float m = rowmax[px * P];                                                    \
                for (int64_t dx = 1; dx < P; ++dx)                                           \
                    m = rowmax[px * P + dx] > m ? rowmax[px * P + dx] : m;                   \
                o[px] = m > floor ? m : floor;                                               \
            }                                                                                \
        }                                                                                    \
}

typedef void (*conv_pool_function)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, const float *, float *, float *);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
CONV_POOL_FUNCTION(conv_pool_avx512, CONV_AVX512)
CONV_POOL_FUNCTION(conv_pool_avx2, CONV_AVX2)
#endif
CONV_POOL_FUNCTION(conv_pool_plain, )

/* The 2 x 2 pooling's outputs of a tile of the convolution, its terms read from the image
 * itself: x[0] and x[1] the inputs under the kernel's first entry at a window row's two output
 * rows, VL columns from the first of a window; o[r][0:VL/2] (r < rows, o_row apart) the
 * largest of each window of output channel r, floored at `floor`. The sums of
 * GEMM_TILE_FUNCTION over the image's patches, term by term in the same order, and conv_pool's
 * largest, without the patches or the convolution's outputs written and read back. */
#define CONV_DIRECT_POOL_FUNCTION(NAME, VL, ROWS, TARGET)                                     \
typedef float NAME##_vector __attribute__((vector_size(VL * 4), aligned(4), may_alias));    \
typedef int32_t NAME##_mask __attribute__((vector_size(VL * 4)));                           \
TARGET static inline NAME##_vector NAME##_larger(NAME##_vector a, NAME##_vector b) {        \
    NAME##_mask a_larger = a > b;                                                            \
    return (NAME##_vector)(((NAME##_mask)a & a_larger) | ((NAME##_mask)b & ~a_larger));      \
}                                                                                            \
TARGET static void NAME(int64_t terms, int64_t rows, const float *a, int64_t a_row,          \
                        const float *bias, const int64_t *offsets, const float *const *x,    \
                        float floor, float *o, int64_t o_row) {                               \
    NAME##_vector acc[ROWS][2];                                                              \
    const float *ar[ROWS], *x0 = x[0], *x1 = x[1];                                           \
    for (int r = 0; r < ROWS; ++r) {                                                         \
        int64_t row = r < rows ? r : rows - 1;                                               \
        ar[r] = a + row * a_row;                                                             \
        NAME##_vector zero = {0};                                                            \
        acc[r][0] = acc[r][1] = zero + (bias ? bias[row] : 0.0f);                            \
    }                                                                                        \
    for (int64_t t = 0; t < terms; ++t) {                                                    \
        NAME##_vector in0 = *(const NAME##_vector *)(x0 + offsets[t]);                       \
        NAME##_vector in1 = *(const NAME##_vector *)(x1 + offsets[t]);                       \
        for (int r = 0; r < ROWS; ++r) {                                                     \
            acc[r][0] += ar[r][t] * in0;                                                     \
            acc[r][1] += ar[r][t] * in1;                                                     \
        }                                                                                    \
    }                                                                                        \
    NAME##_mask neighbour;                                                                   \
    for (int i = 0; i < VL; ++i)                                                             \
        neighbour[i] = i ^ 1;                                                                \
    for (int r = 0; r < ROWS && r < rows; ++r) {                                             \
        NAME##_vector m = NAME##_larger(acc[r][0], acc[r][1]);                               \
        m = NAME##_larger(m, __builtin_shuffle(m, neighbour));                               \
        for (int i = 0; i < VL / 2; ++i)                                                     \
            o[r * o_row + i] = m[2 * i] > floor ? m[2 * i] : floor;                          \
    }                                                                                        \
}

typedef void (*conv_direct_pool_function)(int64_t, int64_t, const float *, int64_t,
                                          const float *, const int64_t *, const float *const *,
                                          float, float *, int64_t);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx512_6, 16, 6, CONV_AVX512)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx512_5, 16, 5, CONV_AVX512)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx512_4, 16, 4, CONV_AVX512)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx2_6, 8, 6, CONV_AVX2)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx2_5, 8, 5, CONV_AVX2)
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_avx2_4, 8, 4, CONV_AVX2)
#endif
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_plain_6, 4, 6, )
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_plain_5, 4, 5, )
CONV_DIRECT_POOL_FUNCTION(conv_direct_pool_plain_4, 4, 4, )

/* The direct pooled tiles of each level of conv_kernels (plain C, AVX2, AVX-512), of 6, 5 and
 * 4 rows, with that level's vectors */
static const conv_direct_pool_function direct_pool_tiles[3][3] = {
    {conv_direct_pool_plain_6, conv_direct_pool_plain_5, conv_direct_pool_plain_4},
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    {conv_direct_pool_avx2_6, conv_direct_pool_avx2_5, conv_direct_pool_avx2_4},
    {conv_direct_pool_avx512_6, conv_direct_pool_avx512_5, conv_direct_pool_avx512_4},
#endif
};

/* Whether conv_direct_pooled takes a pooling of P x P windows whose columns are `cols` in all,
 * with `kernels`: 2 x 2 windows, the columns a whole number of its vectors (the LeNet's 24 and
 * 8 with AVX2; with AVX-512 its patches' tiles of 64 positions stay) */
static int conv_direct_pooled_serves(const conv_kernels *kernels, int64_t P, int64_t cols) {
    return P == 2 && cols % kernels->vector == 0;
}

/* offsets (C K K) of the convolution's terms in an image (C, H, W): where the input under
 * kernel entry (c, ky, kx) lies from the one under (0, 0, 0) */
static void conv_offsets(int64_t C, int64_t H, int64_t W, int64_t K, int64_t *offsets) {
    for (int64_t c = 0; c < C; ++c)
        for (int64_t ky = 0; ky < K; ++ky)
            for (int64_t kx = 0; kx < K; ++kx)
                offsets[(c * K + ky) * K + kx] = (c * H + ky) * W + kx;
}

/* A convolution read from the image and its 2 x 2 pooling (conv_direct_pool_*) over one image
 * (C, H, W; `offsets` conv_offsets') into out (OC, PH, PW): each window row's two output rows,
 * a vector of columns at a time (where conv_direct_pooled_serves). Over the LeNet's predictive
 * without the patches and the convolution's outputs: its rotation report 55.6-55.9 s against
 * 75.4-76.2 with them (AVX2, 2 threads; docs/PERFORMANCE.md). */
static void conv_direct_pooled(const conv_kernels *kernels, int64_t OC, int64_t W, int64_t PH,
                               int64_t PW, int64_t terms, const float *w, const float *b,
                               const int64_t *offsets, const float *image, float floor,
                               float *out) {
    int chosen = choose_rows(OC);
    int64_t tile_rows = 6 - chosen, VL = kernels->vector;
    for (int64_t py = 0; py < PH; ++py)
        for (int64_t x0 = 0; x0 < 2 * PW; x0 += VL) {
            const float *x[2] = {image + 2 * py * W + x0, image + (2 * py + 1) * W + x0};
            for (int64_t i = 0; i < OC; i += tile_rows)
                direct_pool_tiles[kernels->level][chosen](
                    terms, OC - i < tile_rows ? OC - i : tile_rows, w + i * terms, terms,
                    b ? b + i : NULL, offsets, x, floor, out + (i * PH + py) * PW + x0 / 2,
                    PH * PW);
        }
}

/* A convolution (stride 1, no padding) of in (N, C, H, W) with w (OC, C, K, K) and b (OC,),
 * then a max pooling of P x P windows at stride P (the windows that fit), into out (N, OC,
 * (H - K + 1) / P, (W - K + 1) / P): networks.layers.Conv2D then MaxPool2D (and ReLU), forward.
 *
 * The convolution is computed at the positions the pooling reads (rows and columns of whole
 * windows): its product with w (OC, C K K) summed in register tiles (_conv_tiles.h) over each
 * image's patches, then each window's largest taken; or, for 2 x 2 windows a whole number of
 * vectors wide, summed from the image itself and pooled in the tile's registers
 * (conv_direct_pooled). The images are split among the threads, each summed in one fixed
 * order: the result does not depend on the number of threads. MXNet 1.9.1's oneDNN runs the
 * LeNet's convolutions (20 and 50 output channels, not multiples of 8) as im2col and a matrix
 * product and pools in a second pass (docs/PERFORMANCE.md times both). `rectify`: a ReLU after
 * the pooling too. `widest`: the most floats a vector may hold (16, 8 or 4: the tests run each
 * width the CPU has). Returns 0, or -1 where memory could not be allocated. */
int bbb_conv_maxpool(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t K,
                     int64_t P, const float *in, const float *w, const float *b, float *out,
                     int64_t rectify, int64_t widest) {
    int64_t PH = (H - K + 1) / P, PW = (W - K + 1) / P;
    int64_t rows = PH * P, cols = PW * P, terms = C * K * K;
    conv_kernels kernels = conv_kernels_for(widest);
    conv_pool_function pools[3] = {conv_pool_plain, conv_pool_plain, conv_pool_plain};
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    pools[1] = conv_pool_avx2, pools[2] = conv_pool_avx512;
#endif
    conv_pool_function pool = pools[kernels.level];
    int64_t positions = conv_padded(rows * cols, kernels.width);
    int direct = conv_direct_pooled_serves(&kernels, P, cols);
    int64_t *offsets = malloc((size_t)terms * sizeof(int64_t));
    if (!offsets)
        return -1;
    conv_offsets(C, H, W, K, offsets);
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        /* the patches (terms, positions), zero past the last position, the convolution's
         * outputs (OC, positions) and a row of the windows' largest; none where direct */
        float *patches = direct ? NULL : calloc((size_t)((terms + OC) * positions + cols),
                                                sizeof(float));
        if (!direct && !patches)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; ++n) {
            const float *image = in + n * C * H * W;
            if (direct) {
                conv_direct_pooled(&kernels, OC, W, PH, PW, terms, w, b, offsets, image,
                                   rectify ? 0.0f : -FLT_MAX, out + n * OC * PH * PW);
            } else if (patches) {
                float *conv = patches + terms * positions;
                kernels.patches(C, H, W, K, rows, cols, positions, image, patches);
                conv_gemm(&kernels, OC, positions, terms, w, terms, b, 0, patches, positions,
                          conv, positions);
                pool(OC, P, PH, PW, cols, positions, rectify, conv, conv + OC * positions,
                     out + n * OC * PH * PW);
            }
        }
        free(patches);
    }
    free(offsets);
    return failed ? -1 : 0;
}
