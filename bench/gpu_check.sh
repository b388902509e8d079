#!/usr/bin/env bash
# The GPU check of the GPU path (issue 34), on a GPU machine with no network, in under 5 minutes:
# the wheels carried in .whl/ and the default model's halves carried in .gpucheck/a and .gpucheck/b
# (bench/gpu_prepare.sh fetches both where there is a network, and says how to make the two device
# calls), then every GPU test (pytest -m gpu: the CUDA kernels against their references, graphs, the
# real model against llama.cpp's reference through one process, two cuda shard processes and
# `llmbus up --device cuda` over HTTP) and bench/gpu.py, whose table comes last.
#
# The first half arriving alone is kept in /tmp (the machine stays warm for a short while after a
# call) and the script stops there; the second half arriving alone means the machine is a fresh one:
# the script says so and runs what needs no model. A GPU test skipped here fails the check (on a GPU
# machine every one of them must run). Full logs go to $OUT where the device tool sets it.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
STASH=/tmp/llmbus-gpucheck
LOGS=${OUT:-$STASH}
export LLMBUS_CACHE=$STASH/cache PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4
mkdir -p "$STASH/parts" "$LLMBUS_CACHE/models" "$LOGS"
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
        elif [ -e "$STASH/parts/model.gguf.part0" ]; then
            echo "gpu_check: the model's first half is stashed in $STASH: call again at once, on this warm machine," \
                 "with .whl and .gpucheck/b"
            exit 0
        else
            echo "gpu_check: only the model's second half is here: this is a fresh machine (the first call's" \
                 "half went with the one before); the tests that read the model are left out. For them, make" \
                 "the two calls again, the second at once after the first." >&2
        fi
    fi
fi

# The packages this machine lacks, from the carried wheels, in a folder of their own ahead of the
# image's: pyzmq, zeroconf, gguf, llguidance, and pytest with its plugins at the versions CI runs (the image's
# own pytest plugins are not loaded: one built for another pytest would stop the run).
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STASH/site" .whl/*.whl \
        || { echo "gpu_check: installing the carried wheels failed" >&2; exit 1; }
    export PYTHONPATH="$STASH/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
PYTEST=("$PY" -m pytest -p pytest_asyncio.plugin -p pytest_timeout -p no:cacheprovider -q -rs --timeout 240)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$PY" -c "import cupy, zmq, zeroconf, gguf, llguidance, pytest, pytest_asyncio, pytest_timeout
print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), 'pytest', pytest.__version__)" \
    || { echo "gpu_check: a package is missing (see bench/gpu_prepare.sh)" >&2; exit 1; }

TESTS=(tests/gpu tests/engine/test_gpu.py tests/shard/test_device.py tests/sampling/test_sampling_cupy.py
       tests/serve/test_up_cuda.py)
if ! compgen -G "$LLMBUS_CACHE/models/*.gguf" > /dev/null; then
    echo "gpu_check: no model file: the tests that read it are left out"
    TESTS=(tests/gpu/test_kernels.py tests/gpu/test_device.py tests/gpu/test_gpu_model.py tests/gpu/test_gpu_sampler.py
           tests/gpu/test_gpu_service.py tests/sampling/test_sampling_cupy.py)
fi
echo "== the sources through NVRTC (cupy's compiler) and nvcc, then the GPU tests"
"${PYTEST[@]}" tests/gpu/test_sources.py > "$LOGS/gpu_sources.log" 2>&1
sources_rc=$?
tail -8 "$LOGS/gpu_sources.log"
grep -qE "[0-9]+ skipped" "$LOGS/gpu_sources.log" && { echo "gpu_check: a source check was skipped on a GPU machine"; sources_rc=1; }
"${PYTEST[@]}" -m gpu "${TESTS[@]}" > "$LOGS/gpu_tests.log" 2>&1
tests_rc=$?
tail -40 "$LOGS/gpu_tests.log"
if grep -qE "[0-9]+ skipped" "$LOGS/gpu_tests.log"; then
    echo "gpu_check: GPU tests were skipped on a GPU machine (reasons above, after 'short test summary')"
    tests_rc=1
fi
tests_rc=$(( tests_rc || sources_rc ))
echo "== bench/gpu.py (GPU tests exit $tests_rc after $(( $(date +%s) - t0 ))s)"
"$PY" bench/gpu.py --quick 2>&1 | tee "$LOGS/gpu_bench.log"      # its table is the last thing printed
bench_rc=${PIPESTATUS[0]}
exit $(( tests_rc || bench_rc ))
