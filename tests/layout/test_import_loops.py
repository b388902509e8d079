"""No module of bus/, wire/, kernels/, services/ or gateway/ imports one that imports it back,
directly or around a loop, counting imports inside functions; nor does any package (a top-level
one, or a service's package in services/) import one that imports it back."""

from tests.layout.imports import graph, loops, package_graph


def test_no_module_is_part_of_an_import_loop():
    assert loops(graph()) == []


def test_no_package_is_part_of_an_import_loop():
    assert loops(package_graph(graph())) == []


def test_the_walk_sees_a_loop_through_a_function_local_import(tmp_path):
    (tmp_path / "wire").mkdir()
    (tmp_path / "wire" / "__init__.py").write_text("")
    (tmp_path / "wire" / "a.py").write_text("from .b import f\n")
    (tmp_path / "wire" / "b.py").write_text("def f():\n    from wire.a import g\n")
    (tmp_path / "wire" / "c.py").write_text("from . import a\n")
    g = graph(tmp_path)
    assert g["wire.c"] == {"wire.a"}
    assert loops(g) == [["wire.a", "wire.b"]]
    assert loops(package_graph({"services.x.m": {"services.y.n"}, "services.y.n": {"services.x.k"}})) \
        == [["services.x", "services.y"]]
