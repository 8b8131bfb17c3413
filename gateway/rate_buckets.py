"""Where rate limits are counted (gateway/rate_limit.py): GCRA buckets in memory, or in
Redis, shared by every gateway replica.

A bucket keeps one number, its "theoretical arrival time": how far ahead of now its charges
reach. A take of `units` moves it `units * interval` further and is refused when that would
pass one period (a minute) ahead, so a limit of N per minute allows N at once and then one
every 60/N seconds.

In Redis one Lua call per request checks and charges all of its buckets atomically, on
Redis's own clock (`TIME`), so replicas with drifting clocks still agree. A bucket is one
string key, `{prefix}rl:{bucket}`, expiring once it has refilled; bucket names carry a
digest of the API key, never the key itself. Redis down or slow: the request goes
unlimited (fail open), the outage is logged once and counted (`on_error`), and for
`retry_after_s` calls skip Redis rather than wait on a dead socket. Calls go through the
project's pipelined `RespClient`, which reconnects by itself.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from cache.stores.resp_client import RespClient, RespError

log = logging.getLogger("headstart.gateway")

# KEYS: buckets. ARGV[1]: the period (s), ARGV[2]: 1 to take (check all, charge all or
# none), 0 to settle (add without a check); then per bucket its interval (s) and units.
# Returns {ok, before_1, after_1, before_2, ...} as strings (Lua numbers would be truncated).
SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local period, take = tonumber(ARGV[1]), ARGV[2] == '1'
local out, ok = {}, 1
local after = {}
for i, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local new = tat + tonumber(ARGV[1 + 2 * i]) * tonumber(ARGV[2 + 2 * i])
  if new < now then new = now end
  after[i] = new
  out[2 * i] = tostring(tat - now)
  out[2 * i + 1] = tostring(new - now)
  if take and new - now > period then ok = 0 end
end
for i, key in ipairs(KEYS) do
  if ok == 1 then
    if after[i] > now then
      redis.call('SET', key, tostring(after[i]), 'PX', math.ceil((after[i] - now) * 1000) + 1000)
    else
      redis.call('DEL', key)
    end
  end
end
out[1] = tostring(ok)
return out
"""
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()


PERIOD_S = 60.0  # every limit is per minute
Kind = Literal["requests", "tokens"]


@dataclass(frozen=True)
class Bucket:
    """One limit: `per_minute` units of `kind` for a key or a tenant (`name` is opaque)."""

    name: str
    kind: Kind
    per_minute: int

    @property
    def interval_s(self) -> float:
        return PERIOD_S / self.per_minute


@dataclass(frozen=True)
class Level:
    """A bucket's fill around one take, as seconds of backlog: `before` the take and
    `after` it (the bucket refuses when `after` passes the period)."""

    before: float
    after: float


class Buckets(Protocol):
    async def take(self, charges: list[tuple[Bucket, int]]) -> tuple[bool, list[Level]] | None:
        """Charge each bucket its cost if every one has room; the levels either way (None:
        the store is unreachable, and the request goes unlimited)."""

    async def settle(self, charges: list[tuple[Bucket, int]]) -> None:
        """Add (or, negative, give back) units without a check."""


class MemoryBuckets:
    """The buckets of one gateway process (no Redis)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.tats: dict[str, float] = {}

    async def take(self, charges: list[tuple[Bucket, int]]) -> tuple[bool, list[Level]]:
        now = self.clock()
        levels = []
        for bucket, cost in charges:
            before = max(self.tats.get(bucket.name, now), now) - now
            levels.append(Level(before, before + cost * bucket.interval_s))
        ok = all(level.after <= PERIOD_S for level in levels)
        if ok:
            for (bucket, _), level in zip(charges, levels, strict=True):
                self.tats[bucket.name] = now + level.after
            if len(self.tats) > 100_000:  # forget buckets that have refilled
                self.tats = {k: t for k, t in self.tats.items() if t > now}
        return ok, levels

    async def settle(self, charges: list[tuple[Bucket, int]]) -> None:
        now = self.clock()
        for bucket, units in charges:
            tat = max(self.tats.get(bucket.name, now), now) + units * bucket.interval_s
            self.tats[bucket.name] = max(tat, now)


class RedisBuckets:
    """`Buckets` in the Redis at `url`; `on_error()` is called once per failed call."""

    def __init__(self, url: str, on_error: Callable[[], None], *, prefix: str = "hs:",
                 timeout_s: float = 0.25, retry_after_s: float = 1.0) -> None:
        self.client = RespClient(url, timeout_s)
        self.on_error = on_error
        self.prefix = prefix
        self.retry_after_s = retry_after_s
        self._down_until = 0.0
        self._down = False

    async def take(self, charges: list[tuple[Bucket, int]]) -> tuple[bool, list[Level]] | None:
        reply = await self._run(charges, take=True)
        if reply is None:
            return None
        levels = [Level(float(reply[i]), float(reply[i + 1])) for i in range(1, len(reply), 2)]
        return reply[0] == b"1", levels

    async def settle(self, charges: list[tuple[Bucket, int]]) -> None:
        await self._run(charges, take=False)

    async def _run(self, charges: list[tuple[Bucket, int]], take: bool) -> list[bytes] | None:
        if self._down and time.monotonic() < self._down_until:
            self.on_error()
            return None
        keys = [f"{self.prefix}rl:{bucket.name}" for bucket, _ in charges]
        args = [str(PERIOD_S), "1" if take else "0"]
        for bucket, units in charges:
            args += [repr(bucket.interval_s), str(units)]
        try:
            try:
                reply = await self.client.command("EVALSHA", SCRIPT_SHA, str(len(keys)),
                                                  *keys, *args)
            except RespError as e:
                if not str(e).startswith("NOSCRIPT"):
                    raise
                reply = await self.client.command("EVAL", SCRIPT, str(len(keys)), *keys, *args)
        except (ConnectionError, TimeoutError, OSError, RespError) as e:
            self._failed(e)
            return None
        if self._down:
            log.warning("rate limits: redis is back; limits are shared again")
            self._down = False
        return reply

    def _failed(self, error: Exception) -> None:
        self.on_error()
        if not self._down:
            log.warning("rate limits: redis unavailable (%s); requests pass unlimited until "
                        "it returns", error)
        self._down = True
        self._down_until = time.monotonic() + self.retry_after_s

    def close(self) -> None:
        self.client.close()
