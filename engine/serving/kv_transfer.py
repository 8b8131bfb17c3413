"""`kv_transfer_params`, vLLM's request and answer field for a prefill/decode handover, on
the engine's own server (`headstart engine --role prefill|decode`).

A prefill engine answers a request carrying `{"do_remote_decode": true}` (vLLM's proxy sends
it with `max_tokens: 1`, unstreamed) as any other, and adds where the prompt's blocks are
and which:

    "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
        "remote_engine_id": "...", "remote_host": "10.0.0.5", "remote_port": 41234,
        "remote_block_ids": [7, 8, ...], "remote_block_hashes": ["<32 hex>", ...], "tp_size": 1,
        "first_token_id": 1234}

A decode engine gets those back on the same request and, before its sequence is queued,
fetches the blocks it lacks and the prompt's last partial block (engine/kv_handover_wire.py)
and loads them into its pool (engine/kv_handover.py). With `first_token_id` (the token the
prefill sampled; a Headstart field, used for one choice without logprobs) it then computes
none of the prompt: its first token is sent at once and the answer goes on as one engine's
would, bit for bit. Without it, it computes the prompt past the last full block. A handover
that fails (the prefill engine gone, its blocks evicted, another model) leaves the decode
engine to compute what it lacks: the same answer, later. An engine of role `both` (the
default) refuses the field: a 400, not a silent full answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from engine.async_engine import AsyncEngine
from engine.block_hash import tail_hash
from engine.kv_handover import (
    HandoverError,
    HandoverStats,
    TailStore,
    export_blocks,
    import_blocks,
    prompt_sequence,
)
from engine.kv_handover_wire import decode_hash, encode_hash, fetch_blocks
from engine.outputs import GenerationDelta
from engine.sampling_params import SamplingParams
from engine.sequence import HandedPrompt
from engine.serving.choices import Start
from openai_api import APIError, CompletionRequest, GenerationRequest

log = logging.getLogger("headstart.engine")
ROLES = ("both", "prefill", "decode")
PARAM = "kv_transfer_params"
# blocks loaded into the pool in one go on the step thread (~0.1 ms a block on this CPU):
# a long prompt's blocks come in several pieces, so the decode steps between them keep pace
IMPORT_BLOCKS_AT_ONCE = 32


class KVTransfer:
    """One engine's side of the handover: its role, and where its blocks are served."""

    def __init__(self, engine: AsyncEngine, role: str = "both", host: str | None = None,
                 port: int | None = None, engine_id: str = "", timeout_s: float = 10.0) -> None:
        self.engine = engine
        self.role = role
        self.host, self.port = host, port  # the block server (prefill)
        self.engine_id = engine_id
        self.timeout_s = timeout_s
        self.stats = HandoverStats()
        self.tails: TailStore | None = None  # prompts' last partial blocks (prefill)
        if role == "prefill":
            self.tails = TailStore(engine.engine)
            engine.engine.keep_tail = self.tails.keep

    def export(self, hashes: list[int]) -> tuple[int, bytearray]:
        """The leading run of `hashes` the pool holds, copied out (the block server's
        `export`). Step thread."""
        started = time.perf_counter()
        count, buffer = export_blocks(self.engine.engine, hashes, self.tails)
        self.stats.sent_blocks += count
        self.stats.sent_bytes += len(buffer)
        self.stats.sent_s += time.perf_counter() - started
        return count, buffer

    def begin(self, body: GenerationRequest) -> Handover | None:
        """The handover `body` asks for, or None; an APIError(400) naming the field when
        this engine cannot do it."""
        params = _asked(body)
        if params is None:
            return None
        if self.role == "both":
            refuse_handover(body)
        produce, consume = params.get("do_remote_decode") is True, \
            params.get("do_remote_prefill") is True
        if produce and consume:
            raise _bad(PARAM, "do_remote_decode and do_remote_prefill exclude each other")
        if produce:
            if self.role != "prefill":
                raise _bad(f"{PARAM}.do_remote_decode", f"this engine's role is {self.role}: "
                           "only a prefill engine hands its blocks over")
            if body.stream:
                raise _bad("stream", "a prefill for a remote decode is answered unstreamed")
            if not _one_choice(body):
                raise _bad("n", "a prefill for a remote decode reads one prompt, once")
            return Handover(self, body.cache_salt, None)
        if self.role != "decode":
            raise _bad(f"{PARAM}.do_remote_prefill", f"this engine's role is {self.role}: "
                       "only a decode engine loads handed blocks")
        first = _first_token(params, self.engine.engine.model_config.vocab_size)
        if not _one_choice(body) or body.logprobs:  # each choice samples its own first token
            first = None
        return Handover(self, body.cache_salt, _remote(params), first)


