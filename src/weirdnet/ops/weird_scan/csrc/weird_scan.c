/*
 * Fused CPU kernels for the Weird-attention weighted log-step scan (weirdnet).
 *
 * Compiled at first use by weirdnet/ops/weird_scan/cpu.py and called through ctypes;
 * no Python or PyTorch headers are needed.  Every function works on raw pointers to
 * tensors whose last (channel) dimension is contiguous.
 *
 * The scan is the running-max ("online softmax") form of docs/design.md §8.  The
 * state of one channel at one position is (m, h, u) with H = e^m * h, U = e^m * u.
 * Level k (shift s = 2^k, log-weight c_k) combines position i with position i - s:
 *     m' = m_{i-s} + c_k;  d = m_i - m'
 *     d >= 0:  (h, u)_i = (h, u)_i + e^{-d} (h, u)_{i-s}
 *     d <  0:  (h, u)_i = e^{d} (h, u)_i + (h, u)_{i-s};  m_i = m'
 * A padded (masked) source starts as (NEG, 0, 1): its weight e^{NEG - M} is exactly 0
 * next to any real token, and a prefix made only of padding yields O = 0/u = 0.
 *
 * Work is split into "units": one batch row times one block of LANES channels.  The
 * forward copies a unit into a lane-interleaved local buffer (position-major, LANES
 * channels per row), runs all levels there and writes the result back.  The backward,
 * which keeps the state before every level, transposes a unit into channel rows and
 * scans one channel at a time, so those states stay in cache (weird_scan_impl.h); where
 * a channel's logits allow it, with one fixed scale instead of the running max.
 * Threads (from Python) take disjoint unit ranges.  Channels [0, n_causal) are scanned
 * causally, channels [n_causal, D) anti-causally (suffix scan); the reversal is done by the
 * index mapping used when loading and storing.
 *
 * Determinism: built with -ffp-contract=off, and exp/log are written with plain IEEE
 * arithmetic, so a value depends only on the values it is computed from, never on
 * its lane or on vectorisation.  That is what makes the decoding step bitwise equal to
 * the full causal pass, and every output bitwise independent of later positions.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16

/* Inlined at every call, so that a constant flag argument specialises the body. */
#define WN_INLINE static inline __attribute__((always_inline))

typedef int64_t i64;

/* ------------------------------------------------------------------ */
/* exp / log in plain arithmetic (vectorisable, lane-independent).      */
/* ------------------------------------------------------------------ */

static inline float wn_expf(float x) {
    /* Cody-Waite reduction + cephes polynomial; < 2 ulp.  exp(x) = 0 for x < -87
     * (a flush below the normal range), NaN propagates. */
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    float nn = n == n ? n : 0.0f;
    union { uint32_t i; float f; } s;
    s.i = (uint32_t)((int32_t)nn + 127) << 23;
    float res = p * s.f;
    return x < -87.0f ? 0.0f : res;
}

static inline float wn_logf(float x) {
    /* log for finite x > 0 (here x = u >= 1). */
    union { float f; uint32_t i; } v;
    v.f = x;
    int32_t e = (int32_t)((v.i >> 23) & 0xff) - 127;
    v.i = (v.i & 0x007fffffu) | 0x3f800000u; /* mantissa in [1, 2) */
    float m = v.f;
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    float ef = (float)(e + big);
    float f = m - 1.0f;
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    y = y + ef * -2.12194440e-4f;
    y = y - 0.5f * z;
    return f + y + ef * 0.693359375f;
}

static inline double wn_exp(double x) { return exp(x); }
static inline double wn_log(double x) { return log(x); }

/* ------------------------------------------------------------------ */
/* Unit geometry                                                         */
/* ------------------------------------------------------------------ */

/* Units are ordered (batch, block): consecutive units read neighbouring channels of one
 * batch row, so a thread walks each input tensor in memory order (with the batch row
 * outermost, the hardware prefetcher keeps up; block-major order cost the backward a
 * quarter of its time in cache misses at L = 64).  Blocks never straddle channel n_causal. */
static inline i64 n_blocks_of(i64 n_causal, i64 D) {
    return (n_causal + LANES - 1) / LANES + (D - n_causal + LANES - 1) / LANES;
}

static inline void unit_geometry(i64 unit, i64 D, i64 n_causal, i64 *b, i64 *d0, i64 *nl,
                                 int *rev) {
    i64 nf = (n_causal + LANES - 1) / LANES;
    i64 nblk = n_blocks_of(n_causal, D);
    i64 blk = unit % nblk;
    *b = unit / nblk;
    if (blk < nf) {
        *d0 = blk * LANES;
        *nl = n_causal - *d0 < LANES ? n_causal - *d0 : LANES;
        *rev = 0;
    } else {
        *d0 = n_causal + (blk - nf) * LANES;
        *nl = D - *d0 < LANES ? D - *d0 : LANES;
        *rev = 1;
    }
}

/* Distance between a unit's channel rows (in elements): L rounded up to a multiple of 32,
 * plus 32 when that is a multiple of 512, so that no two of the LANES rows written
 * together fall on the same cache sets (a power-of-two stride put all of them there). */
static inline i64 row_stride(i64 L) {
    i64 ld = (L + 31) / 32 * 32;
    return ld % 512 == 0 ? ld + 32 : ld;
}

/* Sum of an adjoint level's n partial sums of d log_w, in their fixed order. */
static inline double wn_sum_parts(const double *part, int n) {
    double total = 0.0;
    for (int j = 0; j < n; j++) total += part[j];
    return total;
}

/* A unit's canonical document ids (doc: (B, L) int64) in scan order (reversed for rev),
 * or NULL without packed documents. */
static const i64 *scan_order_doc(const i64 *doc, i64 L, i64 b, int rev, i64 *buf) {
    if (!doc) return NULL;
    for (i64 p = 0; p < L; p++) buf[p] = doc[b * L + (rev ? L - 1 - p : p)];
    return buf;
}

static void *wn_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

/* ------------------------------------------------------------------ */
/* The kernels, written once (weird_scan_impl.h) for float and double.   */
/* ------------------------------------------------------------------ */

#define WN_T float
#define WN_NAME(x) x##_f32
#define WN_EXP wn_expf
#define WN_LOG wn_logf
#define WN_ABS fabsf
#define WN_NEG -1e30f
#define WN_LIN_SPREAD 60.0
#define WN_LIN_LOG_MAX 85.0
#include "weird_scan_impl.h"
#undef WN_T
#undef WN_NAME
#undef WN_EXP
#undef WN_LOG
#undef WN_ABS
#undef WN_NEG
#undef WN_LIN_SPREAD
#undef WN_LIN_LOG_MAX

#define WN_T double
#define WN_NAME(x) x##_f64
#define WN_EXP wn_exp
#define WN_LOG wn_log
#define WN_ABS fabs
#define WN_NEG -1e300
#define WN_LIN_SPREAD 600.0
#define WN_LIN_LOG_MAX 700.0
#include "weird_scan_impl.h"

/* Number of work units (batch row x block of LANES channels) for Python to split. */
i64 scan_units(i64 B, i64 D, i64 n_causal) { return B * n_blocks_of(n_causal, D); }
