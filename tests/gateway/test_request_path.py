"""A request's path reads top to bottom: a streamed miss, traced from the gateway's ASGI entry
through the in-process engine's front to its first SSE frame, calls down from stage to stage
and never back into a file it has already left (no callbacks up the stack); each stage's
file is entered from one file only, the stage above it, in the path's order.

The trace is Python's profiler hook on the event loop's thread (the engine's step thread is
not traced: it hands deltas back through a queue). A generator or coroutine resumed (a chunk
passing up the stack) is not a call: only frames entered at their first instruction count.
"""

from __future__ import annotations

import dis
import json
import sys
from functools import cache
from pathlib import Path
from types import CodeType, FrameType

import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("openai_api", "gateway", "engine", "cache", "prompts")
# the files a streamed miss passes through, each entered once before its first frame
STAGES = ("gateway/generation.py", "gateway/request_setup.py", "gateway/responses.py",
          "gateway/pipeline.py", "gateway/transform_stage.py", "gateway/upstream_call.py",
          "gateway/upstreams/engine.py", "engine/serving/openai_engine.py")


@cache
def _start(code: CodeType) -> int:
    """The offset a fresh frame of `code` starts at (after a generator's set-up)."""
    return next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")


def _file(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    path = frame.f_code.co_filename
    if not path.startswith(str(ROOT)):
        return None
    rel = Path(path).relative_to(ROOT).as_posix()
    return rel if rel.split("/")[0] in PRODUCT else None


class PathTrace:
    """Records every fresh call into a product file from another product file (its caller's
    file, in order), and every call that re-enters a file already on the stack beneath its
    caller. Calls the event loop makes (scheduled bookkeeping) have no caller: not counted."""

    def __init__(self) -> None:
        self.callers: dict[str, list[str]] = {}  # file -> the files it was entered from
        self.reentries: list[str] = []
        self.calls: list[str] = []  # every entry, in order: what an assertion prints

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or frame.f_lasti != _start(frame.f_code):
            return
        callee = _file(frame)
        if callee is None:
            return
        callers = [f for f in _chain(frame.f_back) if f is not None]
        if not callers or callers[0] == callee:
            return  # from the event loop, or within one file
        self.callers.setdefault(callee, []).append(callers[0])
        self.calls.append(f"{callers[0]} -> {callee}:{frame.f_code.co_name}")
        if callee in callers[1:]:
            self.reentries.append(f"{callers[0]} -> {callee} ({frame.f_code.co_name}), "
                                  f"beneath: {' < '.join(dict.fromkeys(callers))}")


def _chain(frame: FrameType | None) -> list[str | None]:
    out = []
    while frame is not None:
        out.append(_file(frame))
        frame = frame.f_back
    return out


@pytest.fixture(scope="module")
def app():
    return create_app(GatewayConfig.from_dict({
        "upstreams": {"local": {"kind": "engine"}},
        "routes": [{"name": "chat", "models": ["smollm2-135m-instruct"], "upstream": "local"}]}))


async def first_frame(app, body: dict, trace: PathTrace | None) -> bytes:
    """POST `body` to the app over ASGI; the first SSE frame, traced up to it."""
    raw = json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "query_string": b"", "http_version": "1.1",
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())],
             "scheme": "http", "server": ("testserver", 80), "client": ("127.0.0.1", 1)}
    sent: list[bytes] = []
    received = False

    async def receive() -> dict:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await app.state.stop.wait()  # the client stays until the answer is read
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            if not sent:
                sys.setprofile(None)
            sent.append(message["body"])

    if trace is not None:
        sys.setprofile(trace)
    try:
        await app(scope, receive, send)
    finally:
        sys.setprofile(None)
    return sent[0]


async def test_a_streamed_miss_calls_down_the_stages_and_never_back(app):
    import asyncio

    app.state.stop = asyncio.Event()
    async with app.router.lifespan_context(app):
        body = {"model": "smollm2-135m-instruct", "stream": True, "max_tokens": 2,
                "messages": [{"role": "user", "content": "Hello there"}]}
        await first_frame(app, body, None)  # warm: first-use imports are not the path
        trace = PathTrace()
        frame = await first_frame(app, {**body, "max_tokens": 3}, trace)
        app.state.stop.set()
    assert frame.startswith(b"data: {")
    assert trace.reentries == [], "\n".join(trace.reentries)
    calls = "\n".join(trace.calls)
    entered_from = {stage: set(trace.callers.get(stage, ())) for stage in STAGES}
    assert all(len(files) == 1 for files in entered_from.values()), (entered_from, calls)
    first_entries = [stage for stage in trace.callers if stage in STAGES]
    assert first_entries == list(STAGES), calls
