/* Decode attention's rows on the AVX2 path (attention_rows.h): F16C widens 8 halves of the cache an
 * instruction (vcvtph2ps), exactly. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx2,f16c")
#include <immintrin.h>

#include "qmatmul_impl.h"

#define ROWS_NAME lb_attn_rows_avx2
#define WIDE 0
#define KVF(p) _cvtsh_ss(*(p))
#define KV8(p) ((v8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#include "attention_rows.h"

/* The AVX-512 path's too: F16C, 8 at a time (a NaN comes out quiet, still a NaN). */
void lb_attn_round_f16c(const float *x, float *out, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        out[i] = lb_f16(lb_f16_np(x[i]));
}
#endif
