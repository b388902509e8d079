"""Multipart messages: frame 0 is a msgpack header, tensors follow as their own frames.

    header = {version, type, id, sender, epoch, deadline, body}

`body` is the message's fields; a Tensor field becomes a descriptor
{codec, dtype, shape, meta, frames: [i, ...]} whose bytes are frames i... of the multipart
message. Decoding checks everything before it trusts anything and raises only BadFrame.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Iterable, Sequence

import msgpack
import numpy as np

from . import limits, messages  # noqa: F401  (messages: registers every type before a decode)
from .codecs import CODECS, encode_tensor
from .errors import BadFrame, Oversized
from .schema import from_wire, lookup, nesting, to_wire
from .tensor import Tensor

_HEADER_KEYS = frozenset({"version", "type", "id", "sender", "epoch", "deadline", "body"})


@dataclass(frozen=True)
class Message:
    """One message on the bus: who sent it (sender, epoch), which request it is (id), and what."""

    body: Any                 # an instance of a class declared with @message
    id: int = 0
    sender: str = ""
    epoch: int = 0
    deadline: float = 0.0     # unix seconds; 0 means none

    @property
    def type(self) -> str:
        return type(self.body).TYPE

    def reply(self, body: Any, sender: str, epoch: int) -> "Message":
        return Message(body=body, id=self.id, sender=sender, epoch=epoch, deadline=self.deadline)


def encode(msg: Message, max_frame_bytes: int = limits.MAX_TENSOR_BYTES) -> list:
    """Message -> list of frames (bytes for the header, buffers for tensors, sent zero-copy).

    Raises Oversized for what the receiver would drop: a header over MAX_HEADER_BYTES, more than
    MAX_FRAMES frames, or a tensor frame over `max_frame_bytes` (the socket's limit).
    """
    payload: list = []

    def put(t: Tensor) -> dict:
        desc, bufs = encode_tensor(t)
        first = 1 + len(payload)
        payload.extend(bufs)
        desc["frames"] = list(range(first, first + len(bufs)))
        return desc

    body_type = getattr(type(msg.body), "TYPE", None)
    if body_type is None:
        raise TypeError(f"{type(msg.body).__name__} is not a declared message")
    header = {
        "version": limits.VERSION, "type": body_type, "id": msg.id, "sender": msg.sender,
        "epoch": msg.epoch, "deadline": float(msg.deadline), "body": to_wire(msg.body, put),
    }
    if len(payload) + 1 > limits.MAX_FRAMES:
        raise Oversized("frames", len(payload) + 1, limits.MAX_FRAMES)
    head = msgpack.packb(header, use_bin_type=True)
    if len(head) > limits.MAX_HEADER_BYTES:
        raise Oversized("header", len(head), limits.MAX_HEADER_BYTES)
    frames = [_bytes_view(b) for b in payload]
    for i, f in enumerate(frames, 1):
        if f.nbytes > max_frame_bytes:
            raise Oversized(f"frame {i}", f.nbytes, max_frame_bytes)
    return [head] + frames


def _bytes_view(b: Any) -> memoryview:
    """A flat byte view of a payload buffer, without copying."""
    if isinstance(b, np.ndarray):
        # memoryview.cast refuses shapes with a zero in them; a uint8 view of the flat array
        # works for empty and 0-d arrays alike.
        return memoryview(b.reshape(-1).view(np.uint8))
    m = memoryview(b)
    return m if m.format == "B" and m.ndim == 1 else m.cast("B")


def _buffer(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", None)  # zmq.Frame received with copy=False
    try:
        m = memoryview(buf if buf is not None else frame)
        return m if m.format == "B" and m.ndim == 1 else m.cast("B")
    except (TypeError, ValueError):
        raise BadFrame("malformed", f"a frame is not a byte buffer ({type(frame).__name__})") from None


def decode(frames: Sequence[Any]) -> Message:
    """List of frames (bytes, memoryview or zmq.Frame) -> Message; raises BadFrame."""
    if not frames:
        raise BadFrame("frame_count", "empty message")
    if len(frames) > limits.MAX_FRAMES:
        raise BadFrame("frame_count", f"{len(frames)} frames, limit {limits.MAX_FRAMES}")
    bufs = [_buffer(f) for f in frames]
    head = bufs[0]
    if len(head) > limits.MAX_HEADER_BYTES:
        # The one bad frame an honest caller sends (a prompt too big): its error reply must
        # name the call, or the caller waits for an answer that was sent under id 0.
        raise BadFrame("oversized", f"header of {len(head)} bytes, limit {limits.MAX_HEADER_BYTES}",
                       msg_id=_peek_id(head))
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True, use_list=True,
                                 max_str_len=limits.MAX_STR, max_bin_len=limits.MAX_HEADER_BYTES,
                                 max_array_len=limits.MAX_LIST, max_map_len=limits.MAX_LIST,
                                 max_ext_len=0)
    except Exception as e:  # ExtraData, FormatError, StackError, ValueError, UnicodeDecodeError...
        raise BadFrame("malformed", f"header is not valid msgpack ({type(e).__name__})") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise BadFrame("schema", "header must be a map of exactly "
                       "version, type, id, sender, epoch, deadline, body")
    version = header["version"]
    if not _is_int(version) or version != limits.VERSION:
        raise BadFrame("version", f"version {str(version)[:20]}, this side speaks {limits.VERSION}")
    if not isinstance(header["type"], str):
        raise BadFrame("schema", "type must be a string")
    mid, sender, epoch, deadline = header["id"], header["sender"], header["epoch"], header["deadline"]
    if not (_is_int(mid) and 0 <= mid < 1 << 64):
        raise BadFrame("schema", "id must be an unsigned 64-bit integer")
    if not isinstance(sender, str) or len(sender) > 256:
        raise BadFrame("schema", "sender must be a short string")
    if not (_is_int(epoch) and 0 <= epoch < 1 << 64):
        raise BadFrame("schema", "epoch must be an unsigned 64-bit integer")
    try:
        return _body(header, bufs, mid, sender, epoch, deadline)
    except BadFrame as e:
        e.msg_id = mid  # the header is sound: the error reply can name the call it answers
        raise


def _body(header: dict, bufs: list, mid: int, sender: str, epoch: int, deadline: Any) -> Message:
    body = header["body"]
    try:
        cls = lookup(header["type"])
        # A body nested deeper than MAX_DEPTH is refused as that, whatever else is wrong with it.
        # Where the type's schema bounds the nesting within the limit, from_wire enforces it
        # level by level, and only a body it refuses needs the walk (to tell which refusal).
        if nesting(cls) > limits.MAX_DEPTH:
            _check_depth(body, 0)
        return _typed_body(cls, body, bufs, mid, sender, epoch, deadline)
    except BadFrame as e:
        if e.reason != "oversized":
            _check_depth(body, 0)
        raise


def _typed_body(cls: type, body: Any, bufs: list, mid: int, sender: str, epoch: int,
                deadline: Any) -> Message:
    if (not isinstance(deadline, (int, float)) or isinstance(deadline, bool)
            or not 0 <= deadline < math.inf):  # NaN fails this too
        raise BadFrame("schema", "deadline must be a finite non-negative number")
    used: set[int] = set()

    def take(desc: Any, path: str) -> Tensor:
        return _tensor(desc, path, bufs, used)

    body = from_wire(cls, body, take)
    if len(used) != len(bufs) - 1:
        raise BadFrame("frame_count", f"{len(bufs) - 1} payload frames, {len(used)} referenced")
    return Message(body=body, id=mid, sender=sender, epoch=epoch, deadline=float(deadline))


def _peek_id(head: memoryview) -> int:
    """The id of an oversized header, read from the small keys that encode() puts before the
    body; 0 when it is not there. Reads nothing past the id, whatever the rest holds."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_str_len=256, max_bin_len=256,
                                max_array_len=16, max_map_len=16, max_ext_len=0)
    unpacker.feed(head)
    try:
        for _ in range(min(unpacker.read_map_header(), len(_HEADER_KEYS))):
            key = unpacker.unpack()
            if key == "body":
                return 0
            value = unpacker.unpack()
            if key == "id":
                return value if _is_int(value) and 0 <= value < 1 << 64 else 0
    except Exception:  # anything unreadable: no id to name
        return 0
    return 0


