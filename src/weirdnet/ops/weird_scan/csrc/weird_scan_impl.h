/*
 * Kernel bodies of weird_scan.c, included once per element type.  The includer defines
 *   WN_T (float or double), WN_NAME(x) (x##_f32 or x##_f64), WN_EXP, WN_LOG, WN_ABS and
 *   WN_NEG (the log-weight of a padded source).
 *
 * Non-finite inputs (weird_scan's docstring has the semantics) are handled where a token
 * enters the scan (token_state) and where the adjoint starts (adjoint_init): the level
 * loops are unchanged, and NaN propagates through them by itself.
 */
/* Merge partner (mp, hp, up) into (*m, *h, *u): keep the larger log-scale, scale the other
 * side by e^{-|m - mp|}.  The only combine step: every level and the decoder use it. */
static inline void WN_NAME(combine)(WN_T *m, WN_T *h, WN_T *u, WN_T mp, WN_T hp, WN_T up) {
    WN_T mi = *m;
    WN_T d = mi - mp;
    WN_T e = WN_EXP(-WN_ABS(d));
    int keep = d >= 0;
    WN_T st = keep ? (WN_T)1 : e, sp = keep ? e : (WN_T)1;
    *h = *h * st + hp * sp;
    *u = *u * st + up * sp;
    *m = keep ? mi : mp;
}

/* (m, h, u) of one token entering the scan:
 *   finite A:       (A, V + 0 V, 1)    (V + 0 V is V, or NaN for a NaN or infinite V)
 *   A = -inf:       (WN_ZW, 0 V, 0)    a zero weight: H = U = 0 (0/0 = NaN if alone)
 *   A NaN or +inf:  (A, NaN, 1)        NaN from there on, like a softmax over +inf
 *   padding:        (WN_NEG, 0, 1)     exactly 0 next to anything real, O = 0 if alone
 * WN_ZW lies between padding and any real logit: a zero-weight token drops out next to a
 * real one, bitwise like padding, and turns a padding-only window into 0/0. */
#define WN_ZW (WN_NEG / 4)
static inline void WN_NAME(token_state)(WN_T a, WN_T v, int real, WN_T *m, WN_T *h, WN_T *u) {
    int zero = a == -(WN_T)INFINITY;
    WN_T vv = v + v * (WN_T)0;
    WN_T hh = zero ? vv * (WN_T)0 : vv;
    *m = real ? (zero ? (WN_T)WN_ZW : a) : (WN_T)WN_NEG;
    *h = real ? (a < (WN_T)INFINITY ? hh : (WN_T)NAN) : (WN_T)0;
    *u = real && zero ? (WN_T)0 : (WN_T)1;
}

/* One level, out of place: dst[p] = src[p] (+) W * src[p-s]; lanes innermost.  With seg
 * (the unit's document ids in scan order) a position whose partner lies in another
 * document keeps its state. */
static void WN_NAME(level_fwd)(const WN_T *restrict sm, const WN_T *restrict sh,
                            const WN_T *restrict su, WN_T *restrict dm, WN_T *restrict dh,
                            WN_T *restrict du, i64 L, i64 s, const WN_T *restrict c,
                            const i64 *restrict seg) {
    i64 head = (s < L ? s : L) * LANES;
    memcpy(dm, sm, head * sizeof(WN_T));
    memcpy(dh, sh, head * sizeof(WN_T));
    memcpy(du, su, head * sizeof(WN_T));
    for (i64 p = s; p < L; p++) {
        const i64 x = p * LANES, y = (p - s) * LANES;
        if (seg && seg[p] != seg[p - s]) {
            memcpy(dm + x, sm + x, LANES * sizeof(WN_T));
            memcpy(dh + x, sh + x, LANES * sizeof(WN_T));
            memcpy(du + x, su + x, LANES * sizeof(WN_T));
            continue;
        }
        for (int l = 0; l < LANES; l++) {
            WN_T m = sm[x + l], h = sh[x + l], u = su[x + l];
            WN_NAME(combine)(&m, &h, &u, sm[y + l] + c[l], sh[y + l], su[y + l]);
            dm[x + l] = m;
            dh[x + l] = h;
            du[x + l] = u;
        }
    }
}

/* Load one unit into the lane buffer: (A, V, 1), padding (WN_NEG, 0, 1), lanes past the
 * unit's channels (0, 0, 1).  A non-finite A or V at a real position (rare) is noticed on
 * the way through a per-lane sum of (A - A) + (V - V), which turns NaN; only then does a
 * second pass give every token its token_state.  Finite inputs pay two subtractions. */
