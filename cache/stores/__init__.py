"""Where cache entries live: in-process memory (default) or Redis."""

from cache.stores.base import CacheEntry, CacheStore, IndexEvent
from cache.stores.memory import MemoryStore

__all__ = ["CacheEntry", "CacheStore", "IndexEvent", "MemoryStore", "open_store"]


async def open_store(redis_url: str | None, **kwargs: object) -> CacheStore:
    """A Redis store for a `redis://` URL, else the in-process memory store."""
    if redis_url:
        from cache.stores.redis_store import RedisStore

        return await RedisStore.open(redis_url, **kwargs)  # type: ignore[arg-type]
    return MemoryStore()
