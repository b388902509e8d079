/* A run of the library's ops in one call: a layer loop's steps without a trip through Python each. */
#ifndef LB_PROGRAM_H
#define LB_PROGRAM_H

#include <stdint.h>

#if defined(__GNUC__)
#define LB_PROGRAM_API __attribute__((visibility("default")))
#else
#define LB_PROGRAM_API
#endif

/* An op is 16 words: its code, then its function's arguments in their order, each in one word
 * (pointers and integers as int64, a float argument as the bits of a double). */
enum {
    LB_OP_QMATMUL = 1,      /* lb_qmatmul(kind, x, T, K, w, N, out) */
    LB_OP_RMS_NORM = 2,     /* lb_rms_norm(h, delta or 0, w, T, D, eps, out) */
    LB_OP_ROPE_KV = 3,      /* lb_rope_write_kv(qkv, T, H, KVH, Dh, n_rot, cos, sin, pages, slots, k, v, num_pages, page, q) */
    LB_OP_ATTEND = 4,       /* lb_attend_decode(q, k, v, table, lens, S, H, KVH, Dh, page, n_pages, num_pages, window, scale, out) */
    LB_OP_ADD_BIAS = 5,     /* lb_add_bias(x, b, T, D) */
    LB_OP_NORM_HEADS = 6,   /* lb_rms_norm_heads(x, T, stride, heads, Dh, w, eps) */
    LB_OP_GEGLU = 7,        /* lb_geglu(gate_up, T, F, table, out) */
    LB_OP_ADD = 8,          /* a[i] += b[i] for i < n: (a, b, n) */
    LB_OP_COPY_COLS = 9,    /* dst[t, c] = src[t, c] for t < T, c < n, rows dst_stride floats apart: (src, T, n, dst, dst_stride) */
    LB_OP_SWIGLU = 10,      /* lb_swiglu(gate_up, T, F, out) */
    LB_OP_WORDS = 16
};

enum { LB_PROGRAM_EOP = -20 };   /* an unknown op code */

/* Runs ops[0 .. n) in order; stops at the first op that returns an error and returns that error,
 * with the op's index in *failed. 0 when all ran. */
LB_PROGRAM_API int lb_run_ops(const int64_t *ops, int64_t n, int64_t *failed);

/* lb_run_ops that also adds each op's wall time in nanoseconds to ns[i] (profiling: the ops timed
 * where they run, between the others, not alone). */
LB_PROGRAM_API int lb_run_ops_timed(const int64_t *ops, int64_t n, int64_t *failed, int64_t *ns);

#endif
