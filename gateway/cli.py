"""`llmbus run gateway`: options of the HTTP gateway (imported at parser build: keep it light)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bus.options import add_options, options_of

from .config import DEFAULT_HTTP, GatewayConfig

CONFIG = GatewayConfig    # the settings whose options it takes (`llmbus up` hands some on)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", default=DEFAULT_HTTP, metavar="HOST:PORT",
                   help=f"address of the HTTP API (default {DEFAULT_HTTP}; port 0: any free)")
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="file holding the API key clients must send (default: $LLMBUS_API_KEY; "
                        "neither: no authentication)")
    add_options(p, GatewayConfig)


def build(args: argparse.Namespace, config):
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from .auth import load_key
    from .config import parse_http
    from .service import GatewayService

    host, port = parse_http(args.http)
    key = load_key(args.api_key_file, dict(os.environ))
    given = options_of(GatewayConfig, args)
    read_timeout = given.get("read_timeout", GatewayConfig.read_timeout)
    return GatewayService(config, GatewayConfig(host=host, port=port, api_key=key, **given,
                                                header_timeout=read_timeout))
