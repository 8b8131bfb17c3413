"""OpenAI requests in, engine inputs out; engine deltas in, OpenAI objects out.

Pure functions with no web framework, so the engine's own server and the gateway's
in-process upstream turn requests and answers into each other the same way. Every
problem with a request becomes an `APIError(400, ..., param=...)` before the engine
sees it. Answers are built from `(choice index, delta)` pairs (`engine.choices`): a
request for `n` choices runs as `n` engine requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.choices import IndexedDelta
from engine.logprobs import chat_logprobs, completion_logprobs
from engine.protocol import (
    APIError,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    DeltaMessage,
    Usage,
    new_id,
    now,
)
from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from engine.outputs import GenerationDelta, TokenLogprobs
    from engine.tokenizer import Tokenizer


@dataclass
class EnginePrompt:
    """One prompt for `AsyncEngine.generate`, with its sampling parameters."""

    ids: list[int]
    params: SamplingParams
    echo_text: str = ""  # legacy completions with `echo`: the prompt, sent before the answer


@dataclass
class EngineInput:
    """What the engine needs for one OpenAI request: its prompt (a legacy completion may
    send a batch) and `n`, the choices per prompt, each one engine request (`engine.choices`)."""

    prompts: list[EnginePrompt]
    n: int = 1

    def requests(self) -> list[tuple[list[int], SamplingParams]]:
        return [(p.ids, p.params) for p in self.prompts]

    def echoes(self) -> list[str]:
        """The echoed prompt of each choice, by index ("" without `echo`)."""
        return [p.echo_text for p in self.prompts for _ in range(self.n)]


# ---------------------------------------------------------------- requests


def message_dict(message: ChatMessage) -> dict[str, Any]:
    """A chat message as chat templates expect it (plain text content, `developer` as system)."""
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": message.text()}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def chat_prompt(request: ChatCompletionRequest, tokenizer: Tokenizer) -> str:
    """The prompt text: the checkpoint's chat template over the messages (and tools)."""
    messages = [message_dict(m) for m in request.messages]
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tools=request.tools or None)
    except Exception as exc:  # a template may reject a role order, e.g. two system messages
        raise APIError(400, f"the chat template rejected the messages: {exc}",
                       param="messages") from exc


def sampling_params(request: ChatCompletionRequest | CompletionRequest, prompt_len: int,
                    max_model_len: int) -> SamplingParams:
    """SamplingParams from the request's fields; `max_tokens` defaults to the context left."""
    room = max_model_len - prompt_len
    asked = request.effective_max_tokens()
    if asked is not None and asked > room:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + asked} tokens ({prompt_len} in the prompt, {asked} in "
            "the completion). Please reduce the prompt or the completion length.",
            param="max_tokens", code="context_length_exceeded")
    extra = request.model_extra or {}
    params = SamplingParams(
        max_tokens=asked if asked is not None else room,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        seed=request.seed,
        stop=request.stop_list(),
        stop_token_ids=_int_list(extra.get("stop_token_ids"), "stop_token_ids"),
        ignore_eos=bool(extra.get("ignore_eos", False)),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        logprobs=request.logprobs_count(),
    )
    try:
        params.validate()
    except ValueError as exc:
        raise APIError(400, str(exc), param=getattr(exc, "param", None)) from exc
    return params


def chat_input(request: ChatCompletionRequest, tokenizer: Tokenizer,
               max_model_len: int) -> EngineInput:
    """Engine input for a chat request; the prompt must leave room for one new token."""
    if request.top_logprobs is not None and not request.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    json_object = _json_mode(request.response_format)
    ids = tokenizer.encode(chat_prompt(request, tokenizer), add_special_tokens=False)
    _check_prompt_len(len(ids), max_model_len, "messages")
    prompt = EnginePrompt(ids, sampling_params(request, len(ids), max_model_len))
    prompt.params.json_object = json_object
    return EngineInput([prompt], request.n)


def _json_mode(response_format: dict[str, Any] | None) -> bool:
    """Whether the answer must be a JSON object; a 400 for formats the engine cannot keep."""
    kind = (response_format or {}).get("type", "text")
    if kind in ("text", "json_object"):
        return kind == "json_object"
    raise APIError(400, f"response_format type {kind!r} is not supported; use 'json_object' "
                   "or 'text'", param="response_format.type")


