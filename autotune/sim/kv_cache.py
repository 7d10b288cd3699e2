"""Paged KV blocks with prefix caching by block hash, after vLLM V1's BlockPool.

Blocks are counted, not materialised: the simulator needs how many are free and which
shared-prefix blocks are cached, not their contents. A block's hash identifies its tokens
and all tokens before it; a request carries the identities (``SimRequest.block_keys``) of
the leading KV blocks it could share with another request, derived from the workload's
explicit prefix blocks (a system prompt, a trace's ``hash_ids``), so two requests share
exactly the blocks whose whole token history they have in common. Other blocks are plain.

Blocks are cached when allocated for the step that computes them, as in V1. Freed blocks go to an LRU free queue and keep their hash until reused, so a later request
can still hit them; allocation takes never-hashed blocks first, then evicts the least
recently freed cached block (V1 pops the queue head; freshly freed blocks go to the tail,
a request's blocks in reverse order so its tail is evicted first).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from autotune.sim.request import SimRequest


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool) -> None:
        # V1 keeps one "null" block out of circulation.
        self.capacity = max(num_blocks - 1, 0)
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free_plain = self.capacity  # free and never hashed (or hash dropped)
        self.cached_free: OrderedDict[object, None] = OrderedDict()  # free prefix blocks, LRU order
        self.refs: dict[object, int] = {}  # prefix block identity -> requests holding it
        # vLLM's prefix-cache counters, in tokens (see record_lookup).
        self.hits = 0
        self.queries = 0

    # --- queries ---------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self.free_plain + len(self.cached_free)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def lookup(self, req: SimRequest) -> int:
        """Leading prefix blocks of ``req`` already cached (in use or free). At least one
        token must still be computed to produce logits, so a full-prompt hit is cut by one.
        A request that skips reading the cache (prompt logprobs) hits nothing."""
        keys = req.block_keys
        if not self.prefix_caching or not keys or not req.reads_cache:
            return 0
        refs, cached = self.refs, self.cached_free
        k = 0
        while k < len(keys) and (keys[k] in refs or keys[k] in cached):
            k += 1
        return min(k, (req.num_tokens - 1) // self.block_size)

    def new_blocks_needed(self, req: SimRequest, new_tokens: int, hit_blocks: int = 0) -> int:
        """Free blocks ``req`` must take to hold ``new_tokens`` more, with ``hit_blocks`` of
        cached prefix taken by reference (cached-but-free hits also leave the free queue)."""
        held = req.blocks_held + hit_blocks
        need = self.blocks_for(req.num_computed + hit_blocks * self.block_size + new_tokens) - held
        free_hits = sum(1 for key in req.block_keys[:hit_blocks] if key in self.cached_free)
        return max(need, 0) + free_hits

    # --- mutations ---------------------------------------------------------------------
    def record_lookup(self, req: SimRequest, hit_blocks: int) -> None:
        """Count an admitted request's lookup as vLLM 0.32's ``vllm:prefix_cache_queries`` and
        ``_hits`` do (``KVCacheManager.record_prefix_cache_stats``, called at admission):
        queries are the tokens looked up, hits the cached ones. With prefix caching off
        nothing is looked up, nor for a request that skips reading the cache (prompt logprobs);
        a preempted request's new lookup goes to separate counters."""
        if self.prefix_caching and req.reads_cache and not req.preempted:
            self.queries += req.num_tokens
            self.hits += hit_blocks * self.block_size

    def take_hits(self, req: SimRequest, k: int) -> None:
        for key in req.block_keys[:k]:
            if key in self.cached_free:
                del self.cached_free[key]
            self.refs[key] = self.refs.get(key, 0) + 1
        req.shared_held = k
        req.num_computed = k * self.block_size
        # Blocks after a hit were computed by someone else: this request's copy of any
        # later prefix block is only registered if nobody holds that hash.
        req.may_register = True

    def allocate(self, req: SimRequest, new_tokens: int) -> bool:
        """Give ``req`` blocks for ``new_tokens`` more tokens; False (and no change) if short."""
        need = self.blocks_for(req.num_computed + new_tokens) - req.blocks_held
        if need <= 0:
            return True
        if need > self.num_free:
            return False
        self._take_free(need)
        req.private_blocks += need
        return True

    def take_plain_block(self, req: SimRequest) -> bool:
        """``allocate(req, 1)`` for a decode step that needs one more block, when a never-hashed
        free block is there to take (the scheduler's fast path); False, and no change, otherwise.
        A decoding request holds the blocks of every token it computed, so one more token needs
        at most one more block."""
        if not self.free_plain:
            return False
        self.free_plain -= 1
        req.private_blocks += 1
        return True

    def _take_free(self, n: int) -> None:
        plain = min(n, self.free_plain)
        self.free_plain -= plain
        for _ in range(n - plain):
            self.cached_free.popitem(last=False)  # evict the least recently freed

    def register(self, req: SimRequest, tokens: int) -> None:
        """Make ``req``'s full prefix blocks up to ``tokens`` the cached copy, unless another
        copy already carries that hash. vLLM caches a block when it allocates it for a step
        (``KVCacheManager.allocate_slots`` -> ``cache_blocks``), so a request admitted later in
        the same step already hits it: its KV is written before attention reads it."""
        if not self.prefix_caching or not req.may_register:
            return
        full = min(tokens // self.block_size, req.prefix_blocks)
        while req.shared_held < full:
            key = req.block_keys[req.shared_held]
            if key in self.refs or key in self.cached_free:
                req.may_register = False  # a duplicate: stays private
                return
            self.refs[key] = 1
            req.shared_held += 1
            req.private_blocks -= 1

    def free(self, req: SimRequest) -> None:
        """Release all of ``req``'s blocks (finished, preempted, or the engine died)."""
        self.free_plain += req.private_blocks
        for key in reversed(req.block_keys[: req.shared_held]):  # reverse: the tail is evicted first
            n = self.refs[key] - 1
            if n:
                self.refs[key] = n
            else:
                del self.refs[key]
                self.cached_free[key] = None
        req.shared_held = 0
        req.private_blocks = 0
