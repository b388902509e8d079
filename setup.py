"""Builds the optional native quantized-matmul library (kernels/native) beside the pure-Python packages.

The library is plain C loaded with ctypes, so it needs no Python headers at run time; it is built
without -march so one binary runs on any x86-64 (wider paths are picked at run time). A machine
without a C compiler still installs: kernels.qmatmul then computes with numpy.
"""

from setuptools import Extension, setup

NATIVE = "kernels/native/"

setup(
    ext_modules=[
        Extension(
            "kernels._qmatmul_native",
            sources=[NATIVE + "qmatmul.c", NATIVE + "qmatmul_avx2.c", NATIVE + "qmatmul_avx512.c"],
            depends=[NATIVE + "qmatmul.h", NATIVE + "qmatmul_impl.h"],
            # -ffp-contract=off: dequantize as ggml does (multiply, round, add, round), never fused.
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno", "-std=c11", "-fvisibility=hidden"],
            optional=True,
        )
    ],
)
