"""The engine's own OpenAI-compatible HTTP server (`headstart engine`).

One model, served under one name. Bodies are parsed by the wire layer (`openai_api`: the
same errors as the gateway's), requests run through `OpenAIEngine` (the same path as the
gateway's in-process upstream); answers stream as SSE `data:` frames ending in
`data: [DONE]`, or come folded into one object. A client that leaves aborts its request,
so the engine frees its KV blocks at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.async_engine import AsyncEngine
from engine.config import POLICIES
from engine.serving.answers import fold
from engine.serving.kv_transfer import ROLES, KVTransfer
from engine.serving.metrics import HandoverCollector
from engine.serving.openai_engine import OpenAIEngine
from engine.serving.roles import check_role, start_kv_transfer
from openai_api import (
    ENDPOINTS,
    APIError,
    Chunk,
    GenerationRequest,
    ModelCard,
    ModelList,
    kind_of,
    new_id,
    parse_body,
)
from openai_api.handlers import install_error_handlers

T = TypeVar("T")
DEFAULT_PORT = 8001
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left; nobody reads the body
router = APIRouter()


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


def create_engine_app(engine: AsyncEngine, *, owns_engine: bool = False,
                      kv_transfer: KVTransfer | None = None) -> FastAPI:
    """The FastAPI app serving `engine`; with `owns_engine`, shutting the app down stops it.
    `kv_transfer`: its part in a prefill/decode handover (default: role `both`, none)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if owns_engine:
            await engine.shutdown()

    app = FastAPI(title="Headstart engine", lifespan=lifespan)
    app.state.engine = OpenAIEngine(engine)
    app.state.kv_transfer = kv_transfer or KVTransfer(engine)
    if app.state.kv_transfer.role != "both":
        app.state.engine.metrics.registry.register(HandoverCollector(kv_transfer.stats))
    install_error_handlers(app)

    @app.exception_handler(ClientDisconnected)
    async def client_gone(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    app.include_router(router)
    return app


# ---------------------------------------------------------------- routes


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.engine.metrics.render()
    return Response(body, media_type=content_type)


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    return ModelList(data=[ModelCard(id=request.app.state.engine.model_name)])


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> ModelCard:
    _check_model(model_id, request.app.state.engine)
    return ModelCard(id=model_id)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _generate(request, "chat/completions")


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await _generate(request, "completions")


async def _generate(request: Request, path: str) -> Response:
    """Answer one generation request: streamed, or folded into one object."""
    body: GenerationRequest = await parse_body(request, ENDPOINTS[path].request)
    engine: OpenAIEngine = request.app.state.engine
    _check_model(body.model, engine)
    rid = new_id("chatcmpl" if kind_of(body) == "chat" else "cmpl")
    session_id = body.session_id or request.headers.get("x-session-id") or None
    handover = request.app.state.kv_transfer.begin(body)
    chunks = engine.stream(body, request_id=rid, session_id=session_id,
                           cache_salt=body.cache_salt, completion_id=rid,
                           include_usage=body.wants_usage_chunk() or not body.stream,
                           handover=handover)
    try:  # the first chunk before the status line: a refused request gets its own status
        first = await _until_disconnected(request, anext(chunks))
    except StopAsyncIteration:
        raise APIError(500, "the engine ended the request without output",
                       code="engine_aborted") from None
    except BaseException:
        await chunks.aclose()
        raise
    if body.stream:
        return _sse(first, chunks, rid)
    answer = await _until_disconnected(request, fold(_resume(first, chunks), kind_of(body),
                                                     body.model))
    content = answer.model_dump()
    if handover is not None and (params := handover.answer_params()) is not None:
        content["kv_transfer_params"] = params  # where the prompt's blocks are, and which
    return JSONResponse(content, headers={"x-request-id": rid})


# ---------------------------------------------------------------- helpers


def _check_model(name: str, engine: OpenAIEngine) -> None:
    if name != engine.model_name:
        raise APIError(404, f"The model `{name}` does not exist; this server serves "
                       f"`{engine.model_name}`.", param="model", code="model_not_found")


async def _until_disconnected(request: Request, awaitable: Awaitable[T]) -> T:
    """Await `awaitable` unless the client disconnects first (then cancel it)."""
    work = asyncio.ensure_future(awaitable)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        work.cancel()
        raise
    finally:
        watcher.cancel()
    if work not in done:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise ClientDisconnected()
    return work.result()


async def _resume(first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    yield first
    async with aclosing(rest):
        async for chunk in rest:
            yield chunk


def _sse(first: Chunk, rest: AsyncIterator[Chunk], request_id: str) -> StreamingResponse:
    async def frames() -> AsyncIterator[str]:
        try:
            yield f"data: {first.model_dump_json()}\n\n"
            async for chunk in rest:
                yield f"data: {chunk.model_dump_json()}\n\n"
        except APIError as exc:  # the engine failed mid-stream: tell the client, then end
            yield f"data: {json.dumps(exc.body())}\n\n"
        finally:
            await rest.aclose()
        yield "data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={"x-request-id": request_id, "cache-control": "no-cache"})


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="headstart engine",
                                description="Serve one model over the OpenAI API.")
    p.add_argument("--model", help=".gguf file or Hugging Face folder (default: SmolLM2-135M)")
    p.add_argument("--served-model-name",
                   help="the `model` name clients send (default: smollm2-135m-instruct, or the "
                        "--model file's stem)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--dtype", default="auto", help="auto | bfloat16 | float32 | float16")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--max-num-batched-tokens", type=int, help="per-step token budget")
    p.add_argument("--max-num-seqs", type=int, help="cap on running requests")
    p.add_argument("--max-model-len", type=int, help="context length (default: the model's)")
    p.add_argument("--kv-cache-memory-mb", type=int, help="KV cache pool size")
    p.add_argument("--num-kv-blocks", type=int, help="KV cache pool size in blocks")
    p.add_argument("--block-size", type=int)
    p.add_argument("--session-idle-s", type=float, help="how long a session's blocks are kept")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--scheduling-policy", choices=POLICIES,
                   help="fcfs (default): first come, first served; priority: requests' "
                        "`priority` field, lower first (vLLM's meaning)")
    p.add_argument("--seed", type=int)
    p.add_argument("--kv-offload-mb", type=int, metavar="N",
                   help="a second KV tier of N MB: blocks evicted from the pool go there (int8 "
                        "in RAM, or the pool's bytes on disk with --kv-offload-dir) and are "
                        "loaded back instead of recomputed")
    p.add_argument("--kv-offload-dir", metavar="DIR",
                   help="keep the second tier in a file under DIR (lossless) instead of RAM")
    p.add_argument("--kv-events", metavar="ENDPOINT",
                   help="publish KV cache events (vLLM's format) on a ZeroMQ PUB socket bound "
                        "here, e.g. tcp://*:5557")
    p.add_argument("--role", choices=ROLES, default="both",
                   help="both (default): read prompts and write answers; prefill: also hand a "
                        "prompt's KV blocks to a decode engine (kv_transfer_params); decode: "
                        "also load blocks a prefill engine hands over")
    p.add_argument("--kv-transfer-port", type=int, metavar="N",
                   help="prefill: serve KV blocks on this TCP port (default: any free one; "
                        "the answers' kv_transfer_params name it)")
    p.add_argument("--kv-transfer-host", metavar="H",
                   help="prefill: the host decode engines reach it at (default: --host, or "
                        "this machine's address when --host is 0.0.0.0)")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


