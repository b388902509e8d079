"""The frame format: every message type declared once, encoded as msgpack + tensor frames."""

from .codecs import ACTIVATION_CODECS, CODECS
from .envelope import Message, decode, encode
from .errors import BadFrame
from .schema import REGISTRY, evolve, message, record
from .tensor import Tensor
from . import messages  # noqa: F401  (registers every declared message type)

__all__ = ["ACTIVATION_CODECS", "BadFrame", "CODECS", "Message", "REGISTRY", "Tensor",
           "decode", "encode", "evolve", "message", "record"]
