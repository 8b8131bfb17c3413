"""OpenAI requests in, engine inputs out (the answers: `engine/serving/answers.py`).

Pure functions with no web framework, so the engine's own server and the gateway's
in-process upstream turn requests into engine inputs the same way. Every
problem with a request becomes an `APIError(400, ..., param=...)` before the engine
sees it. A request for `n` choices (or a batch of prompts) runs as one engine request per
choice (`engine.serving.choices`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from engine.grammar import GrammarCompiler, GrammarError, json_schema_grammar
from engine.sampling_params import SamplingParams
from engine.serving.checks import check_content_parts, check_fields, logit_bias
from engine.serving.response_format import response_grammar
from engine.serving.tool_choice import ToolChoice, read_tool_choice
from engine.serving.tool_formats import ToolFormat, calls_grammar, tool_format
from engine.serving.tool_prompt import template_messages
from engine.serving.tool_stream import ToolCallStream
from openai_api import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
)

if TYPE_CHECKING:
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
    send a batch) and `n`, the choices per prompt, each one engine request (`engine.serving.choices`)."""

    prompts: list[EnginePrompt]
    n: int = 1
    # with tools offered: a parser per choice that turns the text of calls into tool calls
    tool_stream: Callable[[], ToolCallStream] | None = None

    def requests(self) -> list[tuple[list[int], SamplingParams]]:
        return [(p.ids, p.params) for p in self.prompts]

    def echoes(self) -> list[str]:
        """The echoed prompt of each choice, by index ("" without `echo`)."""
        return [p.echo_text for p in self.prompts for _ in range(self.n)]


# ---------------------------------------------------------------- requests


def chat_prompt(request: ChatCompletionRequest, tokenizer: Tokenizer,
                choice: ToolChoice | None = None, fmt: ToolFormat | None = None) -> str:
    """The prompt text: the checkpoint's chat template over the messages, with the tools
    in the model's own format or the generic one (engine/serving/tool_prompt.py)."""
    choice = choice if choice is not None else read_tool_choice(request)
    fmt = fmt or tool_format(tokenizer.chat_template)
    messages = template_messages(fmt, request.messages, choice)
    tools = request.tools if choice is not None and fmt.native else None
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    except Exception as exc:  # a template may reject a role order, e.g. two system messages
        raise APIError(400, f"the chat template rejected the messages: {exc}",
                       param="messages") from exc


def sampling_params(request: ChatCompletionRequest | CompletionRequest, prompt_len: int,
                    max_model_len: int, vocab_size: int | None = None) -> SamplingParams:
    """SamplingParams from the request's fields; `max_tokens` defaults to the context left.
    A field the engine would not honour is a 400 (engine/serving/checks.py)."""
    check_fields(request)
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
        temperature=request.effective_temperature(),
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        seed=request.seed,
        stop=request.stop_list(),
        stop_token_ids=_int_list(extra.get("stop_token_ids"), "stop_token_ids"),
        ignore_eos=bool(extra.get("ignore_eos", False)),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        logprobs=request.logprobs_count(),
        logit_bias=logit_bias(request.logit_bias, vocab_size or 0) if request.logit_bias else {},
    )
    try:
        params.validate()
    except ValueError as exc:
        raise APIError(400, str(exc), param=getattr(exc, "param", None)) from exc
    return params


def chat_input(request: ChatCompletionRequest, tokenizer: Tokenizer, max_model_len: int,
               grammars: GrammarCompiler | None = None) -> EngineInput:
    """Engine input for a chat request; the prompt must leave room for one new token. The
    answer's grammar: forced tool calls, else `response_format`; with `grammars`, each
    forced function's `parameters` schema is compiled first, so one it cannot enforce is a
    400 naming its place in `tools`."""
    if request.top_logprobs is not None and not request.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    check_content_parts(request.messages)
    choice = read_tool_choice(request)
    fmt = tool_format(tokenizer.chat_template)
    grammar = response_grammar(request.response_format)
    if choice is not None and choice.forced:
        if grammars is not None:
            _check_parameters(choice, grammars)
        grammar = calls_grammar(fmt, choice)
    ids = tokenizer.encode(chat_prompt(request, tokenizer, choice, fmt),
                           add_special_tokens=False)
    _check_prompt_len(len(ids), max_model_len, "messages")
    prompt = EnginePrompt(ids, sampling_params(request, len(ids), max_model_len,
                                               tokenizer.vocab_size))
    prompt.params.grammar = grammar
    stream = partial(ToolCallStream, fmt, choice) if choice is not None else None
    return EngineInput([prompt], request.n, tool_stream=stream)


def _check_parameters(choice: ToolChoice, grammars: GrammarCompiler) -> None:
    """A 400 for a forced function whose `parameters` the grammar library cannot enforce."""
    for i, function in enumerate(choice.functions):
        if function not in choice.callable:
            continue
        param = f"tools[{i}].function.parameters"
        try:
            grammars.matcher(json_schema_grammar(function.parameters, param))
        except GrammarError as exc:
            raise APIError(400, f"{param}{exc.path}: {exc.message}",
                           param=param + exc.path) from None


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
    return EnginePrompt(ids, sampling_params(request, len(ids), max_model_len,
                                             tokenizer.vocab_size), echo)


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
