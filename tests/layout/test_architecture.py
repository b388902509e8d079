"""docs/ARCHITECTURE.md stays true: the README links it; every path, module, command and message
type it names exists; and each package imports only what its row of the packages table allows."""

from __future__ import annotations

import importlib
import importlib.util
import re

import pytest

import wire
from services.cli.run import KINDS
from tests.layout.imports import ROOT, graph, package_graph

DOC = ROOT / "docs" / "ARCHITECTURE.md"
TEXT = DOC.read_text()
NAMED = sorted(set(re.findall(r"`([^`\s]+)`", TEXT)))
MESSAGE_FAMILIES = ("bus", "health", "scheduler", "shard", "tokenizer")


def packages_table() -> dict[str, set[str]]:
    """package -> what its row says it may import."""
    section = TEXT.split("## The packages", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        allowed = set(re.findall(r"`([^`]+)`", cells[2]))
        rows[cells[0].strip("`")] = allowed
    return rows


def test_the_readme_links_it():
    assert "docs/ARCHITECTURE.md" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", [n for n in NAMED if "/" in n and not n.startswith("/")])
def test_every_path_it_names_exists(name):
    assert (ROOT / name).exists(), name


def test_every_http_route_it_names_is_served():
    from gateway.config import GatewayConfig
    from gateway.app import PROTOCOLS
    served = {path for proto in PROTOCOLS for _, path, _ in proto(None, GatewayConfig()).routes()}
    named = {n for n in NAMED if n.startswith("/")} | set(re.findall(r"`[A-Z]+ (/[^`]+)`", TEXT))
    assert named and named <= served, named - served


@pytest.mark.parametrize("name", [n for n in NAMED if ":" in n])
def test_every_entry_point_it_names_exists(name):
    module, _, attr = name.partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    assert f'= "{name}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("name", [n for n in NAMED if re.fullmatch(r"[a-z]+\.[a-z_]+", n)
                                  and n.split(".")[0] in MESSAGE_FAMILIES])
def test_every_message_type_it_names_is_declared(name):
    assert name in wire.REGISTRY, name


@pytest.mark.parametrize("name", [n for n in NAMED if re.fullmatch(r"(bus|wire|services|gateway)"
                                                                    r"(\.[a-z_]+)+\.[A-Z]\w*", n)])
def test_every_class_it_names_is_where_it_says(name):
    module, _, cls = name.rpartition(".")
    assert isinstance(getattr(importlib.import_module(module), cls), type)


def test_it_names_every_kind_llmbus_run_runs():
    named = re.search(r"runs one service of kind (.*?)\.", TEXT).group(1)
    assert set(re.findall(r"`(\w+)`", named)) == set(KINDS)


def test_each_package_exists_and_imports_only_what_its_row_allows():
    table = packages_table()
    actual = package_graph(graph())
    assert {p for p in actual if p != "services"} == set(table)
    for package, allowed in table.items():
        assert importlib.util.find_spec(package) is not None, package
        assert actual.get(package, set()) <= allowed, \
            f"{package} imports {sorted(actual[package] - allowed)}, which its row does not allow"
