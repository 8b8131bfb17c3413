"""A fleet upstream split in two pools: prefill replicas read prompts, decode replicas write
the answers (`prefill_endpoints:` beside `endpoints:`; engines started with `headstart engine
--role prefill` and `--role decode`).

Each request is sent twice, as vLLM's disaggregated proxy sends it:

    1. to a prefill replica, unstreamed, as `max_tokens: 1` with
       `kv_transfer_params: {"do_remote_decode": true}`; its answer's `kv_transfer_params`
       say where the prompt's KV blocks are (host, port, block hashes);
    2. to a decode replica, as the client asked it, with those `kv_transfer_params`: it
       fetches the blocks from the prefill replica, computes at most the prompt's last
       block, and streams the answer back.

Each pool is a `FleetUpstream` of its own (picker, health, retries on another replica), with
one set of `headstart_endpoint_*` series. The upstream caller (gateway/upstream_call.py)
sees one upstream: its timeouts bound both hops together. A request the prefill engines
cannot read alone (a batch of prompts) goes straight to a decode replica, which then reads
it itself; so does every request while the prefill pool fails (5xx, none up): the answer
is the same, later. A 4xx from the prefill replica is the request's own fault and is the
answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from gateway.config import UpstreamConfig
from gateway.fleet.metrics import EndpointGauges, EndpointMetrics
from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall
from gateway.upstreams.fleet import FleetUpstream
from openai_api import (
    APIError,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)

log = logging.getLogger("headstart.gateway")
Request = ChatCompletionRequest | CompletionRequest
PARAM = "kv_transfer_params"


class DisaggregatedUpstream(Upstream):
    def __init__(self, config: UpstreamConfig) -> None:
        super().__init__(config)
        self.metrics = EndpointMetrics(self.name, self._gauges)
        self.prefill = FleetUpstream(config.model_copy(update={
            "endpoints": config.prefill_endpoints, "prefill_endpoints": []}), self.metrics)
        self.decode = FleetUpstream(config.model_copy(update={"prefill_endpoints": []}),
                                    self.metrics)
        self.prefill_failures = 0  # requests decoded without a handover: the pool failed

    async def start(self) -> None:
        await self.prefill.start()
        await self.decode.start()

    async def aclose(self) -> None:
        await self.prefill.aclose()
        await self.decode.aclose()

    def collector(self) -> EndpointMetrics:
        return self.metrics

    def _gauges(self) -> dict[str, EndpointGauges]:
        return {**self.prefill.gauges(), **self.decode.gauges()}

    # ---------------------------------------------------------------- requests

    def answers_whole(self, request: Request) -> bool:
        return self.decode.answers_whole(request)

    async def answer(self, request: Request, call: UpstreamCall) -> ChatCompletion | Completion:
        decode_call = replace(call, client_json=None)
        answer = await self.decode.answer(await self._prefilled(request, call), decode_call)
        call.endpoint, call.body = decode_call.endpoint, decode_call.body
        return answer

    def stream_chat(self, request: ChatCompletionRequest,
                    call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream(request, call)

    def stream_completion(self, request: CompletionRequest,
                          call: UpstreamCall) -> AsyncIterator[Completion]:
        return self._stream(request, call)

    async def _stream(self, request: Request, call: UpstreamCall) -> AsyncIterator[Any]:
        decode_call = replace(call, client_json=None)
        stream = self.decode.stream(await self._prefilled(request, call), decode_call)
        try:
            async for chunk in stream:
                call.endpoint = decode_call.endpoint  # known from the first chunk
                yield chunk
        finally:
            await stream.aclose()

    async def _prefilled(self, request: Request, call: UpstreamCall) -> Request:
        """`request` for the decode pool: with the `kv_transfer_params` of a prefill
        replica that has read its prompt, or as it is when the prefill pool cannot."""
        if isinstance(request, CompletionRequest) and len(request.prompts()) > 1:
            return request
        ask = {"max_tokens": 1, "n": 1, "stream": False, "stream_options": None,
               "logprobs": None, PARAM: {"do_remote_decode": True}}
        if isinstance(request, ChatCompletionRequest):
            ask |= {"max_completion_tokens": None, "top_logprobs": None}
        prefill_call = UpstreamCall(call.request_id, call.session_id, call.cache_salt,
                                    None, call.priority)
        try:
            await self.prefill.answer(request.model_copy(update=ask), prefill_call)
        except APIError as e:
            if e.status < 500 and e.status != 429:
                raise
            self.prefill_failures += 1
            log.warning("upstream %r: prefill pool failed (%s); decoding without a handover",
                        self.name, e.message)
            return request
        params = _params_of(prefill_call.body)
        if not isinstance(params, dict):
            log.warning("upstream %r: prefill replica %s answered without %s; decoding "
                        "without a handover", self.name, prefill_call.endpoint, PARAM)
            return request
        return request.model_copy(update={PARAM: params})


def _params_of(body: bytes | None) -> Any:
    """The `kv_transfer_params` of a prefill answer's bytes (the answer's model keeps no
    extra fields), or None."""
    try:
        return json.loads(body or b"null").get(PARAM)
    except (ValueError, AttributeError):
        return None
