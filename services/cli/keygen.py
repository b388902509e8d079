"""`llmbus keygen`: write a new cluster key file (ZeroMQ CURVE), mode 0600, never over another."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def default_key_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "llmbus" / "cluster.key"


def add_parser(sub) -> None:
    p = sub.add_parser("keygen", help="write a cluster key file (CURVE): copy it to every machine",
                       description="Write a new cluster key pair. Give the file to every service, "
                                   "busctl and llmbus chat of the cluster (--key-file FILE or "
                                   "LLMBUS_KEY_FILE); without it nothing of the cluster answers.")
    p.add_argument("--out", type=Path, default=None,
                   help=f"where to write it (default: {default_key_file()})")
    p.add_argument("--force", action="store_true",
                   help="replace an existing key file (every machine then needs the new one)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from bus.curve import CurveUnsupported, KeyFileError, new_key, write_key_file
    out = args.out or default_key_file()
    try:
        if args.out is None:
            out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_key_file(out, new_key(), force=args.force)
    except (KeyFileError, CurveUnsupported) as e:
        print(f"llmbus keygen: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0
