/* The matrix products of a convolution (stride 1, no padding) as the C accelerator computes
 * them, shared by _fused.c (bbb_conv_maxpool: the forward pass of prediction) and
 * _operators.cc (bbb_lrt_convolution: the local reparametrization's convolution, forward and
 * backward, for training). C and C++ alike (GCC's vector extensions).
 *
 * A product is summed in registers, a tile of ROWS rows of the result times WIDTH columns
 * (VECTORS vectors of 16 floats with AVX-512, 8 with AVX2, 4 elsewhere), one broadcast entry
 * of the left factor times each vector of the right one a term; ROWS is one of 6, 5 and 4,
 * whichever repeats the fewest rows to cover the result, the last tile repeating the last row
 * where ROWS does not divide it. Each entry of the result is summed by one tile in one fixed
 * order, whatever the threads are.
 *
 * An image's patches are laid out as (C K K, positions): row (c, ky, kx) holds the input under
 * that kernel entry at each output position, padded with zeros to a whole number of tiles. */
#ifndef GLUON_BBB_CONV_TILES_H
#define GLUON_BBB_CONV_TILES_H

#include <stdint.h>
#include <string.h>

/* c[r][0:WIDTH] (r < rows) = start + sum_t a[r a_row + t] b[t b_row + 0:WIDTH], WIDTH = VL
 * VECTORS, start c's own values where `accumulate`, else bias[r] (0 where bias is NULL); rows
 * past `rows` repeat the last one and are not stored */
#define GEMM_TILE_FUNCTION(NAME, VL, VECTORS, ROWS, TARGET)                                  \
typedef float NAME##_vector                                                                  \
    __attribute__((vector_size(VL * 4), aligned(4), may_alias));                             \
