"""Every failure code is declared once, in wire/failures.py: nowhere else (in bus/, wire/,
services/ and gateway/; kernels/ speak no bus) does a string literal
stand where a code goes (a ServiceError's or RemoteError's code, a `code=` argument, a class's
`code` or `reason`, a comparison with `.code`, a table of codes named *_CODES), and every code the table declares has an HTTP
status a gateway can answer with."""

from __future__ import annotations

import ast

from tests.layout.imports import ROOT, modules
from wire.failures import TABLE, failure

_ERRORS = {"ServiceError", "RemoteError", "Error", "Refused", "ForwardFailed", "Finish"}


def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_literal(e) for e in node.elts)


def literal_codes(tree: ast.AST) -> list[int]:
    """Lines where a string literal stands for a failure code."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in _ERRORS - {"Finish"} and node.args and _literal(node.args[0]):
                lines.append(node.lineno)
            lines += [node.lineno for k in node.keywords if k.arg == "code" and _literal(k.value)]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "code" for s in sides) and \
                    any(_literal(s) for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                isinstance(t, ast.Name) and t.id.lstrip("_").endswith(("CODES", "REFUSED", "LOST"))
                for t in getattr(node, "targets", [getattr(node, "target", None)])):
            # a table of codes: its entries are names, not literals
            lines += [n.lineno for n in ast.walk(node.value)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and _literal(stmt.value) and any(
                        isinstance(t, ast.Name) and t.id in ("code", "reason") for t in stmt.targets):
                    lines.append(stmt.lineno)
    return lines


def test_no_failure_code_is_written_as_a_literal_outside_wire_failures():
    found = []
    for name, (path, _) in modules().items():
        if name == "wire.failures" or name.startswith("kernels"):   # kernels speak no bus
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(ROOT)}:{line}" for line in literal_codes(tree)]
    assert found == []


def test_the_check_sees_each_way_a_code_is_written():
    tree = ast.parse("raise ServiceError('busy', 'x')\nError(code='x', message='')\n"
                     "if e.code in ('a', 'b'): pass\nclass B:\n    reason = 'bad'\n"
                     "raise ServiceError(BUSY, 'x')\n_CODES: dict = {int: 'bad'}\n")
    assert sorted(literal_codes(tree)) == [1, 2, 3, 5, 7]


def test_every_code_has_an_http_status_and_an_unknown_code_is_a_server_failure():
    assert all(f.http in (400, 413, 429, 500, 503, 504) for f in TABLE.values())
    assert all(f.field is None or f.http == 400 for f in TABLE.values())
    assert failure("from_a_newer_version").http == 500 and failure("x").retry
