/* Decode attention's rows on the AVX-512 path (attention_rows.h): 16-lane value sums, 16 halves of
 * the cache widened an instruction (vcvtph2ps), exactly. In the test build that emulates AVX-512
 * (LB_SIMDE_AVX512) the same code is compiled for the build's own target, each half widened by
 * lb_f16: the same values, so the same bits. */
#if defined(__x86_64__) && defined(__GNUC__)
#ifdef LB_SIMDE_AVX512
#include <stdint.h>
#define KV16(p) ({ const uint16_t *kq_ = (p); v8 lo_ = KV8(kq_), hi_ = KV8(kq_ + 8);              \
                   (v16){lo_[0], lo_[1], lo_[2], lo_[3], lo_[4], lo_[5], lo_[6], lo_[7],           \
                         hi_[0], hi_[1], hi_[2], hi_[3], hi_[4], hi_[5], hi_[6], hi_[7]}; })
#else
#pragma GCC target("avx512f,f16c")
#include <immintrin.h>

#define KVF(p) _cvtsh_ss(*(p))
#define KV8(p) ((v8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define KV16(p) ((v16)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#endif

#define ROWS_NAME lb_attn_rows_avx512
#define WIDE 1
#include "attention_rows.h"
#endif
