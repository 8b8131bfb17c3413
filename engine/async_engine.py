"""The asyncio front of the engine: one background step loop, one async stream per request.

`generate` validates on the caller's thread (bad input fails before anything is queued),
hands the sequence to the step thread through an inbox, and yields the deltas the thread
delivers with `loop.call_soon_threadsafe`. Leaving the loop early (break, cancellation,
client gone) aborts the request and frees its KV blocks. A failing step fails only the
requests in it; the loop keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.llm_engine import LLMEngine, LoadedModel
from engine.outputs import EngineStats, GenerationDelta
from engine.priority import ahead_of, check_priority
from engine.sampling_params import SamplingParams
from engine.sequence import HandedPrompt, Sequence
from engine.step_executor import StepJob, StepThreadExecutor
from engine.wait_estimate import StepMeter, expected_wait_s

log = logging.getLogger(__name__)


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationDelta]


class AsyncEngine:
    """Serves many concurrent `generate` calls from one LLMEngine on one thread."""

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        self._streams: dict[str, _Stream] = {}
        # new sequences, request ids to abort, or other torch work to run between steps
        self._inbox: deque[Sequence | str | StepJob] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: runs a call on the step thread between steps (see engine/step_executor.py)
        self.executor = StepThreadExecutor(self._post, self._ensure_thread)
        self.meter = StepMeter()  # measured step costs, for `expected_wait_s`
        # made on the step thread, so that the model's load and every step run on one
        # OpenMP team: once a second thread has run a parallel region, libgomp counts more
        # threads than cores and barely spins between regions, and a two-thread decode step
        # took 16-17 ms instead of 6 (OMP_NUM_THREADS=2, 2 cores)
        self.engine: LLMEngine = self.executor.submit(self._build, config, loaded).result()
        self.tokenizer = self.engine.tokenizer
        self.model_name = self.engine.model_name
        self.max_model_len = self.engine.max_model_len

    async def generate(self, prompt: str | list[int], params: SamplingParams, *,
                       request_id: str | None = None,
                       session_id: str | None = None,
                       cache_salt: str | None = None,
                       priority: int = 0, handed: HandedPrompt | None = None,
                       keeps_tail: bool = False) -> AsyncIterator[GenerationDelta]:
        """Stream the deltas of one request; raises InvalidRequest before queueing bad input.
        `cache_salt` (vLLM's field) keys the request's KV blocks: only requests with the same
        salt share cached prefixes. `priority` (vLLM's: lower first) orders requests under
        the priority scheduling policy; under fcfs only 0 is accepted. `handed` and
        `keeps_tail` are the request's part in a prefill/decode handover
        (`Sequence.handed`, `Sequence.keeps_tail`)."""
        if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
            raise InvalidRequest("cache_salt must be a non-empty string", "cache_salt")
        priority = check_priority(priority, self.engine.config.scheduling_policy)
        seq = self.engine.make_sequence(prompt, params, request_id, session_id)
        seq.cache_salt = cache_salt
        seq.priority = priority
        seq.handed, seq.keeps_tail = handed, keeps_tail
        if seq.request_id in self._streams:
            raise InvalidRequest(f"request id {seq.request_id!r} is already running", "request_id")
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        self._streams[seq.request_id] = stream
        self._ensure_thread()
        self._post(seq)
        finished = False
        try:
            while not finished:
                delta = await stream.queue.get()
                finished = delta.finish_reason is not None
                yield delta
        finally:
            self._streams.pop(seq.request_id, None)
            if not finished:
                self._post(seq.request_id)

    @property
    def on_cpu(self) -> bool:
        """True when the model runs on the CPU, where other torch work should share the step
        thread (`executor`) rather than compete with it for cores."""
        return self.engine.runner.device.type == "cpu"

    def abort(self, request_id: str) -> None:
        self._post(request_id)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def expected_wait_s(self, priority: int = 0) -> float:
        """Seconds a request of `priority` arriving now would wait before its prompt is read
        (engine/wait_estimate.py), behind every request queued, running or just posted;
        under the priority policy only behind those of its class or a better one."""
        scheduler = self.engine.scheduler
        running = list(scheduler.running)
        waiting = list(scheduler.waiting)
        waiting += [item for item in list(self._inbox) if isinstance(item, Sequence)]
        if scheduler.policy.by_priority:
            running, waiting = ahead_of(priority, running, waiting)
        return expected_wait_s(running, waiting, scheduler.max_num_seqs, self.meter.costs)

    async def warm_up(self) -> None:
        """Read one short prompt and write a few tokens, so the step costs behind
        `expected_wait_s` are measured before the first burst (which then also skips the
        engine's first-step costs)."""
        room = self.max_model_len // 2
        ids = self.tokenizer.encode("The warm-up reads a prompt and writes a few tokens. "
                                    * 12)[:min(128, room)]
        params = SamplingParams(max_tokens=min(8, room), temperature=0, ignore_eos=True)
        async for _ in self.generate(ids, params, request_id="warm-up"):
            pass

    async def shutdown(self) -> None:
        """Stop the step loop (requests still running are aborted)."""
        self._stopping = True
        self.executor.shutdown()
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    # ------------------------------------------------------------ step thread

    def _post(self, item: Sequence | str | StepJob) -> None:
        self._inbox.append(item)
        if isinstance(item, Sequence):  # made by `generate`, so the engine exists
            self.engine.note_arrival(item.priority)  # may cut a step of worse classes short
        self._wake.set()

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="engine-step-loop",
                                                daemon=True)
                self._thread.start()

    def _build(self, config: EngineConfig, loaded: LoadedModel | None) -> LLMEngine:
        """The engine, made on the step thread (the first job `__init__` posts)."""
        try:
            self.engine = LLMEngine(config, loaded)
        except BaseException:
            self._stopping = True  # the loop ends: there is nothing to step
            raise
        return self.engine

    def _run(self) -> None:
        while not hasattr(self, "engine"):  # the first job builds it (`_build`)
            self._wake.wait()
            self._wake.clear()
            self._drain_inbox()
            if self._stopping:
                return
        # llguidance's vocabulary is built on a thread of its own when the engine is made and
        # holds the GIL for ~0.4 s: no step runs (or is measured) beside it
        self.engine.grammars.vocabulary.exception()
        while not self._stopping:
            self._drain_inbox()
            if not self.engine.has_unfinished():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                scheduler = self.engine.scheduler
                self.meter.before([*scheduler.running, *scheduler.waiting])
                started = time.perf_counter()
                deltas = self.engine.step()
                if not self.engine.step_interrupted:  # a cut step says nothing of its cost
                    self.meter.after(time.perf_counter() - started)
            except Exception as exc:  # a bug outside the model call: fail everyone in flight
                log.exception("engine step loop error")
                deltas = self._fail_all(f"{type(exc).__name__}: {exc}")
            for delta in deltas:
                self._deliver(delta)
        for delta in self._fail_all("the engine is shutting down"):
            self._deliver(delta)
        while self._inbox:  # work posted too late to run
            item = self._inbox.popleft()
            if isinstance(item, StepJob):
                item.future.cancel()

    def _drain_inbox(self) -> None:
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, StepJob):
                item.run()
            elif isinstance(item, str):
                self.engine.abort(item)
            elif item.request_id not in self._streams:
                continue  # its consumer left before the request reached the engine
            else:
                try:
                    for delta in self.engine.add_sequence(item):
                        self._deliver(delta)
                except ValueError as exc:
                    self._deliver(self._error_delta(item, str(exc)))

    def _deliver(self, delta: GenerationDelta) -> None:
        stream = self._streams.get(delta.request_id)
        if stream is None:
            return
        try:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, delta)
        except RuntimeError:  # the consumer's event loop is closed
            self.engine.abort(delta.request_id)

    def _fail_all(self, error: str) -> list[GenerationDelta]:
        deltas = []
        for seq in list(self.engine.sequences.values()):
            self.engine.abort(seq.request_id)
            deltas.append(self._error_delta(seq, error))
        return deltas

    @staticmethod
    def _error_delta(seq: Sequence, error: str) -> GenerationDelta:
        return GenerationDelta(seq.request_id, "", [], "abort", seq.num_prompt_tokens,
                               seq.num_cached_tokens, seq.num_output_tokens, error=error)
