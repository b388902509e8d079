"""Build llama.cpp's `ggml-rpc-server` and `llama-server` with GGML_RPC=ON from the llama.cpp source
inside the llama-cpp-python sdist the benches use, for bench/rpc_compare.py.

    python3 -m bench.rpc_build --out DIR [--version 0.3.36] [--jobs 2] [-- CMAKE_ARGS...]

The sdist is fetched with pip (`pip download --no-binary :all: --no-deps`) into DIR, unpacked
there and built in DIR/build for this CPU (GGML_NATIVE, as the llama-cpp-python the benches
compare against is built); the binaries land in DIR/build/bin (pass that as --llama-bin).
Nothing is written outside DIR.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
from pathlib import Path

TARGETS = ("ggml-rpc-server", "llama-server")
OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DGGML_NATIVE=ON",
           "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
           "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF",
           "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_APP=OFF")


def source(out: Path, version: str) -> Path:
    """The llama.cpp tree of the sdist, fetched and unpacked into `out` if not there yet."""
    tree = out / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if tree.is_dir():
        return tree
    sdist = out / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                        "-d", str(out), f"llama-cpp-python=={version}"], check=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(out, filter="data")
    return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--version", default="0.3.36")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("cmake_args", nargs="*", help="more cmake options (after --)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tree = source(args.out, args.version)
    build = args.out / "build"
    subprocess.run(["cmake", "-S", str(tree), "-B", str(build), *OPTIONS, *args.cmake_args], check=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(args.jobs), "--target", *TARGETS],
                   check=True, env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs)})
    print(build / "bin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