class Handover:
    """One request's handover: the prompt it recorded (prefill) or the blocks it fetches
    before the request is queued (decode, `remote` = (host, port, hashes))."""

    def __init__(self, transfer: KVTransfer, cache_salt: str | None,
                 remote: tuple[str, int, list[int]] | None,
                 first_token: int | None = None) -> None:
        self.transfer = transfer
        self.cache_salt = cache_salt
        self.remote = remote
        self.first_token = first_token  # sampled by the prefill engine (prefill: recorded)
        self.prompt: list[int] | None = None
        self.loaded_blocks = 0  # decode: blocks fetched and loaded here
        self._pulls: dict[tuple[int, ...], asyncio.Task[HandedPrompt | None]] = {}

    def wrap(self, start: Start) -> Start:
        """`start` (one engine request per choice), after the handover's part for its prompt."""

        async def started(ids: list[int], params: SamplingParams,
                          request_id: str) -> AsyncIterator[GenerationDelta]:
            if self.remote is None:
                self.prompt = list(ids)
                handover: dict[str, Any] = {"keeps_tail": True}
            else:  # choices of one prompt fetch its blocks once
                pull = self._pulls.get(tuple(ids))
                if pull is None:
                    pull = self._pulls[tuple(ids)] = asyncio.ensure_future(self._pull(ids))
                handover = {"handed": await asyncio.shield(pull)}
            async with aclosing(start(ids, params, request_id, **handover)) as deltas:
                async for delta in deltas:
                    if self.remote is None and self.first_token is None and delta.token_ids:
                        self.first_token = delta.token_ids[0]
                    yield delta

        return started

    def answer_params(self) -> dict[str, Any] | None:
        """The prefill answer's `kv_transfer_params`: where the prompt's blocks are, which."""
        if self.remote is not None or self.prompt is None:
            return None
        t = self.transfer
        seq = prompt_sequence(self.prompt, t.engine.engine.kv.block_size, self.cache_salt)
        return {"do_remote_prefill": True, "do_remote_decode": False,
                "remote_engine_id": t.engine_id, "remote_host": t.host, "remote_port": t.port,
                "remote_block_ids": t.engine.engine.kv.pool_blocks(seq.block_hashes),
                "remote_block_hashes": [encode_hash(h) for h in seq.block_hashes],
                "tp_size": 1, "first_token_id": self.first_token}

    async def _pull(self, ids: list[int]) -> HandedPrompt | None:
        """Fetch and load the prompt's full blocks this engine lacks and, with the prefill's
        first token, its last partial block: what the sequence is handed (None without a
        first token). On failure, log and let the engine compute what it lacks."""
        host, port, remote = self.remote
        llm, first_token = self.transfer.engine.engine, self.first_token
        bs = llm.kv.block_size
        handed = None if first_token is None else HandedPrompt(first_token)
        # the probe holds the handed first token: every full block of the prompt is then
        # reusable (find_cached_prefix keeps the last token to compute, that one)
        seq = prompt_sequence(ids if handed is None else [*ids, first_token], bs,
                              self.cache_salt)
        usable = seq.block_hashes[:(seq.num_tokens - 1) // bs]
        matched = 0  # the blocks both name alike, from the first
        while matched < min(len(usable), len(remote)) and usable[matched] == remote[matched]:
            matched += 1
        tail = None  # the prompt's last partial block, when every full one before it matched
        if handed is not None and matched == len(usable):
            tail = tail_hash(seq.block_hashes, ids, bs, self.cache_salt)
        # held here (pool or second tier) need no handover; read off the step thread this
        # may be stale, and the import checks again
        first = min(len(llm.kv.find_cached_prefix(seq)), matched)
        asked = usable[first:matched] + ([tail] if tail is not None else [])
        if not asked:
            return handed
        loop = asyncio.get_running_loop()
        stats = self.transfer.stats
        started = time.perf_counter()
        try:
            layout, count, buffer = await asyncio.to_thread(
                fetch_blocks, host, port, asked, self.transfer.timeout_s)
            full = min(count, matched - first)
            loaded = 0
            for start in range(0, full, IMPORT_BLOCKS_AT_ONCE):  # steps run in between
                n = min(IMPORT_BLOCKS_AT_ONCE, full - start)
                piece = memoryview(buffer)[start * layout.bytes_per_block:
                                           (start + n) * layout.bytes_per_block]
                loaded += await loop.run_in_executor(
                    self.transfer.engine.executor, import_blocks, llm, seq, first + start, n,
                    layout, piece)
            if count > full:  # the tail came too: loaded into the sequence's own block
                handed.tail = layout.slots(memoryview(buffer)[full * layout.bytes_per_block:],
                                           1).clone()
                loaded += 1
        except (OSError, HandoverError) as exc:
            stats.failures += 1
            log.warning("kv handover from %s:%s failed, computing the prompt here: %s",
                        host, port, exc)
            return handed
        self.loaded_blocks += loaded
        stats.received_blocks += loaded
        stats.received_bytes += len(buffer)
        stats.received_s += time.perf_counter() - started
        return handed


def _asked(body: GenerationRequest) -> dict[str, Any] | None:
    """`body`'s kv_transfer_params when they ask for a handover (vLLM's `do_remote_decode`
    or `do_remote_prefill`), else None; a 400 when they are not an object."""
    params = (body.model_extra or {}).get(PARAM)
    if params is None:
        return None
    if not isinstance(params, dict):
        raise _bad(PARAM, "kv_transfer_params must be an object")
    if params.get("do_remote_decode") is True or params.get("do_remote_prefill") is True:
        return params
    return None


def refuse_handover(body: GenerationRequest) -> None:
    """A 400 when `body` asks for a handover an engine of role `both` cannot do (the
    server's default, and the engine in the gateway's process)."""
    if _asked(body) is not None:
        raise _bad(PARAM, "kv_transfer_params needs an engine started with --role "
                   "prefill or --role decode (this one serves both)")


def _one_choice(body: GenerationRequest) -> bool:
    """One prompt, read once: what a prefill for a remote decode answers, and what a handed
    first token can stand for."""
    return body.n == 1 and not (isinstance(body, CompletionRequest) and len(body.prompts()) > 1)


def _first_token(params: dict[str, Any], vocab_size: int) -> int | None:
    """The prefill's first token (`first_token_id`), or None when the params lack it."""
    token = params.get("first_token_id")
    if token is None:
        return None
    if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab_size:
        raise _bad(f"{PARAM}.first_token_id", f"first_token_id must be a token id in "
                   f"[0, {vocab_size})")
    return token


def _remote(params: dict[str, Any]) -> tuple[str, int, list[int]]:
    host, port = params.get("remote_host"), params.get("remote_port")
    hashes = params.get("remote_block_hashes", [])
    if not isinstance(host, str) or not host:
        raise _bad(f"{PARAM}.remote_host", "remote_host must name the prefill engine's host")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise _bad(f"{PARAM}.remote_port", "remote_port must be a port number, 1-65535")
    if not isinstance(hashes, list):
        raise _bad(f"{PARAM}.remote_block_hashes", "remote_block_hashes must be a list")
    try:
        return host, port, [decode_hash(h) for h in hashes]
    except ValueError as exc:
        raise _bad(f"{PARAM}.remote_block_hashes", str(exc)) from None


def _bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param)
