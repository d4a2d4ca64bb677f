"""The bookkeeping of a least-recently-used cache bounded in count and MiB, shared by the adapter
caches of both inference engines (`lcsb_core.inference.AdapterCache`, PEFT adapters on a torch base;
`lcsb_core.inference.llama_engine.GGUFAdapterCache`, GGUF LoRA adapters on a llama.cpp base). It holds names and
sizes only; each cache frees its own objects for the names it is told to evict."""

from __future__ import annotations

from collections import OrderedDict


class LruBound:
    """Names with their sizes (MiB), least recently used first, bounded to at most `max_count` names
    and `max_mib` MiB in all. A name larger than `max_mib` alone is still kept, then evicted when the
    next one is added (the cache serves it once rather than refusing it).

    Raises:
        ValueError: `max_count` < 1 or `max_mib` <= 0.
    """

    def __init__(self, *, max_count: int, max_mib: float) -> None:
        if max_count < 1:
            raise ValueError(f"max_count must be at least 1, got {max_count}")
        if max_mib <= 0:
            raise ValueError(f"max_mib must be positive, got {max_mib}")
        self.max_count, self.max_mib = max_count, max_mib
        self.sizes: OrderedDict[str, float] = OrderedDict()   # name -> MiB, oldest first

    def __contains__(self, name: object) -> bool:
        return name in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def touch(self, name: str) -> bool:
        """Mark `name` used now; False when it is not held."""
        if name not in self.sizes:
            return False
        self.sizes.move_to_end(name)
        return True

    def add(self, name: str, mib: float, keep: frozenset[str] = frozenset()) -> list[str]:
        """Hold `name` (`mib` MiB) as the most recently used, and return the names that must go, oldest
        first, to keep within both bounds: never `name` itself nor a name in `keep` (in use now: the
        cache then stays over its bounds until they are released and the next add). The returned names
        are no longer held."""
        self.sizes[name] = mib
        self.sizes.move_to_end(name)
        evicted: list[str] = []
        while len(self.sizes) > self.max_count or self.mib > self.max_mib:
            oldest = next((n for n in self.sizes if n != name and n not in keep), None)
            if oldest is None:
                break
            del self.sizes[oldest]
            evicted.append(oldest)
        return evicted

    @property
    def mib(self) -> float:
        """MiB held now."""
        return sum(self.sizes.values())
