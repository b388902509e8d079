"""KV page accounting per sequence: prefix matching, growth, release, registration of full pages."""

from collections import Counter
from collections.abc import Iterable

from .pages import PagePool
from .prefix_cache import PrefixCache, chain_key
from .sequence import Sequence


class KVManager:
    """Pages of every sequence, shared through the prefix cache; evicts unused cached pages on demand."""

    def __init__(self, num_pages: int, page_size: int):
        self.page_size = page_size
        self.pool = PagePool(num_pages)
        self.cache = PrefixCache()

    def available(self) -> int:
        """Pages that can be handed out now: free ones plus unreferenced cached ones."""
        return self.pool.num_free + self.cache.num_evictable

    def match_prefix(self, seq: Sequence) -> int:
        """Attach the cached full pages that begin `seq` (which holds no pages); return tokens hit."""
        assert not seq.pages and seq.num_computed == 0, seq
        P = self.page_size
        parent = None
        # Never match the page holding the last token: that token must run to give logits, and
        # a sequence only ever writes into pages it owns alone.
        for i in range((len(seq.tokens) - 1) // P):
            tokens = tuple(seq.tokens[i * P:(i + 1) * P])
            key = chain_key(parent, tokens)
            page = self.cache.lookup(key, parent, tokens)
            if page is None:
                break
            self._ref(page)
            seq.pages.append(page)
            seq.page_keys.append(key)
            parent = key
        seq.num_computed = seq.num_cached = len(seq.pages) * P
        return seq.num_cached

    def grow(self, seq: Sequence, pages: int) -> None:
        """Append `pages` pages to the page table (caller checked available())."""
        for _ in range(pages):
            if self.pool.num_free == 0:
                self.pool.free(self.cache.evict())
            seq.pages.append(self.pool.allocate())

    def release(self, seq: Sequence) -> None:
        """Drop all KV state of `seq`: it must be prefilled again from all its tokens."""
        # Last page first, so a prefix's leading pages are the most recently parked and evicted last.
        for page in reversed(seq.pages):
            self._unref(page)
        seq.pages.clear()
        seq.page_keys.clear()
        seq.num_computed = seq.num_cached = 0

    def register_full_pages(self, seq: Sequence) -> None:
        """Index the pages that became full of computed KV, so later prompts can reuse them."""
        P = self.page_size
        for i in range(len(seq.page_keys), seq.num_computed // P):
            parent = seq.page_keys[-1] if seq.page_keys else None
            tokens = tuple(seq.tokens[i * P:(i + 1) * P])
            key = chain_key(parent, tokens)
            self.cache.insert(key, parent, tokens, seq.pages[i])  # False: another page holds it
            seq.page_keys.append(key)

    def drop_cache(self) -> None:
        """Forget every cached page (a shard lost its KV); every sequence must be released first."""
        for page in self.cache.clear():
            self.pool.free(page)

    def _ref(self, page: int) -> None:
        if self.pool.refcount[page] == 0:
            self.cache.unpark(page)
        self.pool.ref(page)

    def _unref(self, page: int) -> None:
        if self.pool.unref(page) == 0:
            if self.cache.is_indexed(page):
                self.cache.park(page)
            else:
                self.pool.free(page)

    def check(self, seqs: Iterable[Sequence]) -> None:
        """Assert the accounting: refcounts equal page-table uses; every page is in exactly one state."""
        uses = Counter(p for s in seqs for p in s.pages)
        free = Counter(self.pool.free_pages())
        for page in range(self.pool.num_pages):
            rc = self.pool.refcount[page]
            assert rc == uses[page], f"page {page}: refcount {rc}, used by {uses[page]} tables"
            states = (rc > 0) + free[page] + self.cache.is_parked(page)
            assert states == 1, f"page {page}: held={rc > 0} free x{free[page]} " \
                                f"parked={self.cache.is_parked(page)}"
            if self.cache.is_parked(page):
                assert self.cache.is_indexed(page), f"parked page {page} not indexed"
            if free[page]:
                assert not self.cache.is_indexed(page), f"free page {page} still indexed"
