/*
 * Fused CPU kernels for the short causal depthwise convolution (weirdnet).
 *
 * Compiled at first use by weirdnet/ops/short_conv/cpu.py and called through ctypes.
 * On x (B, L, D), channels contiguous, with taps w (k, D) and bias b (D) or NULL:
 *
 *     y[t] = b + w[0] * x[t-k+1] + w[1] * x[t-k+2] + ... + w[k-1] * x[t]
 *
 * summed in exactly that order (bias first, then the taps from the oldest), where a
 * position before the sequence reads the state (B, k-1, D) given with it, or 0.  A zero
 * is multiplied like any other input, so an inf or NaN weight gives what a convolution
 * over zero padding gives.  With packed documents (doc (B, L), canonical segment ids,
 * and no state) a tap outside position t's document, or before the sequence, is left
 * out of the sum, so each document gets exactly what it gets alone.  Built with -ffp-contract=off: each output depends only on
 * its own inputs, never on the work split, the lane or the sequence length, which keeps
 * a decoding step bitwise equal to the full pass.
 *
 * Work is split into units of one batch row times WN_CONV_UNIT positions; threads (from
 * Python) take disjoint unit ranges.  The backward writes dx and, per unit, float64
 * partial sums of dw and db (the products of two float32 numbers are exact in float64);
 * short_conv_reduce adds the units' partials in unit order, so the weight gradient does
 * not depend on the thread count either.
 */
#include <stdint.h>
#include <string.h>

typedef int64_t i64;

#define WN_CONV_UNIT 1024

i64 short_conv_units(i64 B, i64 L) { return B * ((L + WN_CONV_UNIT - 1) / WN_CONV_UNIT); }

/* Sum the units' partials (n_units, n) in unit order into out (n). */
void short_conv_reduce(const double *partial, i64 n_units, i64 n, double *out) {
    memset(out, 0, (size_t)n * sizeof(double));
    for (i64 u = 0; u < n_units; u++) {
        const double *p = partial + u * n;
        for (i64 j = 0; j < n; j++) out[j] += p[j];
    }
}

/* Whether tap position s (may be < 0) counts for output t: always without documents;
 * with them, only inside t's document. */
static inline int same_doc(const i64 *doc, i64 b, i64 L, i64 s, i64 t) {
    return !doc || (s >= 0 && doc[b * L + s] == doc[b * L + t]);
}

#define WN_DEFINE_SHORT_CONV(T, SFX)                                                        \
/* Row s (may be < 0: the state, or NULL for zeros) of batch row b. */                     \
static inline const T *src_row_##SFX(const T *x, i64 xb, i64 xl, const T *state, i64 sb,  \
                                     i64 sl, i64 k, i64 b, i64 s) {                        \
    if (s >= 0) return x + b * xb + s * xl;                                                 \
    return state ? state + b * sb + (k - 1 + s) * sl : NULL;                               \
}                                                                                           \
                                                                                            \
int short_conv_fwd_##SFX(const T *x, i64 xb, i64 xl, const T *state, i64 sb, i64 sl,       \
                         const i64 *doc, const T *w, const T *bias, T *y, i64 B, i64 L,    \
                         i64 D, i64 k, i64 u0, i64 u1) {                                    \
    (void)B;                                                                                \
    const i64 per = (L + WN_CONV_UNIT - 1) / WN_CONV_UNIT;                                  \
    for (i64 u = u0; u < u1; u++) {                                                         \
        const i64 b = u / per, t0 = (u % per) * WN_CONV_UNIT;                               \
        const i64 t1 = t0 + WN_CONV_UNIT < L ? t0 + WN_CONV_UNIT : L;                       \
        for (i64 t = t0; t < t1; t++) {                                                     \
            T *restrict out = y + (b * L + t) * D;                                          \
            for (i64 d = 0; d < D; d++) out[d] = bias ? bias[d] : (T)0;                     \
            for (i64 i = 0; i < k; i++) {                                                   \
                const i64 s = t - (k - 1) + i;                                              \
                if (!same_doc(doc, b, L, s, t)) continue;                                   \
                const T *restrict wi = w + i * D;                                           \
                const T *restrict src = src_row_##SFX(x, xb, xl, state, sb, sl, k, b, s);   \
                if (src)                                                                    \
                    for (i64 d = 0; d < D; d++) out[d] += wi[d] * src[d];                   \
                else                                                                        \
                    for (i64 d = 0; d < D; d++) out[d] += wi[d] * (T)0;                     \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    return 0;                                                                               \
}                                                                                           \
                                                                                            \
/* dx (B, L, D) contiguous; partial (units, k + 1, D): rows 0..k-1 dw, row k db. */        \
int short_conv_bwd_##SFX(const T *x, i64 xb, i64 xl, const T *state, i64 sb, i64 sl,       \
                         const i64 *doc, const T *w, const T *g, i64 gb, i64 gl, T *dx,    \
                         double *partial, i64 B, i64 L, i64 D, i64 k, i64 u0, i64 u1) {     \
    (void)B;                                                                                \
    const i64 per = (L + WN_CONV_UNIT - 1) / WN_CONV_UNIT;                                  \
    for (i64 u = u0; u < u1; u++) {                                                         \
        const i64 b = u / per, t0 = (u % per) * WN_CONV_UNIT;                               \
        const i64 t1 = t0 + WN_CONV_UNIT < L ? t0 + WN_CONV_UNIT : L;                       \
        double *restrict acc = partial + u * (k + 1) * D;                                   \
        memset(acc, 0, (size_t)((k + 1) * D) * sizeof(double));                             \
        for (i64 t = t0; t < t1; t++) {                                                     \
            /* dx[t] = sum_i w[i] * g[t + k - 1 - i], the outputs that read x[t] */        \
            T *restrict out = dx + (b * L + t) * D;                                         \
            for (i64 d = 0; d < D; d++) out[d] = (T)0;                                      \
            for (i64 i = 0; i < k; i++) {                                                   \
                const i64 s = t + (k - 1) - i;                                              \
                if (s >= L || !same_doc(doc, b, L, t, s)) continue;                         \
                const T *restrict wi = w + i * D;                                           \
                const T *restrict gs = g + b * gb + s * gl;                                 \
                for (i64 d = 0; d < D; d++) out[d] += wi[d] * gs[d];                        \
            }                                                                               \
            /* dw[i] += g[t] * x[t - k + 1 + i]; db += g[t] */                              \
            const T *restrict gt = g + b * gb + t * gl;                                     \
            double *restrict db = acc + k * D;                                              \
            for (i64 d = 0; d < D; d++) db[d] += (double)gt[d];                             \
            for (i64 i = 0; i < k; i++) {                                                   \
                const i64 s = t - (k - 1) + i;                                              \
                if (!same_doc(doc, b, L, s, t)) continue;                                   \
                double *restrict dwi = acc + i * D;                                         \
                const T *restrict src = src_row_##SFX(x, xb, xl, state, sb, sl, k, b, s);   \
                if (src)                                                                    \
                    for (i64 d = 0; d < D; d++) dwi[d] += (double)gt[d] * (double)src[d];   \
                else                                                                        \
                    for (i64 d = 0; d < D; d++) dwi[d] += (double)gt[d] * 0.0;              \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    return 0;                                                                               \
}

WN_DEFINE_SHORT_CONV(float, f32)
WN_DEFINE_SHORT_CONV(double, f64)
