"""The echo service: a bus citizen with nothing but the `bus.*` methods (hello, status, echo,
probe), for checking discovery and links between machines: `llmbus run echo`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The echo service has no options of its own."""


def build(args: argparse.Namespace, config):
    from .service import EchoService
    return EchoService(config)