def completion_input(request: CompletionRequest, tokenizer: Tokenizer,
                     max_model_len: int) -> EngineInput:
    """Engine input for a legacy completion (prompt text or token ids, or a batch of either)."""
    if request.suffix:
        raise APIError(400, "suffix is not supported", param="suffix")
    if request.echo and request.logprobs is not None:
        raise APIError(400, "logprobs of an echoed prompt are not supported", param="logprobs")
    prompts = request.prompts()
    return EngineInput([_completion_prompt(request, prompt, tokenizer, max_model_len,
                                           "prompt" if len(prompts) == 1 else f"prompt[{i}]")
                        for i, prompt in enumerate(prompts)], request.n)


def _completion_prompt(request: CompletionRequest, prompt: str | list[int],
                       tokenizer: Tokenizer, max_model_len: int, param: str) -> EnginePrompt:
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt, add_special_tokens=True)
    else:
        ids = list(prompt)
        if any(not 0 <= i < tokenizer.vocab_size for i in ids):
            raise APIError(400, f"token ids must be in [0, {tokenizer.vocab_size})", param=param)
    if not ids:
        raise APIError(400, "prompt must not be empty", param=param)
    _check_prompt_len(len(ids), max_model_len, param)
    echo = ""
    if request.echo:
        echo = prompt if isinstance(prompt, str) else tokenizer.decode(ids)
    return EnginePrompt(ids, sampling_params(request, len(ids), max_model_len), echo)


def _check_prompt_len(n: int, max_model_len: int, param: str) -> None:
    if n >= max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {n} tokens, which leaves no room for the completion.",
            param=param, code="context_length_exceeded")


def _int_list(value: Any, param: str) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise APIError(400, f"{param} must be a list of integers", param=param)
    return list(value)


# ---------------------------------------------------------------- answers


def aborted(delta: GenerationDelta | None) -> APIError:
    """The error for a request the engine failed (a step error, or shutdown)."""
    reason = (delta.error if delta is not None else None) or "no finish reason"
    return APIError(500, f"the engine aborted the request: {reason}", code="engine_aborted")


def usage_of(lasts: dict[int, GenerationDelta], n: int) -> Usage:
    """Usage from each choice's latest delta (their counters are cumulative): each prompt
    counted once, as the client sent it once (by its first choice of `n`), and the
    completions of all choices."""
    firsts = [delta for index, delta in lasts.items() if index % n == 0]
    return Usage.of(sum(d.prompt_tokens for d in firsts),
                    sum(d.completion_tokens for d in lasts.values()),
                    sum(d.cached_tokens for d in firsts))


async def stream_chat(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                      include_usage: bool = False,
                      completion_id: str | None = None) -> AsyncIterator[ChatCompletionChunk]:
    """chat.completion.chunk objects, one choice each: per choice the role first, then text,
    then the finish reason; with `include_usage`, a last chunk with no choices and the usage
    (as OpenAI does). An engine failure mid-stream raises `aborted(...)`."""
    cid, created = completion_id or new_id("chatcmpl"), now()

    def chunk(index: int, delta: DeltaMessage, finish: str | None = None,
              logprobs: list[TokenLogprobs] | None = None) -> ChatCompletionChunk:
        choice = ChunkChoice(index=index, delta=delta, finish_reason=finish,
                             logprobs=chat_logprobs(logprobs) if logprobs else None)
        return ChatCompletionChunk(id=cid, created=created, model=model, choices=[choice])

    lasts: dict[int, GenerationDelta] = {}
    pending: dict[int, list[TokenLogprobs]] = {}  # tokens whose text is held back so far
    async for index, delta in deltas:
        if delta.finish_reason == "abort":
            raise aborted(delta)
        if index not in lasts:
            yield chunk(index, DeltaMessage(role="assistant", content=""))
        lasts[index] = delta
        if delta.logprobs:
            pending.setdefault(index, []).extend(delta.logprobs)
        if delta.text or delta.finish_reason:
            yield chunk(index, DeltaMessage(content=delta.text or None), delta.finish_reason,
                        pending.pop(index, None))
    if include_usage and lasts:
        yield ChatCompletionChunk(id=cid, created=created, model=model, choices=[],
                                  usage=usage_of(lasts, n))


