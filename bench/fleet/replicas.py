"""A fleet as real processes, for tests and the live fleet bench: `headstart engine`
replicas and a `headstart serve` gateway in front of them.

Each replica serves on a free port, publishes its KV events on another, and runs one torch
thread unless told otherwise (this machine has two cores for everything). They start in
parallel: loading the model costs seconds each.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field

import yaml

from bench.harness.workloads import WorkloadSizes
from tests.support.processes import ServerProcess, free_port, headstart_cmd

MODEL = "smollm2-135m-instruct"


@dataclass
class EngineReplica:
    """One `headstart engine --kv-events` process; can be killed and started again."""

    args: list[str] = field(default_factory=list)
    threads: int = 1
    port: int = field(default_factory=free_port)
    kv_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        command = headstart_cmd("engine", "--port", str(self.port),
                                "--kv-events", self.kv_address, *self.args)
        self.server = ServerProcess(command, self.port, env={
            "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)})

    @property
    def url(self) -> str:
        """The base URL a gateway sends requests to."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def kv_address(self) -> str:
        return f"tcp://127.0.0.1:{self.kv_port}"

    def endpoint(self) -> dict[str, str]:
        """Its `endpoints:` entry in a gateway config."""
        return {"url": self.url, "kv_events": self.kv_address}

    def start(self) -> EngineReplica:
        self.server.start()
        return self

    def kill(self) -> None:
        """SIGKILL: the process dies mid-whatever, as a crashed replica does."""
        proc = self.server.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        self.server.proc = None

    def stop(self) -> None:
        self.server.stop()

    @property
    def running(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None


def start_replicas(count: int, args: list[str] | None = None,
                   threads: int = 1) -> list[EngineReplica]:
    """`count` replicas started in parallel; all stopped again if one fails."""
    replicas = [EngineReplica(list(args or []), threads) for _ in range(count)]
    errors: list[BaseException] = []

    def start(replica: EngineReplica) -> None:
        try:
            replica.start()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    workers = [threading.Thread(target=start, args=(r,)) for r in replicas]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        stop_replicas(replicas)
        raise errors[0]
    return replicas


def stop_replicas(replicas: list[EngineReplica]) -> None:
    for replica in replicas:
        replica.stop()


@dataclass
class LiveSettings:
    """What a live fleet run uses: replicas, run lengths, the sweep, the chat trace."""

    replicas: int = 3
    engine_args: tuple[str, ...] = ("--num-kv-blocks", "2048")
    duration_s: float = 30.0
    warmup_s: float = 5.0
    drain_s: float = 30.0
    start_rate: float = 1.0
    max_rate: float = 16.0
    min_rate: float = 0.25  # a sweep that fails here stops: no passing rate
    refine: int = 2
    slo_ms: float = 700.0
    seed: int = 0
    sizes: WorkloadSizes = field(default_factory=WorkloadSizes)


def gateway_config(replicas: list[EngineReplica], policy: str) -> dict:
    """One route, every model name, to a fleet upstream over `replicas`."""
    fleet = {"kind": "openai", "model": MODEL, "balance": policy,
             "endpoints": [r.endpoint() for r in replicas]}
    return {"upstreams": {"fleet": fleet},
            "routes": [{"name": "bench", "models": ["*"], "upstream": "fleet",
                        "timeout_s": 300}]}


def start_gateway(config: dict) -> ServerProcess:
    """`headstart serve` on `config`, healthy; the caller stops it."""
    handle = tempfile.NamedTemporaryFile("w", prefix="fleet-gateway-", suffix=".yaml",
                                         delete=False)
    with handle:
        yaml.safe_dump(config, handle)
    port = free_port()
    return ServerProcess(headstart_cmd("serve", "--config", handle.name, "--port", str(port),
                                       "--log-level", "warning"), port,
                         env={"OMP_NUM_THREADS": "1"}).start()
