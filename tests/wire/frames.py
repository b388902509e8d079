"""Building frames by hand, to send decode what a correct encoder never would."""

from typing import Any

import msgpack
import numpy as np

import wire


def header(body: Any = None, **fields: Any) -> dict:
    """A valid bus.echo header (as a dict) with any field replaced."""
    h = {"version": 1, "type": "bus.echo", "id": 7, "sender": "test", "epoch": 1,
         "deadline": 0.0, "body": {} if body is None else body}
    h.update(fields)
    return h


def pack(h: Any) -> bytes:
    return msgpack.packb(h, use_bin_type=True)


def descriptor(codec: str = "fp32", shape=(2, 576), dtype: str = "float32", meta=None,
               frames=(1,)) -> dict:
    return {"codec": codec, "dtype": dtype, "shape": list(shape), "meta": meta or {},
            "frames": list(frames)}


def echo_frames(x: np.ndarray, codec: str) -> list[bytes]:
    """A valid encoded Echo carrying x, every frame as plain bytes (as a socket delivers them)."""
    msg = wire.Message(wire.messages.bus.Echo(text="hi", payload=wire.Tensor(x, codec)),
                       id=3, sender="s", epoch=2)
    return [bytes(f) for f in wire.encode(msg)]


def unpack_header(frame: bytes) -> dict:
    return msgpack.unpackb(frame, raw=False)
