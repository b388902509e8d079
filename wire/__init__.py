"""The frame format: every message type declared once, encoded as msgpack + tensor frames.

`import wire` (or wire.failures, wire.limits, wire.errors) loads no numpy: the names below load
the codec and envelope modules on first use, so that a command's parser stays light (numpy must
not load before a service has set its BLAS thread count). Every message type is registered once
the envelope is loaded, before anything can be decoded.
"""

import importlib

from .errors import BadFrame

# name -> the module that defines it (the envelope module loads the others and every message)
_LAZY = {"ACTIVATION_CODECS": "codecs", "CODECS": "codecs", "Message": "envelope",
         "decode": "envelope", "encode": "envelope", "REGISTRY": "schema", "evolve": "schema",
         "message": "schema", "record": "schema", "Tensor": "tensor"}
_MODULES = {"codecs", "dtypes", "envelope", "messages", "schema", "tensor"}

__all__ = ["ACTIVATION_CODECS", "BadFrame", "CODECS", "Message", "REGISTRY", "Tensor",
           "decode", "encode", "evolve", "message", "record"]


def __getattr__(name: str):
    if name in _MODULES:
        importlib.import_module(".envelope", __name__)
        return importlib.import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wire' has no attribute {name!r}")
    importlib.import_module(".envelope", __name__)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
