"""One look at a replica: is it up (`GET /health`), and how loaded is it (`GET /metrics`).
A replica that refuses the connection is gone; one that answers slowly or with an error
may only be busy (the monitor waits for several such probes before ejecting it).

Load is read from the metric names `headstart engine` and vLLM export: requests running and
waiting, and KV cache use (`headstart_engine_kv_blocks_used / _total`, or vLLM's
`vllm:kv_cache_usage_perc`, formerly `vllm:gpu_cache_usage_perc`). A replica without
`/metrics` is still healthy; its load is then what this gateway sent it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_NAMES = {
    "headstart_engine_num_requests_running": "running",
    "vllm:num_requests_running": "running",
    "headstart_engine_num_requests_waiting": "waiting",
    "vllm:num_requests_waiting": "waiting",
    "headstart_engine_kv_blocks_used": "blocks_used",
    "headstart_engine_kv_blocks_total": "blocks_total",
    "headstart_engine_kv_tier_capacity_blocks": "tier_blocks",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
_VLLM_BLOCKS = re.compile(r'num_gpu_blocks="(\d+)"')


@dataclass
class ReplicaLoad:
    """What a replica's /metrics said."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # 0..1
    kv_blocks: int | None = None  # its KV cache size in blocks, when it says
    tier_blocks: int = 0  # what its second KV tier holds besides (`--kv-offload-mb`)


def parse_metrics(text: str) -> ReplicaLoad:
    """ReplicaLoad from Prometheus exposition text (values summed over labels)."""
    seen: dict[str, float] = {}
    blocks = None
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info") and (m := _VLLM_BLOCKS.search(line)):
            blocks = int(m.group(1))
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None or m.group(1) not in _NAMES:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        key = _NAMES[m.group(1)]
        seen[key] = seen.get(key, 0.0) + value
    total = seen.get("blocks_total")
    usage = seen.get("kv_usage", 0.0)
    if total:
        usage = seen.get("blocks_used", 0.0) / total
        blocks = int(total)
    return ReplicaLoad(int(seen.get("running", 0)), int(seen.get("waiting", 0)),
                       min(1.0, max(0.0, usage)), blocks, int(seen.get("tier_blocks", 0)))


@dataclass
class ProbeFailure:
    """Why a probe failed; `refused`: nothing listens there (the process is gone)."""

    reason: str
    refused: bool = False


async def probe(client: httpx.AsyncClient, origin: str) -> ReplicaLoad | ProbeFailure:
    """The replica's load when `/health` answers 200, else why not."""
    try:
        health = await client.get(origin + "/health")
        if health.status_code != 200:
            return ProbeFailure(f"/health answered {health.status_code}")
    except httpx.ConnectError as exc:
        return ProbeFailure(f"cannot connect ({exc})", refused=True)
    except httpx.HTTPError as exc:
        return ProbeFailure(f"{type(exc).__name__}: {exc}")
    try:
        metrics = await client.get(origin + "/metrics")
    except httpx.HTTPError:
        return ReplicaLoad()
    return parse_metrics(metrics.text) if metrics.status_code == 200 else ReplicaLoad()