static void WN_NAME(load_unit)(const WN_T *a, const WN_T *v, i64 asb, i64 asl, i64 vsb, i64 vsl,
                            const uint8_t *mask, i64 L, i64 b, i64 d0, i64 nl, int rev,
                            WN_T *m, WN_T *h, WN_T *u) {
    WN_T seen[LANES];
    for (int l = 0; l < LANES; l++) seen[l] = (WN_T)0;
    for (i64 p = 0; p < L; p++) {
        i64 i = rev ? L - 1 - p : p;
        int valid = mask ? mask[b * L + i] != 0 : 1;
        const WN_T *ap = a + b * asb + i * asl + d0, *vp = v + b * vsb + i * vsl + d0;
        for (int l = 0; l < LANES; l++) {
            int real = valid && l < nl;
            WN_T al = ap[l < nl ? l : 0], vl = vp[l < nl ? l : 0];
            m[p * LANES + l] = real ? al : (l < nl ? WN_NEG : (WN_T)0);
            h[p * LANES + l] = real ? vl : (WN_T)0;
            u[p * LANES + l] = (WN_T)1;
            seen[l] += real ? (al - al) + (vl - vl) : (WN_T)0;
        }
    }
    int finite = 1;
    for (int l = 0; l < LANES; l++) finite &= seen[l] == seen[l];
    if (finite) return;
    for (i64 p = 0; p < L; p++) {
        i64 i = rev ? L - 1 - p : p;
        int valid = mask ? mask[b * L + i] != 0 : 1;
        const WN_T *ap = a + b * asb + i * asl + d0, *vp = v + b * vsb + i * vsl + d0;
        for (i64 l = 0; l < nl; l++) {
            const i64 x = p * LANES + l;
            WN_NAME(token_state)(ap[l], vp[l], valid, &m[x], &h[x], &u[x]);
        }
    }
}

static void WN_NAME(load_logw)(const WN_T *logw, i64 D, i64 k, i64 d0, i64 nl, WN_T *c) {
    for (int l = 0; l < LANES; l++) c[l] = l < nl ? logw[k * D + d0 + l] : (WN_T)0;
}

/* Forward: out = H / U for units [u0, u1).  out is (B, L, D) contiguous. */
int WN_NAME(scan_fwd)(const WN_T *a, i64 asb, i64 asl, const WN_T *v, i64 vsb, i64 vsl,
                   const WN_T *logw, const uint8_t *mask, const i64 *doc, WN_T *out, i64 B,
                   i64 L, i64 D, i64 n_causal, i64 nlev, i64 u0, i64 u1) {
    size_t n = (size_t)L * LANES;
    WN_T *buf = (WN_T *)wn_alloc(6 * n * sizeof(WN_T) + (doc ? (size_t)L * sizeof(i64) : 0));
    if (!buf) return 1;
    i64 *sbuf = (i64 *)(buf + 6 * n);
    WN_T c[LANES];
    for (i64 unit = u0; unit < u1; unit++) {
        i64 b, d0, nl;
        int rev;
        unit_geometry(unit, D, n_causal, &b, &d0, &nl, &rev);
        const i64 *seg = scan_order_doc(doc, L, b, rev, sbuf);
        WN_T *cur = buf, *nxt = buf + 3 * n;
        WN_NAME(load_unit)(a, v, asb, asl, vsb, vsl, mask, L, b, d0, nl, rev, cur, cur + n,
                        cur + 2 * n);
        for (i64 k = 0; k < nlev; k++) {
            WN_NAME(load_logw)(logw, D, k, d0, nl, c);
            WN_NAME(level_fwd)(cur, cur + n, cur + 2 * n, nxt, nxt + n, nxt + 2 * n, L,
                            (i64)1 << k, c, seg);
            WN_T *t = cur; cur = nxt; nxt = t;
        }
        const WN_T *h = cur + n, *u = cur + 2 * n;
        for (i64 p = 0; p < L; p++) {
            i64 i = rev ? L - 1 - p : p;
            WN_T *op = out + (b * L + i) * D + d0;
            for (i64 l = 0; l < nl; l++) op[l] = h[p * LANES + l] / u[p * LANES + l];
        }
    }
    free(buf);
    return 0;
}

/* The backward works on channel rows.  It keeps the state before every level, and those
 * of a whole lane-interleaved unit (3 (nlev + 2) L LANES values: 50 MB at L = 16K) leave
 * the caches at long L.  So a unit is transposed into channel-major rows of L values and
 * each channel is scanned on its own: the levels vectorise along the positions, and one
 * channel's states (3 (nlev + 2) L values, 3 MB at 16K) stay in cache.  Measured against
 * the lane-interleaved backward it replaced (lab/benchmarks/scan_kernel_ab.py): 1.16x faster
 * at L = 1K, 1.36x at 4K, 1.44x at 16K, with 8x less workspace.  The forward keeps no
 * states and stays interleaved. */

/* Rows [0, nl) of L values, ld apart: rows[l * ld + p] = x[b, i(p), d0 + l]; i(p)
 * reverses for rev.  ld = row_stride(L) keeps the rows off the same cache sets. */
#define WN_AHEAD 8
static void WN_NAME(gather_rows)(const WN_T *x, i64 xsb, i64 xsl, i64 L, i64 ld, i64 b,
                                 i64 d0, i64 nl, int rev, WN_T *restrict rows) {
    for (i64 p = 0; p < L; p++) {
        const WN_T *xp = x + b * xsb + (rev ? L - 1 - p : p) * xsl + d0;
        if (p + WN_AHEAD < L) { /* the row WN_AHEAD positions on: a strided walk */
            i64 ahead = rev ? L - 1 - p - WN_AHEAD : p + WN_AHEAD;
            __builtin_prefetch(x + b * xsb + ahead * xsl + d0);
        }
        if (nl == LANES) /* a constant trip count: the loads vectorise */
            for (int l = 0; l < LANES; l++) rows[l * ld + p] = xp[l];
        else
            for (i64 l = 0; l < nl; l++) rows[l * ld + p] = xp[l];
    }
}

