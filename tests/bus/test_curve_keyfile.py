"""The cluster key file: what `llmbus keygen` writes, and every way a file can be refused."""

from __future__ import annotations

import os
import stat

import pytest
import zmq

from bus.curve import ClusterKey, KeyFileError, new_key, read_key_file, write_key_file
from services.cli import main as llmbus
from tests.conftest import require


@pytest.fixture(autouse=True)
def curve_here():
    require(zmq.has("curve"), "this libzmq has no CURVE")



def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keygen_writes_a_0600_file_that_reads_back_as_a_matching_pair(tmp_path, capsys):
    out = tmp_path / "cluster.key"
    assert llmbus(["keygen", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert mode(out) == 0o600
    key = read_key_file(out)
    assert zmq.curve_public(key.secret) == key.public      # libzmq derives the same public key
    text = out.read_text()
    assert f'public-key = "{key.public.decode()}"' in text and f'secret-key = "{key.secret.decode()}"' in text


def test_keygen_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "cluster.key"
    assert llmbus(["keygen", "--out", str(out)]) == 0
    first = out.read_text()
    assert llmbus(["keygen", "--out", str(out)]) == 1
    assert "exists" in capsys.readouterr().err and out.read_text() == first
    out.chmod(0o644)
    assert llmbus(["keygen", "--out", str(out), "--force"]) == 0
    assert out.read_text() != first and mode(out) == 0o600     # a replaced file is private again


def test_the_secret_never_shows_in_a_repr():
    key = new_key()
    assert key.secret.decode() not in repr(key) and key.public.decode() in repr(key)


@pytest.mark.parametrize("content, why", [
    ("", "needs both"),
    ('public-key = "{pub}"\n', "needs both"),
    ('public-key = "{pub}"\nsecret-key = "{other}"\n', "not the secret key's"),
    ('public-key = "{pub}"\nsecret-key = "short"\n', "40 characters"),
    ('public-key = "{pub}"\npublic-key = "{pub}"\nsecret-key = "{sec}"\n', "once each"),
    ("curve\n    public-key = x\n", "line 1"),
])
def test_a_bad_key_file_is_a_typed_error_naming_the_problem(tmp_path, content, why):
    key, other = new_key(), new_key()
    path = tmp_path / "bad.key"
    path.write_text(content.format(pub=key.public.decode(), sec=key.secret.decode(),
                                   other=other.secret.decode()))
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match=why):
        read_key_file(path)


def test_a_key_file_others_can_read_or_that_is_missing_is_refused(tmp_path):
    path = tmp_path / "k"
    write_key_file(path, new_key())
    path.chmod(0o640)
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_key_file(path)
    with pytest.raises(KeyFileError, match="llmbus keygen"):
        read_key_file(tmp_path / "missing")
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_key_file(tmp_path)


def test_a_pair_that_does_not_match_cannot_be_built():
    with pytest.raises(ValueError, match="not the secret key's"):
        ClusterKey(new_key().public, new_key().secret)


def test_a_bad_key_file_stops_a_service_before_it_binds(tmp_path, capsys):
    path = tmp_path / "k"
    path.write_text("nonsense\n")
    path.chmod(0o600)
    assert llmbus(["run", "echo", "--no-mdns", "--key-file", str(path)]) == 2
    assert "llmbus run echo: key file" in capsys.readouterr().err