def engine_config(args: argparse.Namespace):
    """EngineConfig from the parsed arguments (unset options keep the config's defaults)."""
    from engine.config import EngineConfig

    name = args.served_model_name or (Path(args.model.rstrip("/")).stem if args.model
                                      else EngineConfig.model_name)
    options = {
        "dtype": args.dtype, "device": args.device,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_num_seqs": args.max_num_seqs, "max_model_len": args.max_model_len,
        "kv_cache_memory_mb": args.kv_cache_memory_mb, "num_kv_blocks": args.num_kv_blocks,
        "block_size": args.block_size, "session_idle_s": args.session_idle_s, "seed": args.seed,
        "scheduling_policy": args.scheduling_policy, "kv_offload_mb": args.kv_offload_mb,
        "kv_offload_dir": args.kv_offload_dir,
    }
    return EngineConfig(model=args.model, model_name=name,
                        enable_prefix_caching=not args.no_prefix_caching,
                        **{k: v for k, v in options.items() if v is not None})


def main(argv: list[str] | None = None) -> None:
    """Load the model and serve it until interrupted."""
    import uvicorn

    args = parse_args(argv)
    try:
        check_role(args)
        engine = AsyncEngine(engine_config(args))
    except ValueError as exc:  # a bad value (an unwritable --kv-offload-dir...): say which
        raise SystemExit(f"headstart engine: error: {exc}") from None
    publisher = None
    if args.kv_events:
        from engine.kv_events import KVEventPublisher

        kv = engine.engine.kv
        publisher = KVEventPublisher(args.kv_events, kv.block_size)
        kv.events = publisher
    kv_transfer, block_server = start_kv_transfer(engine, args)
    app = create_engine_app(engine, owns_engine=True, kv_transfer=kv_transfer)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        if publisher is not None:
            publisher.close()
        if block_server is not None:
            block_server.close()


if __name__ == "__main__":
    main()
