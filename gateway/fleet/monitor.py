"""Keeps a fleet's list of replicas current: DNS names resolved again, every replica probed,
dead ones ejected and taken back once they answer.

Every `health_interval_s` each replica is probed (`health.probe`): a refused connection
ejects it at once, `unhealthy_after` failed probes in a row (timeouts, errors: a replica
that is only busy answers late) eject it too, and a passing probe readmits it and reports
its load. A request that cannot connect ejects its replica at once (`mark_down`), so new
requests stop going there before the next probe.
Every `dns_interval_s` the `dns+` names are resolved again; replicas that appear are added
(healthy until a probe says otherwise), those that vanish removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

import httpx

from gateway.fleet.endpoints import Endpoint, EndpointSpec, resolve_all
from gateway.fleet.health import ProbeFailure, ReplicaLoad, probe

log = logging.getLogger("headstart.gateway")


class FleetListener(Protocol):
    """What the monitor tells the fleet upstream."""

    def endpoint_added(self, endpoint: Endpoint) -> None: ...

    def endpoint_removed(self, endpoint: Endpoint) -> None: ...

    def endpoint_down(self, url: str) -> None: ...

    def endpoint_up(self, url: str) -> None: ...

    def endpoint_load(self, url: str, load: ReplicaLoad) -> None: ...


class FleetMonitor:
    def __init__(self, name: str, specs: list[EndpointSpec], listener: FleetListener, *,
                 health_interval_s: float = 1.0, dns_interval_s: float = 5.0,
                 probe_timeout_s: float = 2.0, unhealthy_after: int = 3) -> None:
        self.name = name
        self.specs = specs
        self.listener = listener
        self.health_interval_s = health_interval_s
        self.dns_interval_s = dns_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.unhealthy_after = unhealthy_after
        self.failed_probes: dict[str, int] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self.down: set[str] = set()
        self.healthy: list[str] = []  # sorted URLs of the replicas requests may go to
        self._task: asyncio.Task | None = None
        self._client: httpx.AsyncClient | None = None
        self._resolved_at = 0.0

    async def start(self) -> None:
        """Resolve and probe once (so the first requests know the fleet), then keep at it."""
        self._client = httpx.AsyncClient(timeout=self.probe_timeout_s, trust_env=False)
        await self._resolve()
        await self._probe_all()
        self._task = asyncio.create_task(self._run(), name=f"fleet-monitor-{self.name}")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    def mark_down(self, url: str, why: str = "refused a connection") -> None:
        """`url` is gone: no new request goes there until a probe passes."""
        if url in self.endpoints and url not in self.down:
            log.warning("upstream %r: endpoint %s is down: %s", self.name, url, why)
            self.down.add(url)
            self._update_healthy()
            self.listener.endpoint_down(url)

    def _mark_up(self, url: str) -> None:
        if url in self.down:
            log.warning("upstream %r: endpoint %s is back", self.name, url)
            self.down.discard(url)
            self._update_healthy()
            self.listener.endpoint_up(url)

    def _update_healthy(self) -> None:
        self.healthy = sorted(u for u in self.endpoints if u not in self.down)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            try:
                if time.monotonic() - self._resolved_at >= self.dns_interval_s:
                    await self._resolve()
                await self._probe_all()
            except Exception:  # noqa: BLE001 - the monitor must outlive any one failure
                log.exception("upstream %r: fleet monitor round failed", self.name)

    async def _resolve(self) -> None:
        self._resolved_at = time.monotonic()
        if not any(s.dns for s in self.specs) and self.endpoints:
            return  # a fixed list never changes
        found = {e.url: e for e in await resolve_all(self.specs)}
        if not found and self.endpoints:
            return  # a failed lookup keeps the replicas known so far
        for url in [u for u in self.endpoints if u not in found]:
            gone = self.endpoints.pop(url)
            self.down.discard(url)
            self.failed_probes.pop(url, None)
            log.warning("upstream %r: endpoint %s left", self.name, url)
            self.listener.endpoint_removed(gone)
        for url, endpoint in found.items():
            if url not in self.endpoints:
                self.endpoints[url] = endpoint
                self.listener.endpoint_added(endpoint)
        self._update_healthy()

    async def _probe_all(self) -> None:
        assert self._client is not None
        urls = list(self.endpoints)
        loads = await asyncio.gather(*(probe(self._client, self.endpoints[u].origin)
                                       for u in urls))
        for url, load in zip(urls, loads, strict=True):
            if url not in self.endpoints:
                continue  # removed while probing
            if isinstance(load, ProbeFailure):
                failed = self.failed_probes[url] = self.failed_probes.get(url, 0) + 1
                if load.refused or failed >= self.unhealthy_after:
                    self.mark_down(url, load.reason)
            else:
                self.failed_probes.pop(url, None)
                self._mark_up(url)
                self.listener.endpoint_load(url, load)
