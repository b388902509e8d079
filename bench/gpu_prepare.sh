#!/usr/bin/env bash
# Fetch here, where pip reaches PyPI, what bench/gpu_check.sh needs on a GPU machine that has no
# network (docs: the device README's note on carrying wheels). Both folders are ignored by git.
#
#   .whl/          wheels of the packages such a machine lacks (its image holds numpy, cupy, torch,
#                  transformers, aiohttp, msgpack, tokenizers, jinja2, pytest, hypothesis...):
#                  pyzmq, zeroconf (and ifaddr), gguf, pytest-asyncio, for CPython 3.12 x86-64
#   .gpucheck/a/   the default model's first half, .gpucheck/b/ its second: a call carries at most
#                  64 MiB, so they go in two calls (bench/gpu_check.sh keeps what it is given in
#                  /tmp between calls to the same machine)
#
# Then, with the device tool:  run(command="bash bench/gpu_check.sh", carry=[".gpucheck/a"])
# (it stashes half a and stops), then at once on the same warm machine
#                             run(command="bash bench/gpu_check.sh", carry=[".whl", ".gpucheck/b"])
# Without the model, bench/gpu_check.sh runs what needs no model file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=(pyzmq==27.3.0 zeroconf==0.154.0 ifaddr==0.2.0 gguf==0.19.0 pytest-asyncio==1.5.0)
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
echo "model: $(basename "$MODEL") in .gpucheck/a and .gpucheck/b ($(du -sh .gpucheck/a | cut -f1) and $(du -sh .gpucheck/b | cut -f1))"