/* The inverse: out[b, i(p), d0 + l] = rows[l * ld + p]; out is (B, L, D) contiguous. */
static void WN_NAME(scatter_rows)(const WN_T *restrict rows, WN_T *out, i64 L, i64 ld, i64 D,
                                  i64 b, i64 d0, i64 nl, int rev) {
    for (i64 p = 0; p < L; p++) {
        WN_T *op = out + (b * L + (rev ? L - 1 - p : p)) * D + d0;
        if (nl == LANES)
            for (int l = 0; l < LANES; l++) op[l] = rows[l * ld + p];
        else
            for (i64 l = 0; l < nl; l++) op[l] = rows[l * ld + p];
    }
}

/* One channel's state before any level: (A, V, 1), padding (WN_NEG, 0, 1).  A non-finite
 * A or V at a real position (rare) is noticed through a sum of (A - A) + (V - V), which
 * turns NaN; only then does a second pass give every token its token_state.  Finite
 * inputs pay two subtractions. */
static void WN_NAME(init_channel)(const WN_T *restrict a, const WN_T *restrict v,
                                  const uint8_t *valid, i64 L, WN_T *restrict m,
                                  WN_T *restrict h, WN_T *restrict u) {
    WN_T seen = 0;
    for (i64 p = 0; p < L; p++) {
        int real = valid ? valid[p] != 0 : 1;
        m[p] = real ? a[p] : (WN_T)WN_NEG;
        h[p] = real ? v[p] : (WN_T)0;
        u[p] = (WN_T)1;
        seen += real ? (a[p] - a[p]) + (v[p] - v[p]) : (WN_T)0;
    }
    if (seen == seen) return;
    for (i64 p = 0; p < L; p++)
        WN_NAME(token_state)(a[p], v[p], valid ? valid[p] != 0 : 1, &m[p], &h[p], &u[p]);
}

/* One level of one channel, out of place: dst[p] = src[p] (+) W * src[p - s]; with seg
 * (document ids in scan order) only where p - s lies in p's document. */
static void WN_NAME(level_fwd_row)(const WN_T *restrict sm, const WN_T *restrict sh,
                                   const WN_T *restrict su, WN_T *restrict dm,
                                   WN_T *restrict dh, WN_T *restrict du, i64 L, i64 s,
                                   WN_T c, const i64 *restrict seg) {
    i64 head = s < L ? s : L;
    memcpy(dm, sm, head * sizeof(WN_T));
    memcpy(dh, sh, head * sizeof(WN_T));
    memcpy(du, su, head * sizeof(WN_T));
    if (!seg) {
        for (i64 p = head; p < L; p++) {
            WN_T m = sm[p], h = sh[p], u = su[p];
            WN_NAME(combine)(&m, &h, &u, sm[p - s] + c, sh[p - s], su[p - s]);
            dm[p] = m;
            dh[p] = h;
            du[p] = u;
        }
        return;
    }
    for (i64 p = head; p < L; p++) {
        WN_T m = sm[p], h = sh[p], u = su[p];
        WN_NAME(combine)(&m, &h, &u, sm[p - s] + c, sh[p - s], su[p - s]);
        int join = seg[p] == seg[p - s];
        dm[p] = join ? m : sm[p];
        dh[p] = join ? h : sh[p];
        du[p] = join ? u : su[p];
    }
}

/* The (mask) validity of a unit's positions in scan order (reversed for rev), or NULL. */
static const uint8_t *WN_NAME(scan_order_mask)(const uint8_t *mask, i64 L, i64 b, int rev,
                                               uint8_t *buf) {
    if (!mask) return NULL;
    for (i64 p = 0; p < L; p++) buf[p] = mask[b * L + (rev ? L - 1 - p : p)] != 0;
    return buf;
}

/* One adjoint level of one channel, out of place (the mirror of level_fwd):
 *   returns sum_p W e^{fm_p + sm_{p+s}} (fh_p s1_{p+s} - fu_p s2_{p+s})   (d log_w, level k)
 *   dst[p] = src[p] (+) W * src[p+s]
 * where (fm, fh, fu) is the forward state before this level and (sm, s1, s2) the adjoint
 * state after the levels above it.  The sum runs in float64 over ACC partial sums in a
 * fixed order, so it vectorises and its value does not depend on how.
 *
 * The body is compiled twice, for docs = 0 (seg is NULL) and docs = 1: a run-time
 * `!seg || seg[x] == seg[y]` in the vectorised loop became masked loads of seg[x] and
 * seg[y] from the NULL base, which AVX-512 executes with fault suppression: a microcode
 * assist per vector, 77% of the running-max backward's time (issue 61: fwd+bwd 10x the
 * forward on wide-spread log_w).  With docs a constant, no load of seg is left. */
