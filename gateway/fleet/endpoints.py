"""A fleet's endpoints: configured URLs, or DNS names that resolve to one URL per replica.

`endpoints: [http://e1:8001/v1, ...]` names replicas one by one; `dns+http://engine:8001/v1`
names all the addresses the name resolves to (`docker compose --scale engine=3`, a
Kubernetes headless Service), resolved again every `dns_interval_s` as replicas come and go.
Each replica's KV events come from `kv_events`: a ZeroMQ address, where `{host}` stands for
the replica's host (`tcp://{host}:5557`), or given per endpoint
(`{url: http://e1:8001/v1, kv_events: tcp://e1:5557}`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger("headstart.gateway")
DNS_SCHEME = "dns+"


@dataclass(frozen=True)
class EndpointSpec:
    """One `endpoints:` entry: a replica's base URL, or a DNS name for several."""

    url: str
    kv_events: str | None = None  # ZeroMQ address of its KV events; `{host}` allowed

    @property
    def dns(self) -> bool:
        return self.url.startswith(DNS_SCHEME)


@dataclass(frozen=True)
class Endpoint:
    """One replica: the base URL requests go to (also its `x-headstart-endpoint`)."""

    url: str
    kv_events: str | None = None

    @property
    def origin(self) -> str:
        """`scheme://host:port`, where `/health` and `/metrics` live."""
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def check_spec(url: str) -> None:
    """ValueError unless `url` is `http(s)://host[:port]/...` or `dns+http(s)://...`."""
    parts = urlsplit(url.removeprefix(DNS_SCHEME))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s):// or dns+http(s):// URL")
    if url.startswith(DNS_SCHEME) and parts.port is None:
        raise ValueError(f"{url!r}: a dns+ endpoint needs a port")


def kv_address(template: str | None, host: str) -> str | None:
    if not template:
        return None
    return template.replace("{host}", f"[{host}]" if ":" in host else host)


def static_endpoint(spec: EndpointSpec) -> Endpoint:
    url = spec.url.rstrip("/")
    return Endpoint(url, kv_address(spec.kv_events, urlsplit(url).hostname or ""))


async def resolve(spec: EndpointSpec) -> list[Endpoint]:
    """The replicas `spec` names now: itself, or one per address its DNS name resolves to
    (sorted, so every gateway lists them alike). A failed lookup names none."""
    if not spec.dns:
        return [static_endpoint(spec)]
    parts = urlsplit(spec.url.removeprefix(DNS_SCHEME).rstrip("/"))
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(parts.hostname, parts.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("endpoint %s: cannot resolve %s (%s)", spec.url, parts.hostname, exc)
        return []
    hosts = sorted({info[4][0] for info in infos})
    out = []
    for host in hosts:
        netloc = f"[{host}]:{parts.port}" if ":" in host else f"{host}:{parts.port}"
        out.append(Endpoint(urlunsplit((parts.scheme, netloc, parts.path, "", "")),
                            kv_address(spec.kv_events, host)))
    return out


async def resolve_all(specs: list[EndpointSpec]) -> list[Endpoint]:
    """Every replica the specs name, each once, in a stable order."""
    found = await asyncio.gather(*(resolve(s) for s in specs))
    unique = {e.url: e for group in found for e in group}
    return [unique[url] for url in sorted(unique)]
