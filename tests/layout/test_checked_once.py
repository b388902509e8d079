"""Sampling parameters and a request's deadline are checked at the edge (the gateway's field
tables) and at the scheduler's admission, nowhere else: no other module of bus/, wire/,
kernels/ or services/ calls `SamplingParams.validate` or reads `deadline_s` to refuse it."""

from __future__ import annotations

import ast

from tests.layout.imports import modules

ADMISSION = "services.scheduler.batching.admission"


def _calls_validate(tree: ast.AST) -> bool:
    """A `x.validate()` call with no arguments: SamplingParams' range check (the shard's batch
    framing check, `validate(batch, ...)`, takes arguments)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "validate" and not n.args and not n.keywords
               for n in ast.walk(tree))


def _refuses_deadline(tree: ast.AST) -> bool:
    """A comparison on `deadline_s` inside an `if` that raises: a range check."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(isinstance(n, ast.Raise) for n in node.body) and any(
                isinstance(n, ast.Attribute) and n.attr == "deadline_s" or
                isinstance(n, ast.Name) and n.id == "deadline_s" for n in ast.walk(node.test)):
            return True
        if isinstance(node, ast.Assign) and any(
                isinstance(n, ast.Attribute) and n.attr == "deadline_s" for n in ast.walk(node.value)):
            # `d = request.deadline_s` then `if ... d ...: raise`: follow the one name
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            for other in ast.walk(tree):
                if isinstance(other, ast.If) and any(isinstance(n, ast.Raise) for n in other.body) \
                        and any(isinstance(n, ast.Name) and n.id in names
                                for n in ast.walk(other.test)):
                    return True
    return False


def _trees(skip_gateway: bool = True):
    for name, (path, _) in modules().items():
        if skip_gateway and name.startswith("gateway"):
            continue
        yield name, ast.parse(path.read_text(), str(path))


def test_sampling_ranges_are_checked_only_at_admission():
    assert [n for n, t in _trees() if _calls_validate(t)] == [ADMISSION]


def test_the_deadline_is_checked_only_at_admission():
    assert [n for n, t in _trees() if _refuses_deadline(t)] == [ADMISSION]


def test_the_checks_see_a_second_home():
    again = ast.parse("def f(p, r):\n    p.validate()\n    d = r.deadline_s\n"
                      "    if d < 0:\n        raise ValueError(d)\n")
    assert _calls_validate(again) and _refuses_deadline(again)
    assert not _calls_validate(ast.parse("validate(batch, first=True)"))
