"""Live gateways for tests: the real app under uvicorn in a background thread on a free port.

`start_gateway(config_dict) -> base_url` (function fixture; every gateway it started stops at
the end of the test) and `GatewayThread` for session/module fixtures. `engine_server` is one
`headstart engine` subprocess shared by the whole session (loading the model costs seconds).
`scripted_upstream` is an HTTP upstream whose answer a test sets.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.http_protocol import GatewayHttpProtocol, server_options
from tests.support.processes import ServerProcess, free_port, headstart_cmd


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll `predicate` until it holds or `timeout_s` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def scrape(base_url: str, sample: str, default: float | None = None) -> float:
    """The value of one Prometheus sample (`name{labels}`, labels sorted) at `base_url`;
    `default` when it is absent (None: absent is a failure)."""
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    if default is None:
        raise AssertionError(f"no metric {sample}")
    return default


def engine_gauge(engine_server: ServerProcess, name: str) -> float:
    """One of a `headstart engine`'s Prometheus gauges (`headstart_engine_NAME`)."""
    return scrape(engine_server.base_url, f"headstart_engine_{name}")


class GatewayThread:
    """One gateway app served by uvicorn in a daemon thread; `app` is there for its state.
    `http`: uvicorn's protocol (the gateway's own, as `headstart serve` uses, by default)."""

    def __init__(self, config: dict[str, Any] | GatewayConfig,
                 http: type[asyncio.Protocol] | str = GatewayHttpProtocol) -> None:
        if not isinstance(config, GatewayConfig):
            config = GatewayConfig.from_dict(config, source="<test config>")
        self.app = create_app(config)
        self.port = free_port()
        options = {**server_options(config), "http": http}
        self.server = uvicorn.Server(uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning",
            access_log=False, lifespan="on", **options))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self.error = e

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180) -> GatewayThread:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"gateway did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not start in time")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def start_gateway() -> Iterator[Callable[[dict[str, Any]], str]]:
    """`start_gateway(config_dict) -> base_url` (no `/v1`); stopped after the test."""
    started: list[GatewayThread] = []

    def start(config: dict[str, Any]) -> str:
        gateway = GatewayThread(config).start()
        started.append(gateway)
        return gateway.base_url

    yield start
    for gateway in started:
        gateway.stop()


class EngineBoot:
    """`headstart engine` starting in a background thread, so the session's in-process
    engine can load at the same time (each model load costs seconds)."""

    def __init__(self) -> None:
        port = free_port()
        self.server = ServerProcess(headstart_cmd("engine", "--port", str(port)), port)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, daemon=True)
        self.thread.start()

    def _start(self) -> None:
        try:
            self.server.start()
        except BaseException as e:  # noqa: BLE001 - reported by wait()
            self.error = e

    def wait(self) -> ServerProcess:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.server


@pytest.fixture(scope="session")
def engine_boot() -> Iterator[EngineBoot]:
    boot = EngineBoot()
    yield boot
    boot.thread.join()
    boot.server.stop()


@pytest.fixture(scope="session")
def engine_server(engine_boot) -> ServerProcess:
    """One `headstart engine` subprocess for the session (SmolLM2 on a free port)."""
    return engine_boot.wait()


class Blackhole:
    """A TCP port that accepts connections (kernel backlog) and never answers: a stalled
    upstream, for timeouts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


class ScriptedUpstream(ThreadingHTTPServer):
    """An OpenAI-shaped HTTP server that answers every POST with `answer` (status, JSON
    bytes, or SSE frames when they start with `data:`) and keeps each request's path and
    body bytes: for what goes over the hop itself, and for answers no real engine gives
    (malformed, unfinished)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.answer: tuple[int, bytes] = (200, b"{}")
        self.requests: list[tuple[str, bytes]] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the gateway's pool expects
    server: ScriptedUpstream

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.requests.append((self.path, body))
        status, data = self.server.answer
        self.send_response(status)
        sse = data.startswith(b"data:")
        self.send_header("content-type", "text/event-stream" if sse else "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def scripted_upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream()
    yield server
    server.close()


@pytest.fixture(scope="session")
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()


def full_config(engine_url: str, blackhole_port: int) -> dict[str, Any]:
    """Every kind of upstream and route the gateway tests exercise, in one config."""
    return {
        "upstreams": {
            "local": {"kind": "engine", "engine": {"kv_cache_memory_mb": 256}},
            "remote": {"kind": "openai", "base_url": engine_url + "/v1",
                       "model": "smollm2-135m-instruct"},
            "remote-always": {"kind": "openai", "base_url": engine_url + "/v1",
                              "model": "smollm2-135m-instruct", "always_stream": True},
            "vialitellm": {"kind": "litellm", "model": "openai/smollm2-135m-instruct",
                           "base_url": engine_url + "/v1", "api_key": "unused"},
            "dead": {"kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"},
            "stalled": {"kind": "openai", "base_url": f"http://127.0.0.1:{blackhole_port}/v1"},
        },
        "routes": [
            {"name": "local", "models": ["smollm2-135m-instruct", "local-*"],
             "upstream": "local"},
            {"name": "remote", "models": ["remote", "remote-*"], "upstream": "remote"},
            {"name": "litellm", "models": ["litellm"], "upstream": "vialitellm"},
            {"name": "down", "models": ["down"], "upstream": "dead"},
            {"name": "fallback", "models": ["fallback"], "upstream": "dead",
             "fallback": "remote"},
            {"name": "slow", "models": ["slow"], "upstream": "stalled", "timeout_s": 0.5},
            # the route's timeout also bounds the fallback's first token: room for a busy CI
            {"name": "slow-fallback", "models": ["slow-fallback"], "upstream": "stalled",
             "fallback": "local", "timeout_s": 3.0},
            {"name": "always-stream", "models": ["always-stream"], "upstream": "remote-always"},
        ],
    }


@pytest.fixture(scope="session")
def gateway(engine_boot, blackhole) -> Iterator[GatewayThread]:
    """One gateway for the session: in-process engine, `headstart engine` over HTTP and via
    litellm, a dead upstream, a stalled one, fallbacks."""
    server = GatewayThread(full_config(engine_boot.server.base_url, blackhole.port)).start()
    engine_boot.wait()
    yield server
    server.stop()


@pytest.fixture
def client(gateway):
    import openai

    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="x", max_retries=0)
