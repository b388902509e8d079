"""`llmbus run gateway`: options of the HTTP gateway (imported at parser build: keep it light)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .config import DEFAULT_HTTP
    p.add_argument("--http", default=DEFAULT_HTTP, metavar="HOST:PORT",
                   help=f"address of the HTTP API (default {DEFAULT_HTTP}; port 0: any free)")
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="file holding the API key clients must send (default: $LLMBUS_API_KEY; "
                        "neither: no authentication)")
    p.add_argument("--max-body", type=int, default=4 << 20, help="largest request body, bytes")
    p.add_argument("--read-timeout", type=float, default=30.0,
                   help="seconds a client has to send a request's headers and body")


def build(args: argparse.Namespace, config):
    import logging
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from .auth import load_key
    from .config import GatewayConfig, parse_http
    from .service import GatewayService

    host, port = parse_http(args.http)
    key = load_key(args.api_key_file, dict(os.environ))
    return GatewayService(config, GatewayConfig(
        host=host, port=port, api_key=key, max_body_bytes=args.max_body,
        read_timeout=args.read_timeout, header_timeout=args.read_timeout))
