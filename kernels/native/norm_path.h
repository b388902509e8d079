/* One code path's RMSNorm, for ops.c, which includes this once per path: NORM_PATH names the path
 * (the functions' prefix), NORM_TGT is its target attribute (empty: the build's own). A path's code
 * inlines only into its own functions, so each has its own copy of the sums too. */
#define NP_CAT_(a, b) a##_##b
#define NP_CAT(a, b) NP_CAT_(a, b)
#define NP_SUMSQ NP_CAT(NORM_PATH, pairwise_sumsq)
#define NP_ROW NP_CAT(NORM_PATH, norm_row)

/* Sum of a[i]^2 (each square rounded to float32) as numpy's pairwise sum adds them
 * (numpy/_core/src/umath/loops_utils.h.src), which np.mean uses along a contiguous axis:
 * eight running sums per block of at most 128 elements, halves above that. */
static NORM_TGT float NP_SUMSQ(const float *a, int64_t n)
{
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; i++)
            res += a[i] * a[i];
        return res;
    }
    if (n <= PW_BLOCK) {
        float r[8];
        for (int j = 0; j < 8; j++)
            r[j] = a[j] * a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j] * a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i] * a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return NP_SUMSQ(a, n2) + NP_SUMSQ(a + n2, n - n2);
}

/* out = x / sqrt(mean(x^2) + eps) * w over one row of n (out may be x). */
static inline NORM_TGT void NP_ROW(const float *x, const float *w, int64_t n, float eps, float *out)
{
    const float ms = NP_SUMSQ(x, n) / (float)n;
    const float inv = 1.0f / sqrtf(ms + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * inv) * w[i];
}

/* lb_rms_norm's rows (its arguments checked): h += delta first where given, then out = h normed. */
static NORM_TGT void NP_CAT(NORM_PATH, norm_rows)(float *h, const float *delta, const float *w, int64_t T,
                                                 int64_t D, float eps, float *out)
{
    for (int64_t t = 0; t < T; t++) {
        float *x = h + t * D, *o = out + t * D;
        if (delta)
            for (int64_t i = 0; i < D; i++)
                x[i] += delta[t * D + i];
        NP_ROW(x, w, D, eps, o);
    }
}

#undef NP_ROW
#undef NP_SUMSQ
#undef NP_CAT
#undef NP_CAT_
#undef NORM_TGT
#undef NORM_PATH
