"""Finding: `--api-key-file` was read whatever its mode. A key file others can read is refused,
as the cluster's CURVE key file is, saying how to mend it."""

from __future__ import annotations

import pytest

from gateway.auth import load_key


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_file_others_can_read_is_refused(tmp_path, mode):
    key = tmp_path / "api-key"
    key.write_text("s3cret\n")
    key.chmod(mode)
    with pytest.raises(ValueError, match=f"can be read by others.*chmod 600 {key}"):
        load_key(key, {})


def test_a_private_key_file_is_read(tmp_path):
    key = tmp_path / "api-key"
    key.write_text("s3cret\n")
    key.chmod(0o600)
    assert load_key(key, {}) == "s3cret"


def test_the_gateway_command_refuses_it_with_the_reason(tmp_path):
    import subprocess
    import sys
    key = tmp_path / "api-key"
    key.write_text("s3cret\n")
    key.chmod(0o644)
    out = subprocess.run([sys.executable, "-m", "services.cli", "run", "gateway", "--http",
                          "127.0.0.1:0", "--api-key-file", str(key), "--no-mdns"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "can be read by others" in out.stderr and "Traceback" not in out.stderr
