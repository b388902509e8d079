/* What the K kinds' vector paths share, written once: each of qk_avx2.c and qk_avx512.c includes it
 * after its own INLINE, kblock, unpack_k and k_dot (a block's integer sums against one row of x in 8
 * int32 lanes, Q4_K/Q5_K's min sums in *m), so this code is compiled for each path's instructions. */

/* Lane r of the result: the sum of v[r]'s lanes (exact). */
INLINE __m256i sum_lanes8(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));  /* per half: rows 0..3 */
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));  /* rows 4..7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The float16 at p in each of 8 weight rows (row_bytes apart), widened. */
INLINE __m256 f16x8(const uint8_t *p, int64_t row_bytes) {
    return _mm256_cvtph_ps(_mm_setr_epi16((short)lb_u16(p), (short)lb_u16(p + row_bytes), (short)lb_u16(p + 2 * row_bytes),
                                          (short)lb_u16(p + 3 * row_bytes), (short)lb_u16(p + 4 * row_bytes),
                                          (short)lb_u16(p + 5 * row_bytes), (short)lb_u16(p + 6 * row_bytes),
                                          (short)lb_u16(p + 7 * row_bytes)));
}

/* R (<= 4) rows of x from t0 against 8 weight rows from w0, lane c for weight row c: each row's block
 * sums met in one vector, then qk_generic.c's float steps for the 8 at once (so its bits): per block
 * acc += (d * d_x) * sumi, accm += (dmin * d_x) * summin; out = acc - accm. Each step reads a block of
 * every row, all over the tile's bytes: the next tile's (contiguous) are fetched into L2 (into L1 they
 * evicted the tile in use: Q6_K decode ran at 0.35x), 8 blocks' worth a step. */
INLINE void tile8_k(int kind, int R, const lb_act_k *a, int64_t t0, const uint8_t *w0, int64_t row_bytes, float *out0, int64_t N) {
    const int64_t nb = a->nb, bb = lb_qk_block_bytes(kind);
    __m256 acc[4], accm[4];
    for (int r = 0; r < R; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *ahead = (const char *)w0 + 8 * row_bytes + b * 8 * bb;
        for (int l = 0; l < 8 * bb; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        __m256i sv[4][8], mv[4][8];
        for (int c = 0; c < 8; c++) {
            kblock k;
            unpack_k(kind, w0 + c * row_bytes + b * bb, &k);
            for (int r = 0; r < R; r++) {
                const int64_t t = t0 + r;
                sv[r][c] = k_dot(kind, &k, a->q + t * a->K + b * QKK, a->bsums + (t * nb + b) * 16, &mv[r][c]);
            }
        }
        const uint8_t *head = w0 + b * bb;
        const __m256 d = f16x8(head + (kind == LB_Q6_K ? 208 : 0), row_bytes);
        const __m256 dmin = kind == LB_Q6_K ? _mm256_setzero_ps() : f16x8(head + 2, row_bytes);
        for (int r = 0; r < R; r++) {
            const __m256 dx = _mm256_set1_ps(a->d[(t0 + r) * nb + b]);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sum_lanes8(sv[r]))));
            if (kind != LB_Q6_K)
                accm[r] = _mm256_add_ps(accm[r], _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(sum_lanes8(mv[r]))));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out0 + r * N, _mm256_sub_ps(acc[r], accm[r]));
}

