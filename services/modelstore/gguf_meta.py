"""Read the key/value metadata of a GGUF file, stopping before the tensor index.

gguf's GGUFReader builds numpy views for every element of every array (≈2–5 s for a 49k-token
vocabulary); the tokenizer needs only the metadata, so this walks it once with struct.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType as T

from services.modelstore.errors import BadModelFile

_MAGIC = b"GGUF"
_SCALAR = {
    T.UINT8: "<B", T.INT8: "<b", T.UINT16: "<H", T.INT16: "<h", T.UINT32: "<I", T.INT32: "<i",
    T.FLOAT32: "<f", T.BOOL: "<?", T.UINT64: "<Q", T.INT64: "<q", T.FLOAT64: "<d",
}
_NUMPY = {
    T.UINT8: np.uint8, T.INT8: np.int8, T.UINT16: np.uint16, T.INT16: np.int16,
    T.UINT32: np.uint32, T.INT32: np.int32, T.FLOAT32: np.float32, T.BOOL: np.bool_,
    T.UINT64: np.uint64, T.INT64: np.int64, T.FLOAT64: np.float64,
}
_U64 = struct.Struct("<Q")
MAX_ARRAY_DEPTH = 8      # arrays of arrays: no model nests deeper than 2


class _Cursor:
    """A read position in the mapped file; every read is bounds-checked."""

    def __init__(self, buf: mmap.mmap):
        # Slicing the mmap copies just the bytes asked for, and leaves no exported buffer that
        # would stop the map from closing when an error unwinds.
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise BadModelFile(f"GGUF metadata runs past the end of the file (offset {self.pos})")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as e:
            raise BadModelFile(f"GGUF string at offset {self.pos - n} is not UTF-8") from e

    def string_array(self, count: int) -> list[str]:
        # The hot loop of loading a vocabulary: one unpack_from and one slice per string.
        buf, pos, out = self.buf, self.pos, []
        size = len(buf)
        unpack = _U64.unpack_from
        try:
            for _ in range(count):
                (n,) = unpack(buf, pos)
                pos += 8
                if pos + n > size:
                    raise BadModelFile("GGUF string array runs past the end of the file")
                out.append(str(buf[pos:pos + n], "utf-8"))
                pos += n
        except struct.error as e:
            raise BadModelFile("GGUF string array runs past the end of the file") from e
        except UnicodeDecodeError as e:
            raise BadModelFile(f"GGUF string array holds a non-UTF-8 string near offset {pos}") from e
        self.pos = pos
        return out

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype == T.STRING:
            return self.string()
        if vtype == T.ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            if etype == T.STRING:
                return self.string_array(count)
            if etype in _NUMPY:
                dtype = np.dtype(_NUMPY[T(etype)]).newbyteorder("<")
                return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).copy()
            if etype == T.ARRAY:
                if depth >= MAX_ARRAY_DEPTH:
                    raise BadModelFile(f"GGUF metadata nests arrays deeper than "
                                       f"{MAX_ARRAY_DEPTH} levels (offset {self.pos})")
                return [self.value(T.ARRAY, depth + 1) for _ in range(count)]
            raise BadModelFile(f"GGUF array of unknown element type {etype}")
        if vtype in _SCALAR:
            return self.scalar(_SCALAR[T(vtype)])
        raise BadModelFile(f"GGUF value of unknown type {vtype}")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """All key/value pairs of a little-endian GGUF v2/v3 file; arrays of numbers come as numpy."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse(mm)
    except (OSError, ValueError) as e:
        if isinstance(e, BadModelFile):
            raise
        raise BadModelFile(f"cannot read {path}: {e}") from e


def _parse(buf: mmap.mmap) -> dict[str, Any]:
    return _parse_header(buf)[0]


def _parse_header(buf: mmap.mmap) -> tuple[dict[str, Any], _Cursor, int]:
    """The metadata, a cursor at the tensor index that follows it, and the tensor count."""
    cur = _Cursor(buf)
    if cur.take(4) != _MAGIC:
        raise BadModelFile("not a GGUF file (bad magic)")
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise BadModelFile(f"GGUF version {version} is not supported (need 2 or 3, little-endian)")
    n_tensors = cur.scalar("<Q")
    n_kv = cur.scalar("<Q")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        meta[key] = cur.value(cur.scalar("<I"))
    return meta, cur, n_tensors