def _numel(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_depth(v: Any, depth: int) -> None:
    # msgpack makes plain dicts and lists: `type(x) is` tells them apart at a third of the cost
    # of isinstance, and this walk is a fifth of decoding a shard's batch.
    if depth > limits.MAX_DEPTH:
        raise BadFrame("oversized", f"nested deeper than {limits.MAX_DEPTH}")
    t = type(v)
    items = v.values() if t is dict else v if t is list else None
    if not items:
        return
    if depth + 1 > limits.MAX_DEPTH:   # its items, scalars too, are one level too deep
        raise BadFrame("oversized", f"nested deeper than {limits.MAX_DEPTH}")
    # Only containers go deeper, and a long list of scalars is told in one C loop: a Python step
    # per item made a million token ids take a second.
    if len(items) > 8 and {dict, list}.isdisjoint(map(type, items)):
        return
    for x in items:
        t = type(x)
        if t is dict or t is list:
            _check_depth(x, depth + 1)


_DESC_KEYS = frozenset({"codec", "dtype", "shape", "meta", "frames"})
_INT = {int}


def _tensor(desc: Any, path: str, bufs: list[memoryview], used: set[int]) -> Tensor:
    if not isinstance(desc, dict) or desc.keys() != _DESC_KEYS:
        raise BadFrame("schema", f"{path}: not a tensor descriptor")
    codec = CODECS.get(desc["codec"]) if isinstance(desc["codec"], str) else None
    if codec is None:
        raise BadFrame("schema", f"{path}: unknown codec {str(desc['codec'])[:20]!r}")
    shape, dtype, meta, frames = desc["shape"], desc["dtype"], desc["meta"], desc["frames"]
    # Exactly int dims (a bool is not one), each in [0, 2^40): set and min/max are C loops.
    if (type(shape) is not list or len(shape) > limits.MAX_TENSOR_DIMS
            or (shape and not (set(map(type, shape)) <= _INT and min(shape) >= 0
                               and max(shape) < 1 << 40))):
        raise BadFrame("schema", f"{path}: bad shape")
    # Every codec spends at least a byte a value, so no real tensor is refused here; this stops
    # an empty shape like (2^39, 0, 2^39) that numpy cannot even reshape to.
    if _numel(d for d in shape if d) > limits.MAX_TENSOR_BYTES:
        raise BadFrame("oversized", f"{path}: shape {shape} too large")
    if not isinstance(dtype, str) or not isinstance(meta, dict):
        raise BadFrame("schema", f"{path}: bad dtype or meta")
    shape = tuple(shape)
    try:
        sizes = codec.sizes(meta, dtype, shape)
    except (ValueError, TypeError, KeyError) as e:
        raise BadFrame("schema", f"{path}: {e}") from None
    if not isinstance(frames, list) or len(frames) != len(sizes):
        raise BadFrame("frame_count", f"{path}: codec {codec.name} needs {len(sizes)} frames")
    views = []
    for i, size in zip(frames, sizes):
        if not _is_int(i) or not 1 <= i < len(bufs) or i in used:
            raise BadFrame("frame_count", f"{path}: frame index {i!r} missing or reused")
        if size > limits.MAX_TENSOR_BYTES or len(bufs[i]) != size:
            raise BadFrame("truncated", f"{path}: frame {i} has {len(bufs[i])} bytes, "
                                        f"descriptor needs {size}")
        used.add(i)
        views.append(bufs[i])
    return Tensor.received(codec.name, dtype, shape, meta, views)

