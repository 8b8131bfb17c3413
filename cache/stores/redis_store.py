"""The Redis store: entries shared by every gateway replica, with TTLs.

Layout (prefix `hs:` by default):
  hs:e:{key}  hash {meta: json, answer: json, vec: base64 float32}; expires with the entry
  hs:ix       stream of index events {op: put|del, key} that replicas replay to keep their
              local semantic index in step; trimmed to about `feed_maxlen` events. Events
              carry only the key (a replica reads a new entry's meta and vector from its
              hash), so each vector is held once, not twice.
A replica builds its index from a scan of the entries (the snapshot) at start, after any
outage and whenever the stream was trimmed past its cursor, then polls the stream. Expiries
travel with the entries: every replica drops an entry from its index at the entry's own
expiry time, and a key put again with a new TTL replaces the entry on every replica. The hot read (`get`, once per exact lookup) goes through `RespClient`, a
minimal pipelined connection several times cheaper than redis-py; the rest uses redis-py.
Redis down or slow: short socket timeouts, every failure raises `StoreUnavailable` (the
caches serve a miss), one log line per outage, and a short back-off during which calls fail
fast instead of waiting on a dead socket. Both clients reconnect when Redis returns.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from cache.evidence import Evidence
from cache.stores.base import (
    CacheEntry,
    IndexEvent,
    StoreUnavailable,
    vector_from_str,
    vector_to_str,
)
from cache.stores.resp_client import RespClient, RespError

log = logging.getLogger("headstart.cache")


class RedisStore:
    shared = True

    def __init__(self, client: aioredis.Redis, prefix: str = "hs:", retry_after_s: float = 0.5,
                 feed_maxlen: int = 200_000, reader: RespClient | None = None) -> None:
        self.client, self.prefix, self.reader = client, prefix, reader
        self.retry_after_s, self.feed_maxlen = retry_after_s, feed_maxlen
        self.errors = 0
        self._down_until = 0.0
        self._down = False
        self._cursor: str | None = None  # last stream id replayed; None: reload needed
        self._position = 0  # how many feed events were ever added up to the cursor

    @classmethod
    async def open(cls, url: str, *, timeout_s: float = 0.25, prefix: str = "hs:",
                   max_connections: int = 64, **options: Any) -> RedisStore:
        """A store on `url`; callers beyond `max_connections` wait (up to `timeout_s`) for a
        connection instead of failing."""
        pool = aioredis.BlockingConnectionPool.from_url(
            url, decode_responses=True, socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s, max_connections=max_connections,
            timeout=timeout_s, retry=Retry(NoBackoff(), 0), retry_on_timeout=False,
            health_check_interval=0)
        reader = RespClient(url, timeout_s) if url.startswith("redis://") else None
        return cls(aioredis.Redis(connection_pool=pool), prefix=prefix, reader=reader, **options)

    @property
    def available(self) -> bool:
        return not self._down

    def _ekey(self, key: str) -> str:
        return f"{self.prefix}e:{key}"

    @property
    def _feed(self) -> str:
        return f"{self.prefix}ix"

    async def _call(self, fn):
        """Run `fn()` (a coroutine factory) against Redis; failures become StoreUnavailable."""
        if self._down and time.monotonic() < self._down_until:
            raise StoreUnavailable("redis unavailable (backing off)")
        try:
            result = await fn()
        except (RedisError, RespError, OSError, TimeoutError) as exc:
            self.errors += 1
            self._cursor = None  # the index may have missed events: reload when back
            if not self._down:
                log.warning("cache: redis unavailable (%s); serving misses until it returns",
                            exc.__class__.__name__)
            self._down = True
            self._down_until = time.monotonic() + self.retry_after_s
            raise StoreUnavailable(str(exc)) from exc
        if self._down:
            log.warning("cache: redis is back")
            self._down = False
        return result

    # ------------------------------------------------------------------ entries

    async def get(self, key: str) -> CacheEntry | None:
        name = self._ekey(key)
        if self.reader is not None:
            reader = self.reader
            meta, answer = await self._call(lambda: reader.command("HMGET", name, "meta",
                                                                    "answer"))
        else:
            meta, answer = await self._call(lambda: self.client.hmget(name, ["meta", "answer"]))
        if not meta or not answer:
            return None
        return CacheEntry.from_meta(json.loads(meta), json.loads(answer))

    async def put(self, entry: CacheEntry) -> None:
        mapping = {"meta": json.dumps(entry.meta()), "answer": json.dumps(entry.answer)}
        if entry.vector is not None:
            mapping["vec"] = vector_to_str(entry.vector)

        async def write() -> None:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self._ekey(entry.key), mapping=mapping)
            pipe.pexpireat(self._ekey(entry.key), int(entry.expires_at * 1000))
            if entry.partition and entry.vector is not None:
                pipe.xadd(self._feed, {"op": "put", "key": entry.key},
                          maxlen=self.feed_maxlen, approximate=True)
            await pipe.execute()

        await self._call(write)

    async def annotate(self, entry: CacheEntry) -> None:
        """The meta rewritten, the expiry set again (an entry gone meanwhile is removed at
        once rather than left as a hash without an answer), a `put` on the feed."""
        async def write() -> None:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self._ekey(entry.key), "meta", json.dumps(entry.meta()))
            pipe.pexpireat(self._ekey(entry.key), int(entry.expires_at * 1000))
            if entry.partition:
                pipe.xadd(self._feed, {"op": "put", "key": entry.key},
                          maxlen=self.feed_maxlen, approximate=True)
            await pipe.execute()

        await self._call(write)

    async def delete(self, keys: list[str]) -> int:
        if not keys:
            return 0

        async def remove() -> int:
            pipe = self.client.pipeline(transaction=False)
            for k in keys:
                pipe.delete(self._ekey(k))
                pipe.xadd(self._feed, {"op": "del", "key": k}, maxlen=self.feed_maxlen,
                          approximate=True)
            results = await pipe.execute()
            return sum(int(r) for r in results[0::2])

        return await self._call(remove)

    async def metas(self) -> list[dict[str, Any]]:
        rows = await self._scan(["meta"])
        return [json.loads(r[0]) for _, r in rows if r[0]]

    async def _scan(self, fields: list[str]) -> list[tuple[str, list[str | None]]]:
        async def scan() -> list[tuple[str, list[str | None]]]:
            names = [k async for k in self.client.scan_iter(match=self._ekey("*"), count=1000)]
            out = []
            for i in range(0, len(names), 1000):
                pipe = self.client.pipeline(transaction=False)
                for name in names[i:i + 1000]:
                    pipe.hmget(name, fields)
                out += list(zip(names[i:i + 1000], await pipe.execute(), strict=True))
            return out

        return await self._call(scan)

    # ------------------------------------------------------------------ index feed

    async def index_snapshot(self) -> list[IndexEvent]:
        async def feed_end() -> Any:
            pipe = self.client.pipeline(transaction=False)
            pipe.xinfo_stream(self._feed)
            return (await pipe.execute(raise_on_error=False))[0]

        info = await self._call(feed_end)
        cursor, position = "0-0", 0
        if isinstance(info, dict):
            cursor, position = info["last-generated-id"], int(info["entries-added"])
        now = time.time()
        events = []
        for _, (meta_s, vec_s) in await self._scan(["meta", "vec"]):
            if not meta_s or not vec_s:
                continue
            meta = json.loads(meta_s)
            if meta.get("partition") and (meta.get("semantic_expires_at") or 0) > now:
                events.append(_event_from_meta(meta, vec_s))
        self._cursor, self._position = cursor, position
        return events

    async def index_changes(self) -> list[IndexEvent] | None:
        if self._cursor is None:
            return None
        cursor = self._cursor

        async def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.xinfo_stream(self._feed)
            pipe.xread({self._feed: cursor}, count=1000)
            return await pipe.execute(raise_on_error=False)

        info, reply = await self._call(read)
        if isinstance(reply, Exception):
            raise StoreUnavailable(str(reply))
        if _trimmed_past(info, self._position):
            log.warning("cache: the index feed moved past this replica; reloading the index")
            self._cursor = None
            return None
        fields_list: list[dict[str, str]] = []
        for _, items in reply or []:
            for ident, fields in items:
                fields_list.append(fields)
                cursor = ident
        events = await self._resolve(fields_list)
        if self._cursor is not None:  # an outage during the read resets it: keep the reset
            self._cursor = cursor
            self._position += len(fields_list)
        return events

    async def _resolve(self, fields_list: list[dict[str, str]]) -> list[IndexEvent]:
        """Feed events as index events: a `put` gets its partition, question, expiry and
        vector from the entry's hash (one pipelined read for the batch); a put whose entry
        is already gone (deleted, expired) is dropped."""
        puts = [f["key"] for f in fields_list if f.get("op", "put") == "put" and not f.get("vec")]
        found: dict[str, IndexEvent] = {}
        if puts:
            async def read() -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for key in puts:
                    pipe.hmget(self._ekey(key), ["meta", "vec"])
                return await pipe.execute()

            for key, (meta_s, vec_s) in zip(puts, await self._call(read), strict=True):
                if meta_s and vec_s:
                    found[key] = _event_from_meta(json.loads(meta_s), vec_s)
        events = []
        for fields in fields_list:
            if fields.get("op", "put") == "del":
                events.append(IndexEvent("del", fields["key"]))
            elif fields.get("vec"):  # written by an older version: the event carries it all
                events.append(_event_from_fields(fields))
            elif fields["key"] in found:
                # a key put again (its TTL renewed) replaces the entry a replica may hold,
                # so the new expiry holds on every replica
                events += [IndexEvent("del", fields["key"]), found[fields["key"]]]
        return events

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        try:
            await self.client.aclose()
            await self.client.connection_pool.disconnect()
        except Exception:  # closing a dead connection is not worth an error
            pass


def _trimmed_past(info: Any, position: int) -> bool:
    """Whether the feed was trimmed past the `position`-th event ever added (the last one
    this replica read): entries ever added minus entries kept is how many were trimmed
    (the store never deletes single events). A missing feed has lost nothing."""
    if not isinstance(info, dict):
        return False
    return int(info.get("entries-added") or 0) - int(info.get("length") or 0) > position


def _event_from_meta(meta: dict[str, Any], vec: str) -> IndexEvent:
    return IndexEvent("put", meta["key"], meta.get("partition"), meta.get("question"),
                      vector_from_str(vec), meta.get("semantic_expires_at"), meta.get("form"),
                      meta.get("alias_of"), Evidence.from_meta(meta.get("evidence")))


def _event_from_fields(fields: dict[str, str]) -> IndexEvent:
    return IndexEvent(fields.get("op", "put"), fields["key"], fields.get("partition") or None,
                      fields.get("question") or None, vector_from_str(fields.get("vec")),
                      float(fields.get("exp") or 0.0))
