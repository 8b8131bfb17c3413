"""The OpenAI Agents SDK 0.24 against the gateway, on its chat-completions model
(`OpenAIChatCompletionsModel`): a function tool called, its result read, a final answer."""

from __future__ import annotations

import openai
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallItem, ToolCallOutputItem

from tests.clients.conftest import MODEL
from tests.clients.models import WEATHER_REPORT, get_weather


def test_a_function_tool_is_called_and_its_result_answered(gateway_url):
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=openai.AsyncOpenAI(
        base_url=gateway_url, api_key="unused", max_retries=0))
    agent = Agent(name="weather", instructions="Answer questions about the weather.",
                  tools=[function_tool(get_weather)], model=model,
                  model_settings=ModelSettings(temperature=0, max_tokens=80,
                                               tool_choice="required"))
    result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
    calls = [item for item in result.new_items if isinstance(item, ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert calls and calls[0].raw_item.name == "get_weather"
    assert outputs and outputs[0].output == WEATHER_REPORT
    assert isinstance(result.final_output, str) and result.final_output
