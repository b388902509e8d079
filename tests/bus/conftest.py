import pytest

from .procs import Procs


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.stop_all()
