"""Finding: a GGUF whose metadata nests arrays 20,000 deep printed a traceback. It is a clean
error naming the file's fault, from the metadata reader, the weights reader and the command."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from services.modelstore.errors import BadModelFile
from services.modelstore.gguf_meta import read_metadata
from services.modelstore.weights import read_config

ARRAY, UINT8 = 9, 0


def nested_gguf(path, depth: int = 20_000):
    key = b"evil.nested"
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, 1), struct.pack("<Q", len(key)), key,
           struct.pack("<I", ARRAY)]
    out += [struct.pack("<IQ", ARRAY, 1)] * depth
    out.append(struct.pack("<IQ", UINT8, 0))
    path.write_bytes(b"".join(out))
    return path


def test_metadata_nested_20000_deep_is_a_clean_error(tmp_path):
    path = nested_gguf(tmp_path / "nested.gguf")
    with pytest.raises(BadModelFile, match="nests arrays deeper than"):
        read_metadata(path)
    with pytest.raises(BadModelFile, match="nests arrays too deeply"):
        read_config(path)


def test_the_tokenizer_command_says_so_without_a_traceback(tmp_path):
    path = nested_gguf(tmp_path / "nested.gguf")
    out = subprocess.run([sys.executable, "-m", "services.cli", "run", "tokenizer", "--model",
                          str(path), "--no-mdns"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "nests arrays" in out.stderr + out.stdout
    assert "RecursionError" not in out.stderr + out.stdout
