"""pydantic-ai against the gateway: an agent whose `output_type` is a pydantic model (it
asks with `tool_choice: required` and reads the call's arguments)."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.clients.conftest import MODEL
from tests.clients.models import Person


def test_output_type_comes_back_as_the_model(gateway_url):
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=gateway_url,
                                                           api_key="unused"))
    agent = Agent(model, output_type=Person, retries=0)
    result = agent.run_sync("Invent a person.",
                            model_settings={"temperature": 0, "max_tokens": 80})
    assert isinstance(result.output, Person)
