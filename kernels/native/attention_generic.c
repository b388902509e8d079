/* Decode attention's rows on the plain C path (attention_rows.h): each float16 of the cache widened
 * on its own (attention_lanes.h's lb_f16, exact). The path of a CPU without AVX2, and of
 * LLMBUS_ISA=generic. */
#define ROWS_NAME lb_attn_rows_generic
#define WIDE 0
#include "attention_rows.h"

void lb_attn_round_generic(const float *x, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = lb_f16(lb_f16_np(x[i]));
}
