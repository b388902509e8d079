#!/usr/bin/env bash
# The GPU check of the GPU path (issue 34), on a GPU machine with no network, in under 5 minutes:
# the wheels carried in .whl/ and the default model's halves carried in .gpucheck/a and .gpucheck/b
# (bench/gpu_prepare.sh fetches both where there is a network; see there for the two device calls),
# then every GPU test (pytest -m gpu: the CUDA kernels against their references, graphs, the real
# model against llama.cpp's reference through one process, two cuda shard processes and
# `llmbus up --device cuda` over HTTP) and bench/gpu.py, whose table comes last.
#
# A model half arriving alone is kept in /tmp (the machine stays warm between two calls) and the
# script stops there; with no model at all it runs the tests that need none.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
STASH=/tmp/llmbus-gpucheck
export LLMBUS_CACHE=$STASH/cache PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4
mkdir -p "$STASH/parts" "$LLMBUS_CACHE/models"
t0=$(date +%s)

# The model: halves stashed as they come, joined once both are here and checked against its sha256.
for f in .gpucheck/*/model.gguf.*; do [ -e "$f" ] && cp "$f" "$STASH/parts/"; done
if [ -e "$STASH/parts/model.gguf.name" ]; then
    model="$LLMBUS_CACHE/models/$(cat "$STASH/parts/model.gguf.name")"
    if [ ! -e "$model" ]; then
        if [ -e "$STASH/parts/model.gguf.part0" ] && [ -e "$STASH/parts/model.gguf.part1" ]; then
            cat "$STASH/parts/model.gguf.part0" "$STASH/parts/model.gguf.part1" > "$model.tmp"
            if [ "$(sha256sum "$model.tmp" | cut -d' ' -f1)" = "$(cat "$STASH/parts/model.gguf.sha256")" ]; then
                mv "$model.tmp" "$model"
                echo "gpu_check: the default model is in place ($(basename "$model"))"
            else
                rm -f "$model.tmp"; echo "gpu_check: the model's halves do not join into its sha256" >&2; exit 1
            fi
        else
            echo "gpu_check: one half of the model stashed in $STASH; call again with the other"; exit 0
        fi
    fi
fi

# The packages this machine lacks, from the carried wheels, in a folder of their own.
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STASH/site" .whl/*.whl \
        || { echo "gpu_check: installing the carried wheels failed" >&2; exit 1; }
    export PYTHONPATH="$STASH/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import cupy, zmq, zeroconf, gguf; print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion())" \
    || { echo "gpu_check: a package is missing (see bench/gpu_prepare.sh)" >&2; exit 1; }

TESTS=(tests/gpu tests/engine/test_gpu.py tests/shard/test_device.py tests/sampling/test_sampling_cupy.py
       tests/serve/test_up_cuda.py)
if ! compgen -G "$LLMBUS_CACHE/models/*.gguf" > /dev/null; then
    echo "gpu_check: no model file: the tests that read it are left out"
    TESTS=(tests/gpu/test_kernels.py tests/gpu/test_device.py tests/gpu/test_gpu_model.py tests/gpu/test_gpu_sampler.py
           tests/sampling/test_sampling_cupy.py)
fi
echo "== the sources through NVRTC (cupy's compiler) and nvcc, then the GPU tests"
"$PY" -m pytest -q -p no:cacheprovider --timeout 240 tests/gpu/test_sources.py 2>&1 | tail -5
sources_rc=${PIPESTATUS[0]}
"$PY" -m pytest -q -p no:cacheprovider -m gpu --timeout 240 "${TESTS[@]}" 2>&1 | tail -40
tests_rc=$(( ${PIPESTATUS[0]} || sources_rc ))
echo "== bench/gpu.py (GPU tests exit $tests_rc after $(( $(date +%s) - t0 ))s)"
"$PY" bench/gpu.py --quick                  # its table is the last thing printed
bench_rc=$?
exit $(( tests_rc || bench_rc ))
