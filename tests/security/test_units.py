"""Every unit of systemd/ is sandboxed: `systemd-analyze security --offline=true` rates each
service at most 4.0 ("OK") and the health watcher (root, for systemctl) at most 6.0, on the units
as `llmbus install-units` writes them. The gateway never runs as root."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from services.cli import build_parser
from tests.conftest import require

LIMITS = {"llmbus-health.service": 6.0, "llmbus-gateway.service": 4.0,
          "llmbus-scheduler.service": 4.0, "llmbus-tokenizer.service": 4.0,
          "llmbus-shard@0.service": 4.0}
EXPOSURE = re.compile(r"Overall exposure level for (\S+): (\d+\.\d+)")


def install(tmp_path, *extra: str):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"")
    args = build_parser().parse_args(["install-units", "--prefix", str(tmp_path / "units"),
                                      "--conf", str(tmp_path / "conf"), "--model", str(model),
                                      "--layers", "0:30", *extra])
    assert args.func(args) == 0
    units = tmp_path / "units"
    # The template as the instance systemd runs (llmbus-shard@0 of llmbus-shard@.service).
    shutil.copy(units / "llmbus-shard@.service", units / "llmbus-shard@0.service")
    return units


def exposure(unit_file) -> float:
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                        str(unit_file)], capture_output=True, text=True, timeout=60)
    m = EXPOSURE.search(r.stdout + r.stderr)
    assert m, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return float(m.group(2))


def test_every_unit_is_sandboxed_within_its_exposure_limit(tmp_path):
    require(shutil.which("systemd-analyze") is not None, "no systemd-analyze")
    probe = subprocess.run(["systemd-analyze", "security", "--help"], capture_output=True, text=True)
    require("--offline" in probe.stdout, "this systemd-analyze has no --offline (systemd < 250)")
    units = install(tmp_path)
    figures = {name: exposure(units / name) for name in LIMITS}
    print("systemd-analyze security:", figures)
    over = {n: f for n, f in figures.items() if f > LIMITS[n]}
    assert not over, figures


@pytest.mark.parametrize("extra, user", [((), "DynamicUser=yes"),
                                         (("--run-as", "nobody"), "User=nobody")])
def test_the_gateway_never_runs_as_root(tmp_path, extra, user):
    text = (install(tmp_path, *extra) / "llmbus-gateway.service").read_text().splitlines()
    assert user in text
    assert "User=root" not in text


def test_every_template_says_its_sandbox():
    from services.cli.units import TEMPLATES
    for path in sorted(TEMPLATES.glob("*.service")):
        lines = path.read_text().splitlines()
        for want in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                     "ProtectKernelTunables=yes", "RestrictNamespaces=yes"):
            assert want in lines, (path.name, want)
        assert any(ln.startswith("RestrictAddressFamilies=") for ln in lines), path.name
        caps = next(ln for ln in lines if ln.startswith("CapabilityBoundingSet="))
        assert caps == ("CapabilityBoundingSet=CAP_KILL CAP_DAC_READ_SEARCH"
                        if path.name == "llmbus-health.service" else "CapabilityBoundingSet="), caps
