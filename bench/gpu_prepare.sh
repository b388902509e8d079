#!/usr/bin/env bash
# Fetch here, where pip reaches PyPI, what bench/gpu_check.sh needs on a GPU machine that has no
# network (docs: the device README's note on carrying wheels). Both folders are ignored by git.
#
#   .whl/          wheels of the packages such a machine lacks (its image holds numpy, cupy-cuda13x,
#                  torch, transformers, aiohttp, msgpack, tokenizers, jinja2, prometheus_client...):
#                  pyzmq, zeroconf (and ifaddr), gguf, llguidance (the scheduler's grammars), and the
#                  pytest CI runs with its plugins (pytest-asyncio is not in the image), for CPython
#                  3.12 x86-64
#   .gpucheck/a/   the default model's first half, .gpucheck/b/ its second: a call carries at most
#                  64 MiB with the working tree, the model is 94 MiB, so it goes in two calls
#                  (bench/gpu_check.sh keeps what it is given in /tmp between calls to the same machine)
#
# Run this in the checkout the device tool sends (the one the session started in: a helper's own
# worktree does not travel), with this branch checked out or merged there. Then, with the tool:
#     run(command="bash bench/gpu_check.sh", carry=[".gpucheck/a"], timeout_s=60)
# which stashes half a and returns in seconds, then AT ONCE (a machine stays warm ~30 s after a call)
#     run(command="bash bench/gpu_check.sh", carry=[".whl", ".gpucheck/b"], timeout_s=600)
# If the second call lands on a fresh machine, gpu_check.sh says so and runs what needs no model.
# Without the model at all (carry=[".whl"]), it runs what needs no model file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=(pyzmq==27.3.0 zeroconf==0.154.0 ifaddr==0.2.0 gguf==0.19.0 llguidance==1.9.1
        pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 pytest-asyncio==1.5.0 pytest-timeout==2.4.0)
PLATFORMS=()
for n in 17 24 27 28 31 34 35; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)

rm -rf .whl && mkdir -p .whl
for w in "${WHEELS[@]}"; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" -d .whl "$w"
done
echo "wheels: $(ls .whl | tr '\n' ' ')($(du -sh .whl | cut -f1))"

MODEL=$("$PY" -c "from services.modelstore.pull import pull; print(pull())")
rm -rf .gpucheck && mkdir -p .gpucheck/a .gpucheck/b
half=$(( ($(stat -c %s "$MODEL") + 1) / 2 ))
head -c "$half" "$MODEL" > .gpucheck/a/model.gguf.part0
tail -c +$(( half + 1 )) "$MODEL" > .gpucheck/b/model.gguf.part1
for d in a b; do
    sha256sum "$MODEL" | cut -d' ' -f1 > ".gpucheck/$d/model.gguf.sha256"
    basename "$MODEL" > ".gpucheck/$d/model.gguf.name"
done
echo "model: $(basename "$MODEL") in .gpucheck/a and .gpucheck/b"

# What each call sends: the working tree (tracked and untracked files git does not ignore) and
# what it carries, 64 MiB at most.
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
for carry in ".gpucheck/a" ".whl .gpucheck/b"; do
    # shellcheck disable=SC2086
    total=$(( tree + $(du -cb $carry | tail -1 | cut -f1) ))
    echo "a call carrying [$carry]: $(( total >> 20 )) MiB with the working tree"
    (( total < 64 << 20 )) || { echo "gpu_prepare: that is over the device tool's 64 MiB" >&2; exit 1; }
done
