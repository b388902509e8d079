"""Prefix cache index: full pages keyed by a hash chain of their tokens, with LRU of unused pages."""

from collections import OrderedDict

Key = int


def chain_key(parent: Key | None, tokens: tuple[int, ...]) -> Key:
    """Key of a full page: hashes the parent page's key and this page's tokens (so the whole prefix).

    Python's hash of ints and tuples is not randomized, so keys are stable across processes.
    """
    return hash((parent, tokens))


class PrefixCache:
    """Maps chain keys to pages whose KV is computed; pages nobody references wait in LRU order."""

    def __init__(self):
        self._entries: dict[Key, tuple[Key | None, tuple[int, ...], int]] = {}
        self._key_of: dict[int, Key] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first

    @property
    def num_indexed(self) -> int:
        return len(self._entries)

    @property
    def num_evictable(self) -> int:
        return len(self._lru)

    def lookup(self, key: Key, parent: Key | None, tokens: tuple[int, ...]) -> int | None:
        entry = self._entries.get(key)
        # Compare the content too, so a hash collision is a miss and never wrong KV.
        if entry is None or entry[0] != parent or entry[1] != tokens:
            return None
        return entry[2]

    def insert(self, key: Key, parent: Key | None, tokens: tuple[int, ...], page: int) -> bool:
        """Index a freshly computed full page; False if this prefix is already held by another page."""
        if key in self._entries:
            return False
        assert page not in self._key_of, f"page {page} indexed twice"
        self._entries[key] = (parent, tokens, page)
        self._key_of[page] = key
        return True

    def is_indexed(self, page: int) -> bool:
        return page in self._key_of

    def is_parked(self, page: int) -> bool:
        return page in self._lru

    def park(self, page: int) -> None:
        """An indexed page lost its last reference: keep its KV, evictable, most recent last."""
        self._lru[page] = None

    def unpark(self, page: int) -> None:
        del self._lru[page]

    def evict(self) -> int | None:
        """Forget the least recently used unreferenced page and return it (None if there is none)."""
        if not self._lru:
            return None
        page, _ = self._lru.popitem(last=False)
        del self._entries[self._key_of.pop(page)]
        return page

    def clear(self) -> list[int]:
        """Forget everything (KV was lost on a shard); return the parked pages to free."""
        held = [p for p in self._key_of if p not in self._lru]
        assert not held, f"clear() with referenced cached pages {held}"
        pages = list(self._lru)
        self._entries.clear()
        self._key_of.clear()
        self._lru.clear()
        return pages