async def collect_chat(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                       completion_id: str | None = None) -> ChatCompletion:
    """One non-streamed chat.completion from the whole stream of deltas."""
    texts, lasts, logprobs = await _collect(deltas)
    choices = [ChatChoice(index=i, message=AssistantMessage(content=texts[i]),
                          finish_reason=lasts[i].finish_reason,
                          logprobs=chat_logprobs(logprobs[i]) if i in logprobs else None)
               for i in sorted(lasts)]
    return ChatCompletion(id=completion_id or new_id("chatcmpl"), model=model, choices=choices,
                          usage=usage_of(lasts, n))


async def stream_completion(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                            include_usage: bool = False, echoes: Sequence[str] = (),
                            completion_id: str | None = None) -> AsyncIterator[Completion]:
    """text_completion chunks, one choice each (a choice's echoed prompt first: `echoes`
    by index); usage last when asked."""
    cid, created = completion_id or new_id("cmpl"), now()

    def chunk(index: int, text: str, finish: str | None = None,
              logprobs: CompletionLogprobs | None = None) -> Completion:
        choice = CompletionChoice(index=index, text=text, finish_reason=finish,
                                  logprobs=logprobs)
        return Completion(id=cid, created=created, model=model, choices=[choice])

    lasts: dict[int, GenerationDelta] = {}
    pending: dict[int, list[TokenLogprobs]] = {}  # tokens whose text is held back so far
    offsets: dict[int, int] = {}  # where each choice's next token starts in its text
    async for index, delta in deltas:
        if delta.finish_reason == "abort":
            raise aborted(delta)
        text = delta.text if index in lasts or not echoes else echoes[index] + delta.text
        if index not in lasts:
            offsets[index] = len(echoes[index]) if echoes else 0
        lasts[index] = delta
        if delta.logprobs:
            pending.setdefault(index, []).extend(delta.logprobs)
        if text or delta.finish_reason:
            tokens = pending.pop(index, None)
            logprobs = None
            if tokens:
                logprobs = completion_logprobs(tokens, offsets[index])
                offsets[index] += sum(len(t.token) for t in tokens)
            yield chunk(index, text, delta.finish_reason, logprobs)
    if include_usage and lasts:
        yield Completion(id=cid, created=created, model=model, choices=[],
                         usage=usage_of(lasts, n))


async def collect_completion(deltas: AsyncIterator[IndexedDelta], *, model: str, n: int,
                             echoes: Sequence[str] = (),
                             completion_id: str | None = None) -> Completion:
    """One non-streamed text_completion from the whole stream of deltas."""
    texts, lasts, logprobs = await _collect(deltas)
    choices = []
    for i in sorted(lasts):
        echo = echoes[i] if echoes else ""
        choices.append(CompletionChoice(
            index=i, text=echo + texts[i], finish_reason=lasts[i].finish_reason,
            logprobs=completion_logprobs(logprobs[i], len(echo)) if i in logprobs else None))
    return Completion(id=completion_id or new_id("cmpl"), model=model, choices=choices,
                      usage=usage_of(lasts, n))


async def _collect(deltas: AsyncIterator[IndexedDelta]) -> tuple[
        dict[int, str], dict[int, GenerationDelta], dict[int, list[TokenLogprobs]]]:
    """Each choice's whole text, last delta and token logprobs (for choices that have them);
    every choice must have finished."""
    parts: dict[int, list[str]] = {}
    lasts: dict[int, GenerationDelta] = {}
    logprobs: dict[int, list[TokenLogprobs]] = {}
    async for index, delta in deltas:
        parts.setdefault(index, []).append(delta.text)
        lasts[index] = delta
        if delta.logprobs:
            logprobs.setdefault(index, []).extend(delta.logprobs)
    for last in lasts.values():
        if last.finish_reason in (None, "abort"):
            raise aborted(last)
    if not lasts:
        raise aborted(None)
    return {i: "".join(p) for i, p in parts.items()}, lasts, logprobs
