"""The synchronous engine: requests in, one `step()` at a time, deltas out.

Ties the scheduler (who runs), the model runner (compute + sample), the detokenizer and
the stop checker (what text to show, when to stop) together. Not thread-safe: the
AsyncEngine drives it from a single background thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import torch

from engine import logprobs
from engine.block_manager import KVCacheManager
from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.errors import InvalidRequest, StepInterrupted
from engine.grammar import GrammarCompiler, GrammarError
from engine.kv_tier_store import SlotStore, open_tier
from engine.model import NO_ARRIVAL, LlamaModel, StepCut
from engine.model_config import ModelConfig
from engine.model_runner import ModelRunner
from engine.outputs import EngineStats, GenerationDelta, RequestOutput
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.stop_checker import StopChecker
from engine.tokenizer import Tokenizer
from engine.weights import load_model

log = logging.getLogger(__name__)

LoadedModel = tuple[LlamaModel, Tokenizer, ModelConfig]


class LLMEngine:
    """add_request / step / abort / has_unfinished, plus `generate` for tests and scripts."""

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        self.config = config
        model, self.tokenizer, self.model_config = loaded or load_model(
            config.model, config.dtype, config.device)
        self.model_name = config.model_name
        self.runner = ModelRunner(model, self.model_config, config)
        self.tier = open_tier(config, self.runner.kv_cache)  # None without kv_offload_mb
        self.kv = KVCacheManager(self.runner.num_blocks, config.block_size,
                                 config.enable_prefix_caching, config.session_idle_s,
                                 tier=self.tier)
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.scheduling_policy)
        # One sequence must always fit in the pool on its own, or it could never finish.
        self.max_model_len = min(config.max_model_len or self.model_config.max_position_embeddings,
                                 self.runner.num_blocks * config.block_size)
        self.eos_token_ids = list(self.tokenizer.eos_token_ids)
        self.grammars = GrammarCompiler(self.tokenizer)
        self.sequences: dict[str, Sequence] = {}
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.num_steps = 0
        self.num_interrupted_steps = 0
        self.step_interrupted = False  # the last step stopped for a better class
        # the best priority posted since the step began (`StepCut`; read by the kernels)
        self.arrival = torch.full((1,), NO_ARRIVAL, dtype=torch.int32)
        # a prefill engine's copy of a finished prompt's last partial block, for the decode
        # engine it hands the prompt to (engine/kv_handover.py `TailStore.keep`)
        self.keep_tail: Callable[[Sequence], None] | None = None

    # ------------------------------------------------------------ requests

    def make_sequence(self, prompt: str | list[int], params: SamplingParams,
                      request_id: str | None = None, session_id: str | None = None) -> Sequence:
        """Validate and tokenize a request without touching engine state (safe from any thread)."""
        params.validate()
        if isinstance(prompt, str):
            token_ids = self.tokenizer.encode(prompt)
        else:
            token_ids = list(prompt)
            vocab = self.model_config.vocab_size
            if any(not isinstance(t, int) or not 0 <= t < vocab for t in token_ids):
                raise InvalidRequest(f"prompt token ids must be in [0, {vocab})", "prompt")
        if not token_ids:
            raise InvalidRequest("the prompt is empty", "prompt")
        if len(token_ids) > self.max_model_len - 1:
            raise InvalidRequest(
                f"the prompt has {len(token_ids)} tokens; this model's context is "
                f"{self.max_model_len} tokens and at least one must be left to generate",
                "prompt")
        seq = Sequence(request_id or uuid.uuid4().hex, token_ids, params, session_id)
        seq.detokenizer = IncrementalDetokenizer(self.tokenizer)
        seq.stop_checker = StopChecker(params, self.eos_token_ids, self.max_model_len)
        if params.grammar is not None:
            try:
                seq.grammar = self.grammars.matcher(params.grammar)
            except GrammarError as exc:
                raise InvalidRequest(f"{params.grammar.param}{exc.path}: {exc.message}",
                                     params.grammar.param + exc.path) from None
        return seq

    def add_sequence(self, seq: Sequence) -> list[GenerationDelta]:
        """Queue `seq`. A prompt another engine read (`seq.handed`) comes with the token it
        sampled first: that token's delta is returned at once (and may end the request)."""
        if seq.request_id in self.sequences:
            raise InvalidRequest(f"request id {seq.request_id!r} is already running", "request_id")
        self.sequences[seq.request_id] = seq
        self.scheduler.add(seq)
        if seq.handed is None:
            return []
        seq.num_cached_tokens = self._handed_cached_tokens(seq)
        return [self._append(seq, seq.handed.first_token)]

    def _handed_cached_tokens(self, seq: Sequence) -> int:
        """The prompt tokens a handed `seq` will not compute, as the pool holds them now
        (its first delta reports them; admission counts again)."""
        bs = self.kv.block_size
        full = len(self.kv.find_cached_prefix(seq)) * bs
        if full < seq.num_prompt_tokens - seq.num_prompt_tokens % bs:
            return full
        return seq.num_prompt_tokens if seq.handed.tail is not None else full

    def add_request(self, prompt: str | list[int], params: SamplingParams,
                    request_id: str | None = None, session_id: str | None = None) -> str:
        seq = self.make_sequence(prompt, params, request_id, session_id)
        self.add_sequence(seq)
        return seq.request_id

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; its blocks go back to the pool (cached ones stay)."""
        self.sequences.pop(request_id, None)
        return self.scheduler.abort(request_id) is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------ stepping

    def note_arrival(self, priority: int) -> None:
        """A request of `priority` is on its way in (any thread): under the priority
        policy, a step carrying work of a worse class (and none of a better one) stops at
        its next layer, so that the request gets the next step instead of waiting out this
        one (`_interruption`)."""
        if priority < int(self.arrival[0]):
            self.arrival[0] = priority

    def _interruption(self, out: SchedulerOutput) -> StepCut | None:
        """What a step holding work of a class below the default checks between layers
        (`StepCut`, also in the one-call decode kernel): whether a request has arrived since
        the step began that ranks above some of its work and below none of it, and above
        every class whose prompt it reads (its own class's decodes in the step are computed
        again in the next; a prompt of its own class is not thrown away for it: the two
        would then share one longer step). None for any other step, which runs uncut."""
        if not self.scheduler.policy.by_priority:
            return None
        classes = [item.seq.priority for item in out.scheduled]
        worst, best = max(classes), min(classes)
        if worst <= 0:
            return None
        reading = min((item.seq.priority for item in out.scheduled if item.num_new_tokens > 1),
                      default=worst)
        return StepCut(self.arrival, min(worst, best + 1, reading))

    def step(self) -> list[GenerationDelta]:
        """Schedule, run the model once, and return a delta per sequence that got a token."""
        self.arrival[0], self.step_interrupted = NO_ARRIVAL, False
        out = self.scheduler.schedule()
        if self.tier is not None:
            self.tier.flush()  # blocks evicted to the tier, or loaded back, before the run
        for block_id, tail in out.tail_loads:  # handed prompts' last partial blocks
            SlotStore(self.runner.kv_cache, tail).load([0], [block_id])
        if out.is_empty:
            return []
        self.num_steps += 1
        try:
            tokens = self.runner.run(out.scheduled, self._interruption(out))
        except StepInterrupted:  # nothing computed counts; the next step plans again
            self.num_interrupted_steps += 1
            self.step_interrupted = True
            return []
        except Exception as exc:  # fail this step's requests, keep the engine serving
            log.exception("engine step failed")
            return [self._fail(item.seq, f"{type(exc).__name__}: {exc}") for item in out.scheduled]
        self.scheduler.update(out)
        sampling = [item.seq for item in out.scheduled if item.samples]
        return [self._append(seq, token) for seq, token in zip(sampling, tokens, strict=True)]

    def _append(self, seq: Sequence, token: int) -> GenerationDelta:
        seq.append_token(token)
        if seq.grammar is not None:
            seq.grammar.consume(token)
        first = seq.num_output_tokens == 1
        if first:
            self.prompt_tokens_total += seq.num_prompt_tokens
            self.cached_tokens_total += seq.num_cached_tokens
        checker: StopChecker = seq.stop_checker
        reason = None
        scored = seq.sampled_logprobs
        if checker.is_stop_token(token):
            text, reason = checker.flush(), "stop"
            scored = None  # not part of the answer, so not of its logprobs (as OpenAI)
        else:
            text, hit_stop = checker.feed_text(seq.detokenizer.add(token))
            if hit_stop:
                reason = "stop"
            elif seq.grammar is not None and seq.grammar.finished:
                text, reason = text + checker.flush(), "stop"  # nothing else may follow
            elif checker.length_reached(seq.num_output_tokens, seq.num_tokens):
                text, reason = text + checker.flush(), "length"
        if reason is not None:
            self._finish(seq, reason)
        delta = self._delta(seq, text, [token], reason, first)
        if scored is not None:
            delta.logprobs = [logprobs.render(self.tokenizer, token, *scored)]
        return delta

    def _fail(self, seq: Sequence, error: str) -> GenerationDelta:
        self._finish(seq, "abort")
        seq.error = error
        delta = self._delta(seq, "", [], "abort", first=seq.num_output_tokens == 0)
        delta.error = error
        return delta

    def _finish(self, seq: Sequence, reason: str) -> None:
        if seq.keeps_tail and self.keep_tail is not None and reason != "abort":
            self.keep_tail(seq)  # before its blocks go back to the pool
        self.scheduler.finish(seq, reason)
        self.sequences.pop(seq.request_id, None)

    def _delta(self, seq: Sequence, text: str, token_ids: list[int], reason: str | None,
               first: bool) -> GenerationDelta:
        return GenerationDelta(
            request_id=seq.request_id, text=text, token_ids=token_ids, finish_reason=reason,
            prompt_tokens=seq.num_prompt_tokens, cached_tokens=seq.num_cached_tokens,
            completion_tokens=seq.num_output_tokens,
            queue_time_s=seq.queue_time_s() if first else None,
            ttft_s=seq.ttft_s() if first else None)

    # ------------------------------------------------------------ conveniences

    def generate(self, prompts: list[str | list[int]],
                 params: SamplingParams | list[SamplingParams]) -> list[RequestOutput]:
        """Run prompts to completion together (continuous batching), in input order."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, params_list, strict=True)]
        results = {i: RequestOutput(i, "", [], None, 0, 0) for i in ids}
        while self.has_unfinished():
            for delta in self.step():
                result = results[delta.request_id]
                result.text += delta.text
                result.token_ids += delta.token_ids
                result.finish_reason = delta.finish_reason
                result.prompt_tokens = delta.prompt_tokens
                result.cached_tokens = delta.cached_tokens
        return [results[i] for i in ids]

    def stats(self) -> EngineStats:
        kv = self.kv.stats()
        return EngineStats(
            num_running=len(self.scheduler.running), num_waiting=len(self.scheduler.waiting),
            kv_blocks_total=kv.total, kv_blocks_used=kv.used, kv_blocks_cached=kv.cached,
            prompt_tokens_total=self.prompt_tokens_total,
            cached_tokens_total=self.cached_tokens_total,
            num_preemptions=self.scheduler.num_preemptions,
            num_priority_preemptions=self.scheduler.num_priority_preemptions,
            num_interrupted_steps=self.num_interrupted_steps,
            num_steps=self.num_steps, tier=None if self.tier is None else self.tier.stats())
