/* What the K kinds' batch tiles share, written once: qk_avx2.c and qk_avx512.c each include it after
 * their own vtile (C weight rows against H groups of 8 rows of x, in lb_qk_pairs' layout) and LANES,
 * with QK_BATCH_C8 and QK_BATCH_C16 defined: the weight rows a tile takes against 8 and 16 rows of x
 * on that path. */
#ifndef LB_QK_BATCH_H
#define LB_QK_BATCH_H

/* nn weight rows from w against H groups from g0: C at a time, then the rest one by one. */
INLINE void vrows(int kind, int C, int H, const lb_batch_x *x, int64_t g0, const uint8_t *w, int64_t nn, int64_t N, float *out0) {
    const int64_t row_bytes = x->nb * lb_qk_block_bytes(kind);
    int64_t n = 0;
    for (; n + C <= nn; n += C) vtile(kind, C, H, x, g0, w + n * row_bytes, row_bytes, out0 + n, N);
    for (; n < nn; n++) vtile(kind, 1, H, x, g0, w + n * row_bytes, row_bytes, out0 + n, N);
}

#define V_ROWS(KIND) \
    static TGT void vrows_##KIND##_1(const lb_batch_x *x, int64_t g, const uint8_t *w, int64_t nn, int64_t N, float *o) { vrows(KIND, QK_BATCH_C8, 1, x, g, w, nn, N, o); } \
    static TGT void vrows_##KIND##_2(const lb_batch_x *x, int64_t g, const uint8_t *w, int64_t nn, int64_t N, float *o) { vrows(KIND, QK_BATCH_C16, 2, x, g, w, nn, N, o); }
V_ROWS(12)
V_ROWS(13)
V_ROWS(14)

/* Rows 0 .. 8G - 1 of x: NB weight rows at a time (kept in L2) against every 16 rows, then 8. */
static int batch(int kind, const lb_act_k *a, int64_t G, const uint8_t *w, int64_t N, float *out) {
    lb_batch_x x;
    if (lb_batch_x_init(&x, a, G, &LANES) != LB_OK) return LB_ENOMEM;
    void (*f1)(const lb_batch_x *, int64_t, const uint8_t *, int64_t, int64_t, float *) =
        kind == LB_Q4_K ? vrows_12_1 : kind == LB_Q5_K ? vrows_13_1 : vrows_14_1;
    void (*f2)(const lb_batch_x *, int64_t, const uint8_t *, int64_t, int64_t, float *) =
        kind == LB_Q4_K ? vrows_12_2 : kind == LB_Q5_K ? vrows_13_2 : vrows_14_2;
    const int64_t row_bytes = a->nb * lb_qk_block_bytes(kind), NB = G > 2 ? 32 : N;
    for (int64_t n = 0; n < N; n += NB) {
        const int64_t nn = N - n < NB ? N - n : NB;
        for (int64_t g = 0; g < G; g += 2)
            (G - g >= 2 ? f2 : f1)(&x, g, w + n * row_bytes, nn, N, out + 8 * g * N + n);
    }
    lb_batch_x_free(&x);
    return LB_OK;
}

#endif