#define WN_ACC 16
WN_INLINE double WN_NAME(level_bwd_body)(const WN_T *restrict fm, const WN_T *restrict fh,
                                         const WN_T *restrict fu, const WN_T *restrict sm,
                                         const WN_T *restrict s1, const WN_T *restrict s2,
                                         WN_T *restrict dm, WN_T *restrict d1,
                                         WN_T *restrict d2, i64 L, i64 s, WN_T c,
                                         const i64 *restrict seg, const int docs) {
    double part[WN_ACC];
    for (int j = 0; j < WN_ACC; j++) part[j] = 0.0;
    i64 body = L > s ? L - s : 0;
    for (i64 p0 = 0; p0 < body; p0 += WN_ACC) {
        int width = body - p0 < WN_ACC ? (int)(body - p0) : WN_ACC;
        for (int j = 0; j < width; j++) {
            const i64 x = p0 + j, y = x + s;
            int join = !docs || seg[x] == seg[y]; /* no adjoint across a document start */
            WN_T mq = sm[y] + c;
            WN_T w = WN_EXP(mq + fm[x]);
            WN_T term = w * (fh[x] * s1[y] - fu[x] * s2[y]);
            part[j] += join ? (double)term : 0.0;
            WN_T m = sm[x], b1 = s1[x], b2 = s2[x];
            WN_NAME(combine)(&m, &b1, &b2, mq, s1[y], s2[y]);
            dm[x] = join ? m : sm[x];
            d1[x] = join ? b1 : s1[x];
            d2[x] = join ? b2 : s2[x];
        }
    }
    memcpy(dm + body, sm + body, (L - body) * sizeof(WN_T));
    memcpy(d1 + body, s1 + body, (L - body) * sizeof(WN_T));
    memcpy(d2 + body, s2 + body, (L - body) * sizeof(WN_T));
    return wn_sum_parts(part, WN_ACC);
}
#undef WN_ACC

static double WN_NAME(level_bwd_row)(const WN_T *restrict fm, const WN_T *restrict fh,
                                     const WN_T *restrict fu, const WN_T *restrict sm,
                                     const WN_T *restrict s1, const WN_T *restrict s2,
                                     WN_T *restrict dm, WN_T *restrict d1,
                                     WN_T *restrict d2, i64 L, i64 s, WN_T c,
                                     const i64 *restrict seg) {
    if (seg)
        return WN_NAME(level_bwd_body)(fm, fh, fu, sm, s1, s2, dm, d1, d2, L, s, c, seg, 1);
    return WN_NAME(level_bwd_body)(fm, fh, fu, sm, s1, s2, dm, d1, d2, L, s, c, NULL, 0);
}

/* Adjoint state of one channel from its final forward state, in place over it:
 *   BH = e^bm b1 = G / U,   BU = -e^bm b2 = -G O / U,   bm = -log U
 * (positions with no real token in reach get bm = NEG and a zero adjoint; a NaN output
 * gets bm = NaN, which makes the adjoint of its whole window NaN).  Returns NaN when the
 * channel has a NaN output, else 0: it poisons the channel's d log_w. */
static WN_T WN_NAME(adjoint_init_row)(WN_T *restrict m, WN_T *restrict h,
                                      WN_T *restrict u, const WN_T *restrict g, i64 L) {
    const WN_T half_neg = WN_NEG / 2;
    WN_T bad = (WN_T)0;
    for (i64 p = 0; p < L; p++) {
        WN_T o = h[p] / u[p];
        int nan_o = o != o;
        int live = m[p] > half_neg || nan_o;
        WN_T gi = live ? g[p] : (WN_T)0;
        WN_T lu = WN_LOG(u[p]);
        WN_T bm = nan_o ? o : -(m[p] + lu);
        bad += o * (WN_T)0;
        m[p] = live ? bm : WN_NEG;
        h[p] = gi;
        u[p] = gi * o;
    }
    return bad;
}

/* ---- The backward of one channel in the linear domain -------------------------------
 * The running-max form pays an exp at every combine, and the backward needs three per
 * level (recomputed forward, adjoint combine, d log_w weight).  When a channel's logits
 * span a modest range, one fixed scale R = max A + sum_k max(c_k, 0) serves all of it:
 *     F[p] = (sum_j e^{A_j - R} Wpath V_j, sum_j e^{A_j - R} Wpath)  every term <= 1
 * and the adjoint S[p] = (G / U, G O / U) (U = F's second part), so that a level is
 *     F'[p] = F[p] + W F[p - s],   S'[p] = S[p] + W S[p + s]
 *     d log_w = W sum_p (F_h[p] S_1[p + s] - F_u[p] S_2[p + s])
 * (the e^{+-R} of F and S cancel): no exp inside the levels, one per token at the start.
 * It is used only when nothing can overflow or lose precision to underflow:
 *   - every A, V, G and c_k finite (A = -inf, a zero weight, counts as padding), at
 *     least one weighted token; with -inf logits in the row, every U > 0;
 *   - spread = max A - min A + sum_k max(c_k, 0) <= WN_LIN_SPREAD, so every real
 *     position's own term (its U) is at least e^{-spread};
 *   - every position with G != 0 has U >= e^{-WN_LIN_SPREAD} (a padded position far
 *     from any real token fails this);
 *   - WN_LIN_SPREAD + sum max(c_k, 0) + 2 log L + log max|G| + 2 log max(|V|, 1) stays
 *     below WN_LIN_LOG_MAX, a bound on every product formed (the type's overflow).
 * Otherwise (rare: logits spread over more than 60 in float32) the channel runs the
 * running-max backward.  Both compute the same gradient up to rounding. */

