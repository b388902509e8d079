"""The import graph of the source packages, read from their files (nothing is imported).

Every `import` and `from ... import` counts wherever it stands, inside a function too: a loop
hidden in a function body still ties two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bus", "wire", "kernels", "services", "gateway")


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's __init__)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the source packages it imports (itself left out)."""
    mods = modules(root)

    def known(name: str | None) -> str | None:
        while name and name not in mods:     # `from a.b import C`: C is a name in module a.b
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(d for a in node.names if (d := known(a.name)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module
                for a in node.names:   # `from . import x` imports the module x
                    full = f"{source}.{a.name}"
                    if (d := full if full in mods else known(source)):
                        deps.add(d)
        deps.discard(name)
        out[name] = deps
    return out


def loops(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of `g` with more than one member (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    part = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        part.append(w)
                        if w == v:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return found


def package_of(module: str) -> str:
    """The part a module belongs to: a top-level package, or a service's package in services/."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between parts (package_of), a part's own imports left out."""
    out: dict[str, set[str]] = {}
    for module, deps in g.items():
        a = package_of(module)
        out.setdefault(a, set()).update(b for d in deps if (b := package_of(d)) != a)
    return out
