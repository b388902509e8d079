"""Finding: a GGUF whose metadata nests arrays 20,000 deep printed a traceback. It is a clean
error naming the file's fault, from the metadata reader, the weights reader and the command; so
is a tensor index that does not fit the file."""

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
    with pytest.raises(BadModelFile, match="nests arrays deeper than"):
        read_config(path)


def test_the_tokenizer_command_says_so_without_a_traceback(tmp_path):
    path = nested_gguf(tmp_path / "nested.gguf")
    out = subprocess.run([sys.executable, "-m", "services.cli", "run", "tokenizer", "--model",
                          str(path), "--no-mdns"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "nests arrays" in out.stderr + out.stdout
    assert "RecursionError" not in out.stderr + out.stdout


def one_tensor_gguf(path, dims=(32, 2), qtype=0, offset=0, data=b""):
    """A GGUF with no metadata and one tensor `t` of `dims` (ggml order) and type `qtype`."""
    name = b"t"
    out = [b"GGUF", struct.pack("<IQQ", 3, 1, 0), struct.pack("<Q", len(name)), name,
           struct.pack("<I", len(dims)), *(struct.pack("<Q", d) for d in dims),
           struct.pack("<IQ", qtype, offset)]
    head = b"".join(out)
    path.write_bytes(head + b"\0" * (-len(head) % 32) + data)
    return path


@pytest.mark.parametrize("dims, qtype, offset, data, says", [
    ((32, 2), 0, 0, b"\0" * 255, "runs past the end"),             # F32 32 x 2: 256 bytes
    ((32, 2), 0, 1 << 62, b"\0" * 256, "runs past the end"),
    ((1 << 40, 1 << 40), 0, 0, b"", "runs past the end"),
    ((32, 2), 0, 2, b"\0" * 260, "misaligned"),
    ((32, 2), 9999, 0, b"\0" * 256, "unknown type 9999"),
    ((30, 2), 2, 0, b"\0" * 64, "not whole Q4_0 blocks"),
    ((1, 1, 1, 1, 1), 0, 0, b"\0" * 4, "5 dimensions"),
])
def test_a_tensor_index_that_does_not_fit_the_file_is_a_clean_error(tmp_path, dims, qtype, offset, data, says):
    from services.modelstore.gguf_tensors import TensorFile
    with pytest.raises(BadModelFile, match=says):
        TensorFile(one_tensor_gguf(tmp_path / "t.gguf", dims, qtype, offset, data))


def test_a_tensor_that_fits_reads_as_stored(tmp_path):
    import numpy as np

    from services.modelstore.gguf_tensors import TensorFile
    values = np.arange(64, dtype="<f4")
    t = TensorFile(one_tensor_gguf(tmp_path / "t.gguf", data=values.tobytes())).tensors[0]
    assert (t.name, t.shape, t.data.shape) == ("t", (32, 2), (2, 32))
    assert np.array_equal(t.data.ravel(), values)
