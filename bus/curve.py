"""The cluster's CURVE key: one key pair shared by every process of a cluster, kept in a file
only its owner can read. With it, every socket encrypts and every caller proves it holds the pair.

A bound socket (ROUTER, PUB) is a CURVE server with the cluster secret; a connecting one (DEALER,
SUB) is a CURVE client with the cluster key pair and the cluster public key as server key, so a
client knows it reached the cluster. Servers also ask ZAP (bus/zap.py), which admits only clients
presenting the cluster public key: knowing the public key alone is not enough.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import zmq

KEY_FILE_MODE = 0o600
_Z85_KEY = re.compile(rb"^[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")
_LINE = re.compile(r'^\s*(public-key|secret-key)\s*=\s*"([^"]*)"\s*$')
_HEADER = ("# llmbus cluster key (ZeroMQ CURVE). Every machine of the cluster needs this file,\n"
           "# readable by the service user only (mode 0600); anyone holding it is a member.\n")


class KeyFileError(ValueError):
    """The key file is missing, unreadable, readable by others, or not a cluster key."""


class CurveUnsupported(ValueError):
    """This libzmq was built without CURVE: keyed processes cannot run here. (A ValueError, as
    bad option values are: every command prints those as its error line.)"""


@dataclass(frozen=True)
class ClusterKey:
    """The cluster's key pair, each key 40 bytes of Z85."""

    public: bytes
    secret: bytes = field(repr=False)     # never in a log line or a traceback's repr

    def __post_init__(self):
        for what, k in (("public", self.public), ("secret", self.secret)):
            if not _Z85_KEY.match(k):
                raise ValueError(f"{what} key: expected 40 characters of Z85")
        require_curve()
        if zmq.curve_public(self.secret) != self.public:
            raise ValueError("the public key is not the secret key's")


def require_curve() -> None:
    if not zmq.has("curve"):
        raise CurveUnsupported(f"libzmq {zmq.zmq_version()} has no CURVE support: install a pyzmq "
                               f"whose libzmq is built with libsodium or tweetnacl")


def new_key() -> ClusterKey:
    require_curve()
    public, secret = zmq.curve_keypair()
    return ClusterKey(public, secret)


def write_key_file(path: Path, key: ClusterKey, force: bool = False) -> None:
    """Write `key` to `path` with mode 0600; an existing file is kept unless `force`."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, KEY_FILE_MODE)
    except FileExistsError:
        raise KeyFileError(f"{path} exists: a cluster keeps its key (--force replaces it, and "
                           f"then every machine needs the new file)") from None
    except OSError as e:
        raise KeyFileError(f"cannot write {path}: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, KEY_FILE_MODE)     # a replaced file keeps its old mode otherwise
        f.write(f'{_HEADER}public-key = "{key.public.decode()}"\n'
                f'secret-key = "{key.secret.decode()}"\n')


def secret_file_problem(path: Path, what: str, missing_hint: str = "") -> str | None:
    """Why `path` cannot hold a secret, named as `what`: missing (with `missing_hint`), not a
    regular file, or readable by others (a key others can read is no secret); None if it can.
    The cluster's key file and the gateway's API key file are both checked with it."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{what} {path}: {e.strerror}{missing_hint}"
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {path}: not a regular file"
    if st.st_mode & 0o077:
        return f"{what} {path} can be read by others (mode {st.st_mode & 0o777:o}): `chmod 600 {path}`"
    return None


def read_key_file(path: Path) -> ClusterKey:
    """The key in `path`; KeyFileError says what is wrong and what to do."""
    problem = secret_file_problem(path, "key file", " (make one with `llmbus keygen`)")
    if problem:
        raise KeyFileError(problem)
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise KeyFileError(f"key file {path}: cannot read it ({e})") from None
    keys: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None or m.group(1) in keys:
            raise KeyFileError(f"key file {path}, line {n}: expected public-key = \"...\" or "
                               f"secret-key = \"...\" once each")
        keys[m.group(1)] = m.group(2)
    if set(keys) != {"public-key", "secret-key"}:
        raise KeyFileError(f"key file {path}: needs both public-key and secret-key")
    try:
        return ClusterKey(keys["public-key"].encode(), keys["secret-key"].encode())
    except ValueError as e:
        raise KeyFileError(f"key file {path}: {e}") from None


def secure(sock: zmq.Socket, key: ClusterKey) -> None:
    """Make `sock` a CURVE server if it binds (ROUTER, PUB), else a client of the cluster."""
    sock.setsockopt(zmq.CURVE_PUBLICKEY, key.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, key.secret)
    if sock.type in (zmq.ROUTER, zmq.PUB):
        sock.setsockopt(zmq.CURVE_SERVER, 1)
    else:
        sock.setsockopt(zmq.CURVE_SERVERKEY, key.public)
