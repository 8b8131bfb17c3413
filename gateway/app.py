"""`create_app(config) -> FastAPI`: the gateway's app, wired from one `GatewayConfig`.

The lifespan loads the in-process engine when an upstream is `kind: engine` (in a worker
thread: loading weights takes seconds), opens the upstreams, creates the cache and transform
stages, and closes all of it at shutdown. Everything lives on `app.state`: `config`,
`routes`, `auth`, `metrics`, `engine` (the in-process `AsyncEngine`, or None), `upstreams`,
`cache`, `transforms`, `pipeline`, `dashboard` (its data feed) and `responses` (the stored
Responses API answers);
routers take them as typed dependencies (`gateway/deps.py`). The generation endpoints are
served in front of FastAPI (`GatewayApp`), the rest by it; they get the parts they use as
`app.generation` (`GenerationDeps`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import AsyncEngine, EngineConfig, OpenAIEngine
from gateway.admission import Admission
from gateway.auth import Authenticator
from gateway.cache_stage import CacheStage
from gateway.config import DEFAULT_MODEL_NAME, ConfigError, GatewayConfig, UpstreamConfig
from gateway.config import default_config as embedded_default
from gateway.cors import CorsPolicy
from gateway.dashboard.data import DashboardFeed
from gateway.generation import GenerationDeps, match, serve_generation
from gateway.metrics import GatewayMetrics
from gateway.pipeline import Pipeline
from gateway.rate_limit import RateLimiter
from gateway.request_setup import pick_request_id
from gateway.response_store import open_response_store
from gateway.routers import admin, dashboard, embeddings, health, models, responses, ws
from gateway.routing import RouteTable
from gateway.transform_stage import TransformStage
from gateway.upstream_call import UpstreamCaller
from gateway.upstreams import build_upstreams
from openai_api.handlers import install_error_handlers

log = logging.getLogger("headstart.gateway")


def load_engine(up: UpstreamConfig) -> AsyncEngine:
    """The bundled engine for a `kind: engine` upstream (blocking: loads the weights)."""
    try:
        engine_config = EngineConfig(model=up.path, model_name=up.model or DEFAULT_MODEL_NAME,
                                     **up.engine)
    except TypeError as e:
        raise ConfigError(f"upstreams.{up.name}.engine: {e}") from None
    return AsyncEngine(engine_config)


_STEP_THREADS: list[Executor] = []  # the live in-process engines' executors, newest last


def share_step_thread(engine: AsyncEngine | None) -> Callable[[], None]:
    """With the bundled engine on this CPU, the shared embedder encodes on the engine's step
    thread, between steps (engine/step_executor.py): run beside a step instead, it takes cores
    from the step's threads mid-op and slows every running stream. Returns the undo, which
    hands the embedder to the newest engine still running (several apps in one process)."""
    if engine is None or not engine.on_cpu:
        return lambda: None
    from cache.embedder import Embedder

    embedder = Embedder.shared()
    embedder.executor = engine.executor
    _STEP_THREADS.append(engine.executor)

    def undo() -> None:
        _STEP_THREADS.remove(engine.executor)
        if embedder.executor is engine.executor:
            embedder.executor = _STEP_THREADS[-1] if _STEP_THREADS else None
    return undo


@asynccontextmanager
async def lifespan(app: GatewayApp) -> AsyncIterator[None]:
    state = app.state
    config: GatewayConfig = state.config
    engine_up = config.engine_upstream()
    state.engine = await asyncio.to_thread(load_engine, engine_up) if engine_up else None
    # before any other model loads: the embedder's and the scorer's torch work runs on the
    # engine's step thread too, one OpenMP team in the process (engine/async_engine.py)
    unshare = share_step_thread(state.engine)
    served = OpenAIEngine(state.engine) if state.engine is not None else None
    if served is not None:  # the engine's own series on the gateway's /metrics
        state.metrics.watch_engine(served.metrics.registry)
    state.upstreams = build_upstreams(config, served)
    for upstream in state.upstreams.values():
        await upstream.start()
        if (collector := upstream.collector()) is not None:
            state.metrics.registry.register(collector)
    state.cache = await CacheStage.create(config)
    state.metrics.watch_cache(state.cache.stats_snapshot)
    caller = UpstreamCaller(state.upstreams, state.metrics)
    caller.admission = Admission(config, state.engine, state.metrics.count_shed)
    await caller.admission.warm_up()
    state.cache.start_judging(caller)  # grey-zone misses judged off the request path
    state.transforms = TransformStage(config, caller, state.engine)
    state.pipeline = Pipeline(state.cache, state.transforms, caller, state.metrics)
    app.generation.pipeline = state.pipeline
    history = state.dashboard.sampler.start()  # the page's last 15 minutes, a sample a second
    # the startup heap (torch, weights, config) leaves the collector's scans: a full
    # collection over it takes tens of ms, a latency spike for whichever request waits
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # a frozen heap is never collected: a stopped app (tests start many in
        # one process) would keep its engine's memory for the life of the process
        history.cancel()
        unshare()
        for upstream in state.upstreams.values():
            await upstream.aclose()
        await state.cache.close()
        state.rate_limits.close()
        state.responses.close()
        if state.engine is not None:
            await state.engine.shutdown()


class RequestIdMiddleware:
    """Every HTTP response carries `x-request-id` (the caller's, if sensible, else new)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = pick_request_id(Headers(scope=scope).get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                if not any(k == b"x-request-id" for k, _ in headers):
                    headers.append((b"x-request-id", request_id.encode()))
            await send(message)

        await self.app(scope, receive, send_with_id)


class GatewayApp(FastAPI):
    """FastAPI with the generation endpoints in front of its middleware stack: those carry
    nearly all the traffic and are served as plain ASGI (`gateway/generation.py`)."""

    cors: CorsPolicy | None = None  # set by `create_app`; None: no cross-origin requests
    generation: GenerationDeps  # set by `create_app`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (found := match(scope["path"])) is not None \
                and not (scope["method"] == "OPTIONS" and self.cors is not None):
            scope["app"] = self
            await serve_generation(self.generation, scope, receive, send, *found)
            return
        await super().__call__(scope, receive, send)  # a CORS preflight goes to its middleware


def create_app(config: GatewayConfig | None = None) -> GatewayApp:
    """The gateway for `config` (the embedded default when None)."""
    config = config or embedded_default()
    app = GatewayApp(title="Headstart gateway", lifespan=lifespan, docs_url=None,
                     redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.routes = RouteTable(config)
    app.state.auth = Authenticator(config.auth)
    app.state.metrics = GatewayMetrics()
    app.state.rate_limits = RateLimiter.for_config(config, app.state.metrics)
    app.state.dashboard = DashboardFeed(config, app.state.metrics.registry, guarded=not (
        app.state.auth.open and app.state.auth.admin_key is None))
    app.state.engine = None
    app.cors = CorsPolicy.from_config(config.cors)
    app.generation = GenerationDeps(app.state.auth, app.state.routes,
                                    config.limits.max_body_bytes, app.cors)
    app.generation.rate_limits = app.state.rate_limits
    app.state.responses = app.generation.responses = open_response_store(config)
    install_error_handlers(app)
    for module in (models, embeddings, responses, ws, health):
        app.include_router(module.router)
    app.include_router(admin.router)
    app.include_router(dashboard.router)
    if app.cors is not None:
        app.add_middleware(CORSMiddleware, **app.cors.middleware_options())
    app.add_middleware(RequestIdMiddleware)
    return app
