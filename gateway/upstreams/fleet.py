"""An OpenAI-compatible upstream with several endpoints: a fleet of engine replicas.

Each request goes to the replica the picker chooses (`gateway/fleet/picker.py`): where its
prefix or session already is, unless that replica is loaded. Each replica is an
`OpenAICompatUpstream` with its own keep-alive pool, so requests are asked and answered
exactly as for a single `base_url`. A replica that refuses the connection, times out or
answers 5xx/429 before its first chunk is left for the next best one; a connection refused
also ejects it until a probe passes (`gateway/fleet/monitor.py`). A stream that breaks
after its first chunk cannot move (the client has its start): it ends with an error naming
the replica. `call.endpoint` (the `x-headstart-endpoint` header) names the replica that
answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine import load_tokenizer
from gateway.config import UpstreamConfig
from gateway.fleet.block_locator import BlockLocator
from gateway.fleet.endpoints import Endpoint, EndpointSpec
from gateway.fleet.health import ReplicaLoad
from gateway.fleet.kv_subscriber import EventTranslator, KVEventSubscriber
from gateway.fleet.load import LoadTracker, Ticket
from gateway.fleet.metrics import EndpointGauges, EndpointMetrics
from gateway.fleet.monitor import FleetMonitor
from gateway.fleet.picker import EndpointPicker, Pick, PickerSettings
from gateway.fleet.prompt_tokens import PromptTokens
from gateway.upstreams.base import Upstream
from gateway.upstreams.call import UpstreamCall
from gateway.upstreams.openai_compat import OpenAICompatUpstream
from openai_api import (
    APIError,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
)

log = logging.getLogger("headstart.gateway")
T = TypeVar("T")
Request = ChatCompletionRequest | CompletionRequest
_REASONS = {"upstream_unavailable": "connect", "upstream_timeout": "timeout"}


@dataclass
class Attempt:
    """One try of a request on one replica."""

    pick: Pick
    ticket: Ticket
    t0: float = field(default_factory=time.perf_counter)
    error: APIError | None = None  # why it failed before its first chunk


class FleetUpstream(Upstream):
    """`metrics`: series shared with another pool of the same upstream (a prefill pool's,
    gateway/upstreams/disaggregated.py); default: its own."""

    def __init__(self, config: UpstreamConfig, metrics: EndpointMetrics | None = None) -> None:
        super().__init__(config)
        self.specs = [EndpointSpec(e, config.kv_events) if isinstance(e, str)
                      else EndpointSpec(e.url, e.kv_events or config.kv_events)
                      for e in config.endpoints]
        self.picker = EndpointPicker(config.balance, PickerSettings(block_size=config.block_size),
                                     BlockLocator())
        self.tracker = LoadTracker()
        self.replicas: dict[str, OpenAICompatUpstream] = {}
        self.monitor = FleetMonitor(config.name, self.specs, self,
                                    health_interval_s=config.health_interval_s,
                                    dns_interval_s=config.dns_interval_s)
        self.subscriber = KVEventSubscriber(EventTranslator(self.picker.locator, config.block_size),
                                            on_event=self._kv_event)
        self.prompts: PromptTokens | None = None
        self.metrics = metrics or EndpointMetrics(self.name, self.gauges)
        self._scraped: dict[str, ReplicaLoad] = {}
        self._template = OpenAICompatUpstream(config.model_copy(update={
            "base_url": "http://fleet.invalid/v1", "endpoints": []}))

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self.config.balance == "prefix":
            tokenizer = await asyncio.to_thread(load_tokenizer, self.config.tokenizer)
            self.prompts = PromptTokens(tokenizer, self.config.block_size)
        await self.monitor.start()
        if not self.monitor.endpoints:
            log.warning("upstream %r: no endpoint resolved yet", self.name)

    async def aclose(self) -> None:
        await self.monitor.aclose()
        await self.subscriber.aclose()
        for replica in self.replicas.values():
            await replica.aclose()

    def collector(self) -> EndpointMetrics:
        return self.metrics

    # ---------------------------------------------------------------- FleetListener

    def endpoint_added(self, endpoint: Endpoint) -> None:
        self.replicas[endpoint.url] = OpenAICompatUpstream(self.config.model_copy(update={
            "base_url": endpoint.url, "endpoints": []}))
        if endpoint.kv_events:
            self.subscriber.follow(endpoint.url, endpoint.kv_events)

    def endpoint_removed(self, endpoint: Endpoint) -> None:
        self.subscriber.unfollow(endpoint.url)
        self.picker.forget(endpoint.url)
        self.tracker.forget(endpoint.url)
        replica = self.replicas.pop(endpoint.url, None)
        if replica is not None:
            asyncio.get_running_loop().create_task(replica.aclose())

    def endpoint_down(self, url: str) -> None:
        self.picker.forget(url)  # it may come back empty (restarted)
        self.tracker.forget(url)

    def endpoint_up(self, url: str) -> None:
        return None

    def endpoint_load(self, url: str, load: ReplicaLoad) -> None:
        self._scraped[url] = load
        self.tracker.observe(url, load.running, load.waiting, load.kv_usage)
        if load.kv_blocks:  # the pool and the second tier: a block is held in either
            self.picker.locator.set_capacity(url, load.kv_blocks + load.tier_blocks)

    def _kv_event(self, url: str) -> None:
        self.metrics.kv_events.labels(self.name, url).inc()

    def gauges(self) -> dict[str, EndpointGauges]:
        down = self.monitor.down
        return {url: EndpointGauges(
            in_flight=self.tracker.load(url).in_flight, healthy=url not in down,
            queued=self._scraped.get(url, ReplicaLoad()).waiting,
            kv_usage=self._scraped.get(url, ReplicaLoad()).kv_usage,
            blocks=self.picker.locator.held(url)) for url in self.monitor.endpoints}

    # ---------------------------------------------------------------- requests

    def stream_chat(self, request: ChatCompletionRequest,
                    call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream(request, call)

    def stream_completion(self, request: CompletionRequest,
                          call: UpstreamCall) -> AsyncIterator[Completion]:
        return self._stream(request, call)

    def answers_whole(self, request: Request) -> bool:
        return self._template.answers_whole(request)

    async def answer(self, request: Request, call: UpstreamCall) -> ChatCompletion | Completion:
        async for attempt in self._attempts(request, call):
            answer = await self._first(attempt, call, self.replicas[attempt.pick.endpoint].answer(
                request, call), None)
            if answer is not None:
                self._answered(attempt, answer.usage)
                return answer
        raise AssertionError("unreachable: _attempts raises when it runs out")

    async def _stream(self, request: Request, call: UpstreamCall) -> AsyncIterator[Any]:
        timeout = self.config.first_token_timeout_s if self._template.streamed(request) else None
        async for attempt in self._attempts(request, call):
            url = attempt.pick.endpoint
            stream = self.replicas[url].stream(request, call)
            first = await self._first(attempt, call, anext(stream), timeout)
            if first is None:
                await stream.aclose()
                continue
            usage, outcome = first.usage, "aborted"
            try:
                yield first
                async for chunk in stream:
                    usage = chunk.usage or usage
                    yield chunk
                outcome = "ok"
            except APIError as e:
                outcome = "error"
                self.metrics.errors.labels(self.name, url, "stream_cut").inc()
                raise APIError(502, f"upstream '{self.name}': replica {url} stopped mid-answer "
                               f"({e.message})", code="upstream_error") from None
            finally:
                await stream.aclose()
                if outcome == "ok":
                    self._answered(attempt, usage)
                else:
                    self.tracker.finished(attempt.ticket)
                    self.metrics.requests.labels(self.name, url, outcome).inc()
            return

    async def _attempts(self, request: Request, call: UpstreamCall) -> AsyncIterator[Attempt]:
        """The replicas to try in turn, best first; once none is left, raises the last
        failure (or a 503 when no replica is up)."""
        keys, tokens = self.prompts.keys(request, call.cache_salt) if self.prompts is not None else ([], 0)
        tried: set[str] = set()
        error: APIError | None = None
        # every replica looks down: try them anyway (a refusal is quick, a probe may be late)
        pool = [u for u in self.monitor.healthy if u in self.replicas] or sorted(self.replicas)
        while True:
            candidates = [u for u in pool if u not in tried]
            if not candidates:
                raise error or self.error(
                    503, "no healthy endpoint" + (f" ({len(tried)} tried)" if tried else ""),
                    code="upstream_unavailable")
            pick = self.picker.pick(candidates, self.tracker.loads, keys=keys,
                                    prompt_tokens=tokens, session_id=call.session_id)
            tried.add(pick.endpoint)
            self.picker.record(pick, keys, call.session_id)
            self.metrics.picks.labels(self.name, pick.endpoint, pick.reason).inc()
            attempt = Attempt(pick, self.tracker.sent(pick.endpoint, pick.new_tokens))
            yield attempt
            error = attempt.error

    async def _first(self, attempt: Attempt, call: UpstreamCall, first: Awaitable[T],
                     timeout: float | None) -> T | None:
        """The replica's first chunk (or whole answer); None when it failed in a way another
        replica may not (`attempt.error`), after which the next attempt follows."""
        url = attempt.pick.endpoint
        try:
            async with asyncio.timeout(timeout):
                result = await first
        except TimeoutError:
            error = self.error(504, f"replica {url} sent nothing within {timeout:g}s",
                               code="upstream_timeout")
        except StopAsyncIteration:
            error = self.error(502, f"replica {url} returned no answer", code="upstream_error")
        except APIError as e:
            error = e
        except BaseException:
            self.tracker.finished(attempt.ticket)
            self.metrics.requests.labels(self.name, url, "aborted").inc()
            raise
        else:
            self.tracker.first_token(attempt.ticket)
            self.metrics.ttft.labels(self.name, url).observe(time.perf_counter() - attempt.t0)
            call.endpoint = url
            return result
        self.tracker.finished(attempt.ticket)
        if error.status < 500 and error.status != 429:
            self.metrics.requests.labels(self.name, url, "rejected").inc()
            raise error  # the request's own fault: another replica would say the same
        reason = _REASONS.get(error.code or "", "status")
        self.metrics.errors.labels(self.name, url, reason).inc()
        self.metrics.requests.labels(self.name, url, "retried").inc()
        if reason == "connect":
            self.monitor.mark_down(url)
        log.warning("upstream %r: replica %s failed before its first chunk: %s", self.name, url,
                    error.message)
        attempt.error = error
        return None

    def _answered(self, attempt: Attempt, usage: Any) -> None:
        self.tracker.finished(attempt.ticket)
        labels = (self.name, attempt.pick.endpoint)
        self.metrics.requests.labels(*labels, "ok").inc()
        self.metrics.latency.labels(*labels).observe(time.perf_counter() - attempt.t0)
        if usage is not None:
            self.metrics.prompt_tokens.labels(*labels).inc(usage.prompt_tokens)
            self.metrics.cached_tokens.labels(*labels).inc(
                usage.prompt_tokens_details.cached_tokens)
