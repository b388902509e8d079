"""The tiny K-quant GGUFs of every architecture, shared by the in-process and the shard-process
parity tests."""

import json
from pathlib import Path

import pytest

from tests.engine.arch_gguf import write
from tests.modelstore.make_kquant_reference import ARCH_OUT, sha256


@pytest.fixture(scope="session")
def arch_reference() -> dict:
    """llama.cpp's teacher-forced top-5 on each tiny architecture in each mix (tests/data)."""
    return json.loads(ARCH_OUT.read_text())


@pytest.fixture(scope="session")
def built(tmp_path_factory, model_path, arch_reference):
    """(arch, mix) -> its GGUF, written once for the session after checking it is byte for byte
    the file llama.cpp read."""
    tmp, files = tmp_path_factory.mktemp("arch-kquant"), {}

    def get(name: str, mix: str) -> Path:
        if (name, mix) not in files:
            path = write(tmp / f"{name}-{mix}.gguf", name, model_path, mix)
            assert sha256(path) == arch_reference["files"][f"{name}/{mix}"]["sha256"], (
                f"{name} {mix}: the recipe no longer gives the file the references were made from: run "
                "python -m tests.modelstore.make_kquant_reference --arch where llama-cpp-python is installed")
            files[name, mix] = path
        return files[name, mix]
    return get
