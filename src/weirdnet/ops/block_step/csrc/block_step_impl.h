/*
 * Body of block_step.c, included once per element type.  The includer defines BS_T
 * (float or double), BS_NAME(x) (x##_f32 or x##_f64), BS_SQRT, BS_ERF and BS_SCAN_EXTEND
 * (the scan's decoding step for BS_T).
 */

/* The weights of one block; cpu.py fills it (field order and types must match its
 * ctypes Structure).  A NULL bias or LayerNorm affine pointer means none. */
typedef struct {
    i64 dim, d_ff, act;
    double eps_mix, eps_ffn;
    const BS_T *norm_mix_w, *norm_mix_b;
    const BS_T *a_w, *a_b, *v_w, *v_b, *o_w, *o_b;
    const BS_T *log_w;
    const BS_T *norm_ffn_w, *norm_ffn_b;
    const BS_T *inner_w, *inner_b, *outer_w, *outer_b;
} BS_NAME(block_weights);

/* sum_i w[i] x[i] in DOT_LANES partial sums, added pairwise: a fixed order. */
static inline BS_T BS_NAME(dot)(const BS_T *restrict w, const BS_T *restrict x, i64 n) {
    BS_T acc[DOT_LANES] = {0};
    i64 i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++) acc[j] += w[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += w[i] * x[i];
    for (int half = DOT_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; j++) acc[j] += acc[j + half];
    return acc[0];
}

/* y (B, n_out) = x (B, n_in) W^T + bias, W (n_out, n_in) row-major; each weight row is
 * read once for the whole batch. */
static void BS_NAME(linear)(const BS_T *restrict x, const BS_T *restrict w,
                            const BS_T *restrict bias, BS_T *restrict y, i64 B, i64 n_in,
                            i64 n_out) {
    for (i64 o = 0; o < n_out; o++) {
        const BS_T *row = w + o * n_in;
        BS_T b0 = bias ? bias[o] : (BS_T)0;
        for (i64 b = 0; b < B; b++) y[b * n_out + o] = b0 + BS_NAME(dot)(row, x + b * n_in, n_in);
    }
}

/* y (B, D) = LayerNorm(x) with weight g and bias beta (either may be NULL). */
static void BS_NAME(layer_norm)(const BS_T *restrict x, const BS_T *g, const BS_T *beta,
                                double eps, BS_T *restrict y, i64 B, i64 D) {
    for (i64 b = 0; b < B; b++) {
        const BS_T *xr = x + b * D;
        BS_T *yr = y + b * D;
        BS_T sum[DOT_LANES] = {0}, sq[DOT_LANES] = {0};
        for (i64 d = 0; d < D; d++) sum[d % DOT_LANES] += xr[d];
        for (int half = DOT_LANES / 2; half > 0; half /= 2)
            for (int j = 0; j < half; j++) sum[j] += sum[j + half];
        BS_T mean = sum[0] / (BS_T)D;
        for (i64 d = 0; d < D; d++) {
            BS_T c = xr[d] - mean;
            sq[d % DOT_LANES] += c * c;
        }
        for (int half = DOT_LANES / 2; half > 0; half /= 2)
            for (int j = 0; j < half; j++) sq[j] += sq[j + half];
        BS_T rstd = (BS_T)1 / BS_SQRT(sq[0] / (BS_T)D + (BS_T)eps);
        for (i64 d = 0; d < D; d++) {
            BS_T n = (xr[d] - mean) * rstd;
            yr[d] = (g ? n * g[d] : n) + (beta ? beta[d] : (BS_T)0);
        }
    }
}

static void BS_NAME(activate)(BS_T *x, i64 n, i64 act) {
    if (act == ACT_GELU) {
        for (i64 i = 0; i < n; i++)
            x[i] = (BS_T)0.5 * x[i] * ((BS_T)1 + BS_ERF(x[i] * (BS_T)0.70710678118654752440));
    } else {
        for (i64 i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : x[i] * (BS_T)0.01;
    }
}

/* x (B, D) += the block's mixer and feed-forward outputs for the token at position t0
 * of every sequence; ring{m,h,u} and nlev as scan_extend's.  Returns 0, or 1 when the
 * workspace cannot be allocated (x is then unchanged). */
int BS_NAME(block_step)(const BS_NAME(block_weights) *p, BS_T *x, i64 B, BS_T *ringm,
                        BS_T *ringh, BS_T *ringu, i64 nlev, i64 t0) {
    const i64 D = p->dim, F = p->d_ff;
    BS_T *norm = (BS_T *)wn_alloc((size_t)B * (4 * D + F) * sizeof(BS_T));
    if (!norm) return 1;
    BS_T *a = norm + B * D, *v = a + B * D, *o = v + B * D, *hidden = o + B * D;

    BS_NAME(layer_norm)(x, p->norm_mix_w, p->norm_mix_b, p->eps_mix, norm, B, D);
    BS_NAME(linear)(norm, p->a_w, p->a_b, a, B, D, D);
    BS_NAME(linear)(norm, p->v_w, p->v_b, v, B, D, D);
    if (BS_SCAN_EXTEND(a, D, 0, v, D, 0, p->log_w, NULL, ringm, ringh, ringu, o, B, 1, D, nlev,
                       t0) != 0) {
        free(norm);
        return 1;
    }
    BS_NAME(linear)(o, p->o_w, p->o_b, a, B, D, D); /* a: the mixer's output */
    for (i64 i = 0; i < B * D; i++) x[i] += a[i];

    BS_NAME(layer_norm)(x, p->norm_ffn_w, p->norm_ffn_b, p->eps_ffn, norm, B, D);
    BS_NAME(linear)(norm, p->inner_w, p->inner_b, hidden, B, D, F);
    BS_NAME(activate)(hidden, B * F, p->act);
    BS_NAME(linear)(hidden, p->outer_w, p->outer_b, a, B, F, D);
    for (i64 i = 0; i < B * D; i++) x[i] += a[i];
    free(norm);
    return 0;
}
