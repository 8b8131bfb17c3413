"""engine/serving/tool_formats.py and tool_prompt.py: which tool format a template has,
how tools and tool turns reach the prompt, and the grammar that forces calls. The real
SmolLM2 tokenizer (a template without tools: the generic format) and a Hermes-style one."""

from __future__ import annotations

import json

import pytest

from engine.grammar import GrammarCompiler
from engine.serving.inputs import chat_prompt
from engine.serving.tool_choice import Function, ToolChoice
from engine.serving.tool_formats import GENERIC, HERMES, LLAMA3_JSON, calls_grammar, tool_format
from engine.tokenizer import Tokenizer
from openai_api import ChatCompletionRequest

HERMES_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                           "parameters": WEATHER}}]
TURNS = [{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
         {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]


@pytest.fixture(scope="module")
def hermes(smollm_tokenizer) -> Tokenizer:
    return Tokenizer(smollm_tokenizer.backend, HERMES_TEMPLATE, eos_token="<|im_end|>")


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", **fields)


def test_the_format_is_read_off_the_template(smollm_tokenizer):
    assert tool_format(smollm_tokenizer.chat_template) is GENERIC
    assert tool_format(HERMES_TEMPLATE) is HERMES
    assert tool_format("{{ '<|python_tag|>' }}{% if tools %}{% endif %}") is LLAMA3_JSON


def test_the_generic_format_lists_the_tools_in_the_system_prompt(smollm_tokenizer):
    prompt = chat_prompt(chat(messages=TURNS[:1], tools=TOOLS), smollm_tokenizer)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou can call these functions")
    assert json.dumps([TOOLS[0]["function"]]) in system and '{"tool_calls": [' in system


def test_the_generic_format_tells_calls_and_results_in_the_user_turn(smollm_tokenizer):
    prompt = chat_prompt(chat(messages=TURNS, tools=TOOLS), smollm_tokenizer)
    assert prompt.endswith(
        '<|im_start|>user\nWeather in Paris?\n\nYou called get_weather({"city": "Paris"}); '
        "it returned: 21 C\nUsing these results, answer in plain text: Weather in Paris?"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert prompt.count("<|im_start|>assistant") == 1  # the call is not a turn of its own


def test_an_assistant_text_beside_its_calls_keeps_its_turn(smollm_tokenizer):
    turns = [TURNS[0], {**TURNS[1], "content": "Let me look."}, TURNS[2]]
    prompt = chat_prompt(chat(messages=turns), smollm_tokenizer)
    assert prompt.endswith("<|im_start|>assistant\nLet me look.<|im_end|>\n<|im_start|>user\n"
                           'You called get_weather({"city": "Paris"}); it returned: 21 C\n'
                           "Using these results, answer in plain text: Weather in Paris?"
                           "<|im_end|>\n<|im_start|>assistant\n")


def test_tool_choice_none_hides_the_tools(smollm_tokenizer):
    hidden = chat_prompt(chat(messages=TURNS[:1], tools=TOOLS, tool_choice="none"),
                         smollm_tokenizer)
    assert hidden == smollm_tokenizer.apply_chat_template(TURNS[:1])


def test_a_native_template_gets_the_tools_and_arguments_as_objects(hermes):
    prompt = chat_prompt(chat(messages=TURNS, tools=TOOLS), hermes)
    assert prompt.startswith("<tools>" + json.dumps(TOOLS[0]) + "</tools>\n")
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<|im_start|>tool\n21 C<|im_end|>" in prompt


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    (GENERIC, '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Rome"}}]}',
     '{"tool_calls": [{"name": "get_weather", "arguments": {}}]}'),
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
             '</tool_call>', '<tool_call>\n{"name": "add"'),
    (LLAMA3_JSON, '{"name": "get_weather", "parameters": {"city": "Rome"}}',
     '{"name": "get_weather", "arguments"'),
])
def test_the_calls_grammar_takes_a_valid_call_and_nothing_else(smollm_tokenizer, fmt, good,
                                                               bad):
    grammars = GrammarCompiler(smollm_tokenizer)
    choice = ToolChoice([Function("get_weather", "", WEATHER), Function("add", "", {})],
                        "function", named="get_weather")
    spec = calls_grammar(fmt, choice)
    accepting = grammars.matcher(spec)
    assert all(accepting.consume(t) for t in smollm_tokenizer.encode(good))
    assert accepting.matcher.is_accepting()
    refusing = grammars.matcher(spec)
    assert not all(refusing.consume(t) for t in smollm_tokenizer.encode(bad))


def test_one_call_without_parallel_calls_else_one_per_function(smollm_tokenizer):
    functions = [Function("get_weather", "", WEATHER), Function("add", "", {})]

    def most(**options) -> int:
        spec = calls_grammar(GENERIC, ToolChoice(functions, "required", **options))
        return json.loads(spec.source)["properties"]["tool_calls"]["maxItems"]

    assert (most(parallel=False), most()) == (1, 2)
    lark = calls_grammar(HERMES, ToolChoice(functions, "required")).source
    assert lark.startswith('start: call ("\\n" call){0,1}\n')