TARGET static void NAME(int64_t terms, int64_t rows, const float *a, int64_t a_row,          \
                        const float *bias, int accumulate, const float *b, int64_t b_row,    \
                        float *c, int64_t c_row) {                                            \
    NAME##_vector acc[ROWS][VECTORS];                                                        \
    const float *ar[ROWS];                                                                   \
    for (int r = 0; r < ROWS; ++r) {                                                         \
        int64_t row = r < rows ? r : rows - 1;                                               \
        ar[r] = a + row * a_row;                                                             \
        for (int v = 0; v < VECTORS; ++v) {                                                  \
            NAME##_vector zero = {0};                                                        \
            if (accumulate)                                                                  \
                acc[r][v] = *(const NAME##_vector *)(c + row * c_row + v * VL);              \
            else                                                                             \
                acc[r][v] = zero + (bias ? bias[row] : 0.0f);                                \
        }                                                                                    \
    }                                                                                        \
    for (int64_t t = 0; t < terms; ++t) {                                                    \
        const NAME##_vector *x = (const NAME##_vector *)(b + t * b_row);                     \
        for (int r = 0; r < ROWS; ++r)                                                       \
            for (int v = 0; v < VECTORS; ++v)                                                \
                acc[r][v] += ar[r][t] * x[v];                                                \
    }                                                                                        \
    for (int r = 0; r < ROWS && r < rows; ++r)                                               \
        for (int v = 0; v < VECTORS; ++v)                                                    \
            *(NAME##_vector *)(c + r * c_row + v * VL) = acc[r][v];                          \
}

/* An image's patches (C K K, positions) from in (C, H, W): the outputs' first `rows` rows of
 * `cols` positions */
#define CONV_PATCHES_FUNCTION(NAME, TARGET)                                                  \
TARGET static void NAME(int64_t C, int64_t H, int64_t W, int64_t K, int64_t rows,            \
                        int64_t cols, int64_t positions, const float *image, float *patches) { \
    for (int64_t c = 0; c < C; ++c)                                                          \
        for (int64_t ky = 0; ky < K; ++ky)                                                   \
            for (int64_t kx = 0; kx < K; ++kx) {                                             \
                float *row = patches + ((c * K + ky) * K + kx) * positions;                  \
                for (int64_t oy = 0; oy < rows; ++oy) {                                      \
                    const float *from = image + (c * H + oy + ky) * W + kx;                  \
                    int64_t ox = 0; /* 8 floats a move: rows are short (8 in the LeNet) */   \
                    for (; ox + 8 <= cols; ox += 8)                                          \
                        memcpy(row + oy * cols + ox, from + ox, 8 * sizeof(float));          \
                    for (; ox < cols; ++ox)                                                  \
                        row[oy * cols + ox] = from[ox];                                      \
                }                                                                            \
            }                                                                                \
}

typedef void (*gemm_tile_function)(int64_t, int64_t, const float *, int64_t, const float *,
                                   int, const float *, int64_t, float *, int64_t);
typedef void (*conv_patches_function)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                      int64_t, const float *, float *);

/* Tiles of ROWS by VECTORS vectors, as many sums as the registers hold: 24 of AVX-512's 32
 * registers, 12 of AVX2's 16 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONV_AVX512 __attribute__((target("avx512f")))
#define CONV_AVX2 __attribute__((target("avx2,fma")))
GEMM_TILE_FUNCTION(gemm_tile_avx512_6, 16, 4, 6, CONV_AVX512)
GEMM_TILE_FUNCTION(gemm_tile_avx512_5, 16, 4, 5, CONV_AVX512)
GEMM_TILE_FUNCTION(gemm_tile_avx512_4, 16, 4, 4, CONV_AVX512)
GEMM_TILE_FUNCTION(gemm_tile_avx2_6, 8, 2, 6, CONV_AVX2)
GEMM_TILE_FUNCTION(gemm_tile_avx2_5, 8, 2, 5, CONV_AVX2)
GEMM_TILE_FUNCTION(gemm_tile_avx2_4, 8, 2, 4, CONV_AVX2)
CONV_PATCHES_FUNCTION(conv_patches_avx512, CONV_AVX512)
CONV_PATCHES_FUNCTION(conv_patches_avx2, CONV_AVX2)
#endif
GEMM_TILE_FUNCTION(gemm_tile_plain_6, 4, 2, 6, )
GEMM_TILE_FUNCTION(gemm_tile_plain_5, 4, 2, 5, )
GEMM_TILE_FUNCTION(gemm_tile_plain_4, 4, 2, 4, )
CONV_PATCHES_FUNCTION(conv_patches_plain, )

/* The widest kernels the CPU has, of at most `widest` floats a vector (16, 8 or 4: the tests
 * run each width the CPU has): `width` the columns a tile sums, `level` 2, 1 or 0 (AVX-512,
 * AVX2, plain C) */
typedef struct {
    int64_t width, vector; /* floats a tile's columns, a vector's */
    int level;
    gemm_tile_function tiles[3]; /* of 6, 5 and 4 rows */
    conv_patches_function patches;
} conv_kernels;

static inline conv_kernels conv_kernels_for(int64_t widest) {
    conv_kernels k = {8, 4, 0, {gemm_tile_plain_6, gemm_tile_plain_5, gemm_tile_plain_4},
                      conv_patches_plain};
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (widest >= 16 && __builtin_cpu_supports("avx512f")) {
        conv_kernels wide = {64, 16, 2,
                             {gemm_tile_avx512_6, gemm_tile_avx512_5, gemm_tile_avx512_4},
                             conv_patches_avx512};
        k = wide;
    } else if (widest >= 8 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        conv_kernels avx2 = {16, 8, 1, {gemm_tile_avx2_6, gemm_tile_avx2_5, gemm_tile_avx2_4},
                             conv_patches_avx2};
        k = avx2;
    }
#endif
    return k;
}

/* Of tiles of 6, 5 and 4 rows, the one that repeats the fewest rows to cover `rows`, the
 * larger on a tie (5 for the LeNet's 20 and 50 channels): its index in conv_kernels.tiles */
static inline int choose_rows(int64_t rows) {
    static const int64_t candidates[] = {6, 5, 4};
    int best = 0;
    for (int i = 1; i < 3; ++i)
        if ((rows + candidates[i] - 1) / candidates[i] * candidates[i]
            < (rows + candidates[best] - 1) / candidates[best] * candidates[best])
            best = i;
    return best;
}

/* c (m, n; row stride c_row) = start + a (m, terms; a_row) b (terms, n; b_row), start as a
 * tile's; n a whole number of `k->width` */
static inline void conv_gemm(const conv_kernels *k, int64_t m, int64_t n, int64_t terms,
                             const float *a, int64_t a_row, const float *bias, int accumulate,
                             const float *b, int64_t b_row, float *c, int64_t c_row) {
    int chosen = choose_rows(m);
    int64_t rows = 6 - chosen;
    for (int64_t j = 0; j < n; j += k->width)
        for (int64_t i = 0; i < m; i += rows)
            k->tiles[chosen](terms, m - i < rows ? m - i : rows, a + i * a_row, a_row,
                             bias ? bias + i : NULL, accumulate, b + j, b_row,
                             c + i * c_row + j, c_row);
}

/* n rounded up to a whole number of tiles of `width` */
static inline int64_t conv_padded(int64_t n, int64_t width) {
    return (n + width - 1) / width * width;
}

#endif
