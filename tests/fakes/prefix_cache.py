"""vLLM's prefix-cache accounting, for a cache that never evicts (test reference and fake).

vLLM V1 (vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks`` and
``record_prefix_cache_stats``; PrefixCacheStats in vllm/v1/metrics/stats.py): when a new
request is admitted it *queries* its prompt tokens and *hits* the longest chain of full,
cached blocks, at most ``prompt - 1`` tokens (the last one is recomputed for its logits).
A block is identified by its tokens and every token before it, and is cached as soon as it
is allocated (``allocate_slots`` -> ``cache_blocks``), so a request admitted in the same
step as the one that brings a prefix already hits it. ``vllm:prefix_cache_queries`` and
``vllm:prefix_cache_hits`` sum these token counts; the hit rate is hits / queries.
"""

from __future__ import annotations

from collections.abc import Sequence


class PrefixCacheAccounting:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.cached: set[int] = set()
        self.queries = 0
        self.hits = 0

    def _chain(self, prompt: Sequence[int]) -> list[int]:
        b = self.block_size
        chain: list[int] = []
        parent = 0
        for i in range(len(prompt) // b):
            parent = hash((parent, tuple(prompt[i * b:(i + 1) * b])))
            chain.append(parent)
        return chain

    def lookup(self, prompt: Sequence[int]) -> int:
        """Tokens of ``prompt`` the cache would serve now."""
        hit = 0
        for h in self._chain(prompt)[:(len(prompt) - 1) // self.block_size]:
            if h not in self.cached:
                break
            hit += 1
        return hit * self.block_size

    def insert(self, prompt: Sequence[int]) -> None:
        self.cached.update(self._chain(prompt))

    def admit(self, prompt: Sequence[int]) -> int:
        """Count one new request as vLLM does; its hit tokens."""
        hit = self.lookup(prompt)
        self.insert(prompt)
        self.queries += len(prompt)
        self.hits += hit
        return hit
