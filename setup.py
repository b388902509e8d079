"""Builds the optional native kernel library (kernels/native: quantized matmul, decode attention).

The library is plain C loaded with ctypes, so it needs no Python headers at run time; it is built
without -march so one binary runs on any x86-64 (wider paths are picked at run time). A machine
without a C compiler still installs: kernels.qmatmul and the attention then compute with numpy.
"""

from setuptools import Extension, setup

NATIVE = "kernels/native/"

setup(
    ext_modules=[
        Extension(
            "kernels._native",
            sources=[NATIVE + "qmatmul.c", NATIVE + "qact.c", NATIVE + "qmatmul_avx2.c", NATIVE + "qmatmul_avx512.c",
                     NATIVE + "attention.c", NATIVE + "attention_generic.c", NATIVE + "attention_avx2.c",
                     NATIVE + "attention_avx512.c", NATIVE + "ops.c", NATIVE + "pool.c", NATIVE + "program.c", NATIVE + "swiglu.c",
                     NATIVE + "qk.c", NATIVE + "qk_generic.c", NATIVE + "qk_avx2.c", NATIVE + "qk_avx512.c", NATIVE + "q4_0_avx512.c",
                     NATIVE + "q4_0_avx2.c", NATIVE + "q4_0_tiles.c", NATIVE + "step.c", NATIVE + "stream_read.c"],
            depends=[NATIVE + "qmatmul.h", NATIVE + "qmatmul_impl.h", NATIVE + "attention.h", NATIVE + "attention_lanes.h", NATIVE + "attention_job.h", NATIVE + "attention_rows.h", NATIVE + "ops.h", NATIVE + "program.h", NATIVE + "pool.h", NATIVE + "qk.h", NATIVE + "qk_tiles.h", NATIVE + "qk_batch.h", NATIVE + "q32_tiles.h", NATIVE + "scales8.h", NATIVE + "sum8.h", NATIVE + "avx2.h", NATIVE + "avx512.h", NATIVE + "simde_avx512.h", NATIVE + "step.h", NATIVE + "norm_path.h"],
            libraries=["m"],
            extra_link_args=["-pthread"],
            # -ffp-contract=off: every product and sum rounds on its own, as in numpy (ops.c is bit-identical
            # to the numpy kernels, qact.c to kernels/qact.py), never fused.
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno", "-std=c11", "-fvisibility=hidden", "-pthread"],
            optional=True,
        )
    ],
)
