"""The KV page pool: reference counts and a free list, nothing else."""

from collections import deque


class PagePool:
    """Fixed set of page ids; a page is free (on the list) or held with a reference count > 0.

    A page with count 0 that is not on the free list is parked in the prefix cache; the pool
    leaves that bookkeeping to KVManager.
    """

    def __init__(self, num_pages: int):
        self.num_pages = num_pages
        self.refcount = [0] * num_pages
        self._free: deque[int] = deque(range(num_pages))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        """Take a free page with one reference; IndexError when none is free."""
        page = self._free.popleft()
        assert self.refcount[page] == 0, f"free page {page} had references"
        self.refcount[page] = 1
        return page

    def ref(self, page: int) -> None:
        self.refcount[page] += 1

    def unref(self, page: int) -> int:
        """Drop one reference and return the count left."""
        if self.refcount[page] <= 0:
            raise AssertionError(f"page {page} released more often than taken")
        self.refcount[page] -= 1
        return self.refcount[page]

    def free(self, page: int) -> None:
        if self.refcount[page] != 0:
            raise AssertionError(f"page {page} freed while referenced")
        self._free.append(page)

    def free_pages(self) -> list[int]:
        return list(self._free)
