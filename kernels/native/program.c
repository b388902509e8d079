/* lb_run_ops (program.h): each op calls the library function its code names, with its words as the
 * arguments, exactly as a ctypes call would. A decode step of the default model makes ~300 such calls;
 * from Python each costs 1-2 us of argument conversion and interpreter, here a switch. */
#include "program.h"

#include <string.h>
#include <time.h>

#include "attention.h"
#include "ops.h"
#include "qmatmul.h"

#define P(i, T) ((T)(intptr_t)o[i])

static float f(int64_t word) {
    double d;
    memcpy(&d, &word, sizeof d);
    return (float)d;
}

static int run_op(const int64_t *o) {
    switch (o[0]) {
    case LB_OP_QMATMUL:
        return lb_qmatmul((int)o[1], P(2, const float *), o[3], o[4], P(5, const uint8_t *), o[6], P(7, float *));
    case LB_OP_RMS_NORM:
        return lb_rms_norm(P(1, float *), P(2, const float *), P(3, const float *), o[4], o[5], f(o[6]), P(7, float *));
    case LB_OP_ROPE_KV:
        return lb_rope_write_kv(P(1, const float *), o[2], o[3], o[4], o[5], o[6], P(7, const float *),
                                P(8, const float *), P(9, const int64_t *), P(10, const int64_t *), P(11, uint16_t *),
                                P(12, uint16_t *), o[13], o[14], P(15, float *));
    case LB_OP_ATTEND:
        return lb_attend_decode(P(1, const float *), P(2, const uint16_t *), P(3, const uint16_t *), P(4, const int32_t *),
                                P(5, const int32_t *), o[6], o[7], o[8], o[9], o[10], o[11], o[12], o[13], f(o[14]),
                                P(15, float *));
    case LB_OP_ADD_BIAS:
        return lb_add_bias(P(1, float *), P(2, const float *), o[3], o[4]);
    case LB_OP_NORM_HEADS:
        return lb_rms_norm_heads(P(1, float *), o[2], o[3], o[4], o[5], P(6, const float *), f(o[7]));
    case LB_OP_GEGLU:
        return lb_geglu(P(1, const float *), o[2], o[3], P(4, const float *), P(5, float *));
    case LB_OP_SWIGLU:
        return lb_swiglu(P(1, const float *), o[2], o[3], P(4, float *));
    case LB_OP_ADD: {
        float *a = P(1, float *);
        const float *b = P(2, const float *);
        for (int64_t i = 0; i < o[3]; i++)
            a[i] += b[i];
        return 0;
    }
    case LB_OP_COPY_COLS: {
        const float *src = P(1, const float *);
        float *dst = P(4, float *);
        for (int64_t t = 0; t < o[2]; t++)
            memcpy(dst + t * o[5], src + t * o[3], (size_t)o[3] * sizeof(float));
        return 0;
    }
    default:
        return LB_PROGRAM_EOP;
    }
}

int lb_run_ops(const int64_t *ops, int64_t n, int64_t *failed) {
    for (int64_t i = 0; i < n; i++) {
        const int rc = run_op(ops + i * LB_OP_WORDS);
        if (rc) {
            *failed = i;
            return rc;
        }
    }
    return 0;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int lb_run_ops_timed(const int64_t *ops, int64_t n, int64_t *failed, int64_t *ns) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t t0 = now_ns();
        const int rc = run_op(ops + i * LB_OP_WORDS);
        ns[i] += now_ns() - t0;
        if (rc) {
            *failed = i;
            return rc;
        }
    }
    return 0;
}
