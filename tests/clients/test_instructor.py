"""Instructor 1.17 against the gateway: its default TOOLS mode (a named `tool_choice`)
and JSON_SCHEMA mode (`response_format: json_schema`)."""

from __future__ import annotations

import instructor
import openai
import pytest

from tests.clients.conftest import MODEL
from tests.clients.models import Person


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA])
def test_response_model_comes_back_validated(gateway_url, mode):
    client = instructor.from_openai(openai.OpenAI(base_url=gateway_url, api_key="unused",
                                                  max_retries=0), mode=mode)
    person, completion = client.chat.completions.create_with_completion(
        model=MODEL, response_model=Person, max_retries=0, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": "Invent a person."}])
    assert isinstance(person, Person)
    expected = "tool_calls" if mode is instructor.Mode.TOOLS else "stop"
    assert completion.choices[0].finish_reason == expected