/* Whether position p carries weight: real (unmasked) and A != -inf.  A -inf logit is a
 * zero weight, exactly like padding. */
static inline int WN_NAME(weighted)(const uint8_t *valid, const WN_T *a, i64 p) {
    return (valid ? valid[p] != 0 : 1) && a[p] != -(WN_T)INFINITY;
}

/* (max A, min A) over weighted positions, max |V| and max |G|; returns 0 unless all are
 * finite and some position is weighted.  *zeros: whether a real position has A = -inf.
 * Each reduction keeps LANES partial results (position p in part p mod LANES): without a
 * mask, whole blocks of LANES positions are branch-free with a constant trip count, so
 * they vectorise.  Max and min do not depend on the order, and the finiteness sum is 0
 * or NaN in any order. */
static int WN_NAME(row_ranges)(const WN_T *restrict a, const WN_T *restrict v,
                               const WN_T *restrict g, const uint8_t *valid, i64 L,
                               WN_T *amax, WN_T *amin, WN_T *vmax, WN_T *gmax, int *zeros) {
    const WN_T inf = (WN_T)INFINITY;
    WN_T hi[LANES], lo[LANES], vm[LANES], gm[LANES], seen[LANES];
    int nz[LANES];
    for (int l = 0; l < LANES; l++) {
        hi[l] = -inf; lo[l] = inf; vm[l] = gm[l] = seen[l] = (WN_T)0; nz[l] = 0;
    }
    i64 p0 = 0;
    for (; !valid && p0 + LANES <= L; p0 += LANES) {
        const WN_T *restrict ab = a + p0, *restrict vb = v + p0, *restrict gb = g + p0;
        for (int l = 0; l < LANES; l++) {
            WN_T ar = ab[l], vp = WN_ABS(vb[l]), gp = WN_ABS(gb[l]);
            int live = ar != -inf;
            WN_T ah = live ? ar : -inf, al = live ? ar : inf, a0 = live ? ar : (WN_T)0;
            hi[l] = ah > hi[l] ? ah : hi[l];
            lo[l] = al < lo[l] ? al : lo[l];
            vm[l] = vp > vm[l] ? vp : vm[l];
            gm[l] = gp > gm[l] ? gp : gm[l];
            nz[l] |= !live;
            seen[l] += ((a0 - a0) + (vp - vp)) + (gp - gp);
        }
    }
    for (i64 p = p0; p < L; p++) { /* the tail, and every position of a masked row */
        int l = (int)(p % LANES), real = valid ? valid[p] != 0 : 1;
        int live = WN_NAME(weighted)(valid, a, p);
        WN_T ap = live ? a[p] : (WN_T)0, vp = WN_ABS(v[p]), gp = WN_ABS(g[p]);
        hi[l] = live && ap > hi[l] ? ap : hi[l];
        lo[l] = live && ap < lo[l] ? ap : lo[l];
        vm[l] = real && vp > vm[l] ? vp : vm[l];
        gm[l] = gp > gm[l] ? gp : gm[l];
        nz[l] |= real && !live;
        seen[l] += (real ? (ap - ap) + (vp - vp) : (WN_T)0) + (gp - gp);
    }
    WN_T h = hi[0], o = lo[0], vmx = vm[0], gmx = gm[0], sn = seen[0];
    int z = nz[0];
    for (int l = 1; l < LANES; l++) {
        h = hi[l] > h ? hi[l] : h;
        o = lo[l] < o ? lo[l] : o;
        vmx = vm[l] > vmx ? vm[l] : vmx;
        gmx = gm[l] > gmx ? gm[l] : gmx;
        sn += seen[l];
        z |= nz[l];
    }
    *amax = h; *amin = o; *vmax = vmx; *gmax = gmx; *zeros = z;
    return sn == sn && h >= o;
}

/* The forward states before every level in the linear domain, (H, U) of level k at
 * st + 2 k n; E = e^{A - R} (0 for padding) is U of level 0. */
