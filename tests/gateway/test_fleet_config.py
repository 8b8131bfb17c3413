"""Fleet upstream configuration, endpoint resolution, the replica probe and the monitor
that ejects replicas."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import ConfigError, GatewayConfig
from gateway.fleet.endpoints import Endpoint, EndpointSpec, resolve, resolve_all
from gateway.fleet.health import ReplicaLoad, parse_metrics
from gateway.fleet.monitor import FleetMonitor
from gateway.upstreams import build_upstream
from gateway.upstreams.fleet import FleetUpstream
from tests.support.processes import free_port


def config(upstream: dict) -> GatewayConfig:
    return GatewayConfig.from_dict({"upstreams": {"fleet": upstream},
                                    "routes": [{"name": "r", "upstream": "fleet"}]}, "<test>")


def test_endpoints_make_a_fleet_upstream_with_prefix_balance_by_default() -> None:
    cfg = config({"kind": "openai", "endpoints": ["http://e1:8001/v1",
                                                  {"url": "dns+http://engine:8001/v1",
                                                   "kv_events": "tcp://{host}:5557"}]})
    up = cfg.upstreams["fleet"]
    assert up.balance == "prefix" and up.block_size == 16
    fleet = build_upstream(up)
    assert isinstance(fleet, FleetUpstream)
    assert fleet.specs == [EndpointSpec("http://e1:8001/v1"),
                           EndpointSpec("dns+http://engine:8001/v1", "tcp://{host}:5557")]


@pytest.mark.parametrize(("upstream", "message"), [
    ({"kind": "openai", "endpoints": ["ftp://e1/v1"]},
     "upstreams.fleet.endpoints: 'ftp://e1/v1' is not an http(s):// or dns+http(s):// URL"),
    ({"kind": "openai", "endpoints": ["dns+http://engine/v1"]},
     "upstreams.fleet.endpoints: 'dns+http://engine/v1': a dns+ endpoint needs a port"),
    ({"kind": "openai", "base_url": "http://e/v1", "endpoints": ["http://e1/v1"]},
     "upstreams.fleet: endpoints apply to kind 'openai', instead of base_url"),
    ({"kind": "litellm", "model": "x/y", "endpoints": ["http://e1/v1"]},
     "upstreams.fleet: endpoints apply to kind 'openai', instead of base_url"),
    ({"kind": "openai"}, "upstreams.fleet: kind 'openai' needs base_url (or endpoints)"),
    ({"kind": "openai", "endpoints": ["http://e1/v1"], "balance": "fastest"},
     "upstreams.fleet.balance: Input should be 'prefix', 'session', 'least_loaded', "
     "'round_robin' or 'random'"),
])
def test_bad_fleet_configs_name_the_key(upstream: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(upstream)
    assert message in str(e.value)


async def test_static_endpoints_keep_their_url_and_fill_the_kv_host() -> None:
    (e,) = await resolve(EndpointSpec("http://e1:8001/v1/", "tcp://{host}:5557"))
    assert e == Endpoint("http://e1:8001/v1", "tcp://e1:5557")
    assert e.origin == "http://e1:8001"


async def test_dns_endpoints_become_one_url_per_address() -> None:
    found = await resolve_all([EndpointSpec("dns+http://localhost:8123/v1", "tcp://{host}:7"),
                               EndpointSpec("http://127.0.0.1:8123/v1")])
    urls = [e.url for e in found]
    assert "http://127.0.0.1:8123/v1" in urls and len(urls) == len(set(urls))
    ipv4 = next(e for e in found if e.url == "http://127.0.0.1:8123/v1")
    assert ipv4.kv_events in ("tcp://127.0.0.1:7", None)  # from the dns spec or the static one
    assert await resolve(EndpointSpec("dns+http://no-such-host.invalid:80/v1")) == []


def test_probe_reads_headstart_and_vllm_metrics() -> None:
    headstart = ("# HELP x\nheadstart_engine_num_requests_running 3.0\n"
                 "headstart_engine_num_requests_waiting 2.0\nheadstart_engine_kv_blocks_used 30\n"
                 "headstart_engine_kv_blocks_total 120\n")
    assert parse_metrics(headstart) == ReplicaLoad(3, 2, 0.25, 120)
    vllm = ('vllm:num_requests_running{model_name="m"} 4\n'
            'vllm:num_requests_waiting{model_name="m"} 1\n'
            'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="9000"} 1.0\n')
    assert parse_metrics(vllm) == ReplicaLoad(4, 1, 0.5, 9000)
    assert parse_metrics("") == ReplicaLoad()


class _Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def endpoint_added(self, endpoint: Endpoint) -> None:
        self.calls.append(("added", endpoint.url))

    def endpoint_removed(self, endpoint: Endpoint) -> None:
        self.calls.append(("removed", endpoint.url))

    def endpoint_down(self, url: str) -> None:
        self.calls.append(("down", url))

    def endpoint_up(self, url: str) -> None:
        self.calls.append(("up", url))

    def endpoint_load(self, url: str, load: ReplicaLoad) -> None:
        self.calls.append(("load", url))


async def test_a_refused_replica_is_ejected_at_once_a_silent_one_after_three_probes(
        blackhole) -> None:
    refused = f"http://127.0.0.1:{free_port()}/v1"
    silent = f"http://127.0.0.1:{blackhole.port}/v1"
    listener = _Listener()
    monitor = FleetMonitor("fleet", [EndpointSpec(refused), EndpointSpec(silent)], listener,
                           health_interval_s=0.05, probe_timeout_s=0.1, unhealthy_after=3)
    await monitor.start()  # resolves and probes once
    try:
        assert ("down", refused) in listener.calls and ("down", silent) not in listener.calls
        assert monitor.healthy == [silent] and monitor.failed_probes[silent] == 1
        for _ in range(100):
            await asyncio.sleep(0.05)
            if ("down", silent) in listener.calls:
                break
        assert monitor.healthy == [] and monitor.failed_probes[silent] >= 3
    finally:
        await monitor.aclose()
