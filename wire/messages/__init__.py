"""Every message type of the system, one module per service family."""

from . import bus  # noqa: F401