static void WN_NAME(lin_forward)(const WN_T *restrict a, const WN_T *restrict v,
                                 const uint8_t *valid, const i64 *restrict seg,
                                 const WN_T *restrict w, WN_T R, i64 L, i64 nlev, i64 n,
                                 WN_T *st) {
    WN_T *h0 = st, *u0 = st + n;
    for (i64 p = 0; p < L; p++) {
        int live = WN_NAME(weighted)(valid, a, p);
        WN_T e = live ? WN_EXP(a[p] - R) : (WN_T)0;
        u0[p] = e;
        h0[p] = e * (live ? v[p] : (WN_T)0);
    }
    for (i64 k = 0; k < nlev; k++) {
        const WN_T *restrict sh = st + 2 * k * n, *restrict su = sh + n;
        WN_T *restrict dh = st + 2 * (k + 1) * n, *restrict du = dh + n;
        i64 s = (i64)1 << k, head = s < L ? s : L;
        WN_T wk = w[k];
        memcpy(dh, sh, head * sizeof(WN_T));
        memcpy(du, su, head * sizeof(WN_T));
        for (i64 p = head; p < L; p++) {
            WN_T wp = !seg || seg[p] == seg[p - s] ? wk : (WN_T)0; /* all terms finite */
            dh[p] = sh[p] + wp * sh[p - s];
            du[p] = su[p] + wp * su[p - s];
        }
    }
}

/* The adjoint at the outputs, (s1, s2) = (G / U, G O / U) from the final forward state
 * (h, u); 0 at positions with U = 0.  Returns 1 when a position with G != 0 has U below
 * `tiny` (its precision would be lost), or, with `zeros` (the row has -inf logits), when
 * any U is 0: such a window may hold only -inf tokens, whose output is NaN. */
static int WN_NAME(lin_adjoint_init)(const WN_T *restrict h, const WN_T *restrict u,
                                     const WN_T *restrict g, WN_T *restrict s1,
                                     WN_T *restrict s2, i64 L, WN_T tiny, int zeros) {
    int lost = 0;
    for (i64 p = 0; p < L; p++) {
        WN_T up = u[p], gp = g[p];
        int live = up > (WN_T)0;
        lost |= (gp != (WN_T)0 || zeros) && !(up >= tiny);
        WN_T r = gp / (live ? up : (WN_T)1);
        WN_T o = h[p] / (live ? up : (WN_T)1);
        s1[p] = live ? r : (WN_T)0;
        s2[p] = live ? r * o : (WN_T)0;
    }
    return lost;
}

/* One adjoint level, out of place: dst[p] = src[p] + W src[p + s]; returns
 * sum_p (F_h[p] S_1[p + s] - F_u[p] S_2[p + s]) in float64 (ACC partial sums in a fixed
 * order, as level_bwd_row's: part[j] takes the positions p = j mod ACC, in order).
 * Without documents the loop is branch-free, so it vectorises. */
#define WN_ACC 16
static double WN_NAME(lin_level_bwd)(const WN_T *restrict fh, const WN_T *restrict fu,
                                     const WN_T *restrict s1, const WN_T *restrict s2,
                                     WN_T *restrict d1, WN_T *restrict d2, i64 L, i64 s,
                                     WN_T wk, const i64 *restrict seg) {
    double part[WN_ACC];
    for (int j = 0; j < WN_ACC; j++) part[j] = 0.0;
    i64 body = L > s ? L - s : 0;
    if (!seg) {
        for (i64 p0 = 0; p0 < body; p0 += WN_ACC) {
            int width = body - p0 < WN_ACC ? (int)(body - p0) : WN_ACC;
            const WN_T *restrict h = fh + p0, *restrict u = fu + p0;
            const WN_T *restrict a1 = s1 + p0, *restrict a2 = s2 + p0;
            const WN_T *restrict b1 = s1 + p0 + s, *restrict b2 = s2 + p0 + s;
            WN_T *restrict o1 = d1 + p0, *restrict o2 = d2 + p0;
            for (int j = 0; j < width; j++) {
                part[j] += (double)(h[j] * b1[j] - u[j] * b2[j]);
                o1[j] = a1[j] + wk * b1[j];
                o2[j] = a2[j] + wk * b2[j];
            }
        }
    }
    for (i64 p0 = 0; seg && p0 < body; p0 += WN_ACC) {
        int width = body - p0 < WN_ACC ? (int)(body - p0) : WN_ACC;
        for (int j = 0; j < width; j++) {
            const i64 x = p0 + j, y = x + s;
            int join = !seg || seg[x] == seg[y];
            WN_T wx = join ? wk : (WN_T)0; /* every term is finite on this path */
            part[j] += join ? (double)(fh[x] * s1[y] - fu[x] * s2[y]) : 0.0;
            d1[x] = s1[x] + wx * s1[y];
            d2[x] = s2[x] + wx * s2[y];
        }
    }
    memcpy(d1 + body, s1 + body, (L - body) * sizeof(WN_T));
    memcpy(d2 + body, s2 + body, (L - body) * sizeof(WN_T));
    return wn_sum_parts(part, WN_ACC);
}
#undef WN_ACC

/* The linear-domain backward of one channel (ar, vr take dA, dV; dl[k] = d log_w of
 * level k), or 1, with nothing written, when the channel's range does not allow it.
 * c: the channel's log-weights (nlev); st: room for 2 (nlev + 2) rows of n. */
static int WN_NAME(row_bwd_linear)(WN_T *restrict ar, WN_T *restrict vr,
                                   const WN_T *restrict gr, const uint8_t *valid,
                                   const i64 *seg, const WN_T *c, i64 L, i64 nlev, i64 n,
                                   WN_T *st, double *dl) {
    WN_T amax, amin, vmax, gmax;
    int zeros;
    if (!WN_NAME(row_ranges)(ar, vr, gr, valid, L, &amax, &amin, &vmax, &gmax, &zeros))
        return 1;
    WN_T w[64];
    double cpos = 0.0;
    for (i64 k = 0; k < nlev; k++) {
        if (!(c[k] < (WN_T)INFINITY) || c[k] != c[k]) return 1;
        cpos += c[k] > (WN_T)0 ? (double)c[k] : 0.0;
        w[k] = WN_EXP(c[k]);
    }
    double spread = (double)amax - (double)amin + cpos;
    double bound = WN_LIN_SPREAD + cpos + 2.0 * log((double)L + 1.0)
                   + log((double)gmax > 1e-300 ? (double)gmax : 1e-300)
                   + 2.0 * log((double)vmax > 1.0 ? (double)vmax : 1.0);
    if (!(spread <= WN_LIN_SPREAD) || !(bound <= WN_LIN_LOG_MAX)) return 1;
    WN_T R = (WN_T)((double)amax + cpos);
    WN_NAME(lin_forward)(ar, vr, valid, seg, w, R, L, nlev, n, st);
    /* The final forward state (level nlev) is read once, then serves as a buffer. */
    WN_T *spare = st + 2 * nlev * n, *adj = st + 2 * (nlev + 1) * n;
    if (WN_NAME(lin_adjoint_init)(spare, spare + n, gr, adj, adj + n, L,
                                  (WN_T)exp(-WN_LIN_SPREAD), zeros))
        return 1;
    for (i64 k = nlev - 1; k >= 0; k--) {
        const WN_T *fw = st + 2 * k * n;
        double sum = WN_NAME(lin_level_bwd)(fw, fw + n, adj, adj + n, spare, spare + n, L,
                                            (i64)1 << k, w[k], seg);
        WN_T *t = adj; adj = spare; spare = t;
        dl[k] = (double)w[k] * sum;
    }
    /* dV_j = E_j S_1[j],  dA_j = V_j dV_j - E_j S_2[j];  E is U of level 0. */
    const WN_T *e = st + n, *s1 = adj, *s2 = adj + n;
    for (i64 p = 0; p < L; p++) {
        WN_T gv = e[p] * s1[p];
        WN_T vp = vr[p];
        int live = e[p] != (WN_T)0;
        vr[p] = live ? gv : (WN_T)0;
        ar[p] = live ? vp * gv - e[p] * s2[p] : (WN_T)0;
    }
    return 0;
}

/* Backward for units [u0, u1), one channel at a time: recompute the forward levels
 * (keeping the state before every level), then run the mirrored scan of the adjoint,
 * accumulating d log_w level by level.  da, dv: (B, L, D) contiguous.  dlogw:
 * (B, nlev, D) float64, per batch row. */
int WN_NAME(scan_bwd)(const WN_T *a, i64 asb, i64 asl, const WN_T *v, i64 vsb, i64 vsl,
                      const WN_T *logw, const uint8_t *mask, const i64 *doc, const WN_T *g,
                      i64 gsb, i64 gsl, WN_T *da, WN_T *dv, double *dlogw, i64 B, i64 L,
                      i64 D, i64 n_causal, i64 nlev, i64 u0, i64 u1) {
    size_t n = (size_t)row_stride(L);
    /* rows of A, V, G; nlev + 1 forward states (the last one becomes an adjoint buffer)
     * + 1 adjoint buffer; the unit's document ids (with doc) and mask */
    size_t values = (3 * LANES + 3 * (size_t)(nlev + 2)) * n;
    size_t seg_bytes = doc ? n * sizeof(i64) : 0;
    WN_T *buf = (WN_T *)wn_alloc(values * sizeof(WN_T) + seg_bytes + n);
    if (!buf) return 1;
    WN_T *arows = buf, *vrows = buf + LANES * n, *grows = buf + 2 * LANES * n;
    WN_T *st = buf + 3 * LANES * n; /* state before level k at st + 3 * k * n */
    i64 *sbuf = (i64 *)(buf + values);
    uint8_t *vbuf = (uint8_t *)(buf + values) + seg_bytes;
    for (i64 unit = u0; unit < u1; unit++) {
        i64 b, d0, nl;
        int rev;
        unit_geometry(unit, D, n_causal, &b, &d0, &nl, &rev);
        WN_NAME(gather_rows)(a, asb, asl, L, n, b, d0, nl, rev, arows);
        WN_NAME(gather_rows)(v, vsb, vsl, L, n, b, d0, nl, rev, vrows);
        WN_NAME(gather_rows)(g, gsb, gsl, L, n, b, d0, nl, rev, grows);
        const uint8_t *valid = WN_NAME(scan_order_mask)(mask, L, b, rev, vbuf);
        const i64 *seg = scan_order_doc(doc, L, b, rev, sbuf);
        for (i64 l = 0; l < nl; l++) {
            WN_T *ar = arows + l * n, *vr = vrows + l * n;
            WN_T c[64];
            double dl[64];
            for (i64 k = 0; k < nlev; k++) c[k] = logw[k * D + d0 + l];
            if (WN_NAME(row_bwd_linear)(ar, vr, grows + l * n, valid, seg, c, L, nlev, n,
                                        st, dl) == 0) {
                for (i64 k = 0; k < nlev; k++) dlogw[(b * nlev + k) * D + d0 + l] = dl[k];
                continue;
            }
            WN_NAME(init_channel)(ar, vr, valid, L, st, st + n, st + 2 * n);
            for (i64 k = 0; k < nlev; k++) {
                WN_T *cur = st + 3 * k * n, *nxt = st + 3 * (k + 1) * n;
                WN_NAME(level_fwd_row)(cur, cur + n, cur + 2 * n, nxt, nxt + n, nxt + 2 * n,
                                       L, (i64)1 << k, logw[k * D + d0 + l], seg);
            }
            WN_T *adj = st + 3 * nlev * n, *spare = st + 3 * (nlev + 1) * n;
            WN_T bad = WN_NAME(adjoint_init_row)(adj, adj + n, adj + 2 * n, grows + l * n, L);
            for (i64 k = nlev - 1; k >= 0; k--) {
                const WN_T *fw = st + 3 * k * n;
                double sum = WN_NAME(level_bwd_row)(fw, fw + n, fw + 2 * n, adj, adj + n,
                                                    adj + 2 * n, spare, spare + n,
                                                    spare + 2 * n, L, (i64)1 << k,
                                                    logw[k * D + d0 + l], seg);
                WN_T *t = adj; adj = spare; spare = t;
                dlogw[(b * nlev + k) * D + d0 + l] = sum + (double)bad;
            }
            const WN_T *bm = adj, *b1 = adj + n, *b2 = adj + 2 * n;
            /* dV_j = e^{A_j + bm_j} b1_j,  dA_j = V_j dV_j - e^{A_j + bm_j} b2_j; the rows
             * of A and V take dA and dV. */
            for (i64 p = 0; p < L; p++) {
                int real = valid ? valid[p] != 0 : 1;
                WN_T e = real ? WN_EXP(ar[p] + bm[p]) : (WN_T)0;
                WN_T gv = e * b1[p];
                WN_T vp = vr[p];
                vr[p] = real ? gv : (WN_T)0;
                ar[p] = real ? vp * gv - e * b2[p] : (WN_T)0;
            }
        }
        WN_NAME(scatter_rows)(arows, da, L, n, D, b, d0, nl, rev);
        WN_NAME(scatter_rows)(vrows, dv, L, n, D, b, d0, nl, rev);
    }
    free(buf);
    return 0;
}

/* Incremental causal decoding of WN_T tokens at positions t0 .. t0+WN_T-1.
 * ring{m,h,u}: level k holds 2^k slots of (B, D) at offset (2^k - 1) * B * D; slot
 * (t mod 2^k) of level k holds the state of position t before level k.  Same combine,
 * same order as level_fwd: outputs are bitwise those of the full pass. */
int WN_NAME(scan_extend)(const WN_T *a, i64 asb, i64 asl, const WN_T *v, i64 vsb, i64 vsl,
                      const WN_T *logw, const uint8_t *valid_bt, WN_T *ringm, WN_T *ringh, WN_T *ringu,
                      WN_T *out, i64 B, i64 Tn, i64 D, i64 nlev, i64 t0) {
    WN_T *m = (WN_T *)wn_alloc(3 * (size_t)D * sizeof(WN_T));
    if (!m) return 1;
    WN_T *h = m + D, *u = m + 2 * D;
    for (i64 tt = 0; tt < Tn; tt++) {
        const i64 t = t0 + tt;
        for (i64 b = 0; b < B; b++) {
            int valid = valid_bt ? valid_bt[b * Tn + tt] != 0 : 1;
            const WN_T *ap = a + b * asb + tt * asl, *vp = v + b * vsb + tt * vsl;
            for (i64 d = 0; d < D; d++)
                WN_NAME(token_state)(ap[d], vp[d], valid, &m[d], &h[d], &u[d]);
            for (i64 k = 0; k < nlev; k++) {
                const i64 s = (i64)1 << k;
                const i64 off = ((s - 1) + (t & (s - 1))) * B * D + b * D;
                WN_T *rm = ringm + off, *rh = ringh + off, *ru = ringu + off;
                const WN_T *c = logw + k * D;
                if (t >= s) {
                    for (i64 d = 0; d < D; d++) {
                        WN_T mi = m[d], mp = rm[d] + c[d];
                        WN_T hp = rh[d], up = ru[d];
                        rm[d] = mi;
                        rh[d] = h[d];
                        ru[d] = u[d];
                        WN_NAME(combine)(&m[d], &h[d], &u[d], mp, hp, up);
                    }
                } else {
                    memcpy(rm, m, D * sizeof(WN_T));
                    memcpy(rh, h, D * sizeof(WN_T));
                    memcpy(ru, u, D * sizeof(WN_T));
                }
            }
            WN_T *op = out + (b * Tn + tt) * D;
            for (i64 d = 0; d < D; d++) op[d] = h[d] / u[d];
        }
    }
    free(m);
    return 0;
}

#undef WN_ZW
#undef WN_AHEAD
