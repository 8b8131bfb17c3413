"""openai_api/models.py: what the request models say of themselves."""

from __future__ import annotations

from openai_api import DEFAULT_TEMPERATURE, ChatCompletionRequest, ChatMessage


def test_template_dict_maps_developer_to_system_and_joins_text_parts():
    msg = ChatMessage(role="developer", content=[{"type": "text", "text": "Be "},
                                                 {"type": "text", "text": "brief."}])
    assert msg.template_dict() == {"role": "system", "content": "Be brief."}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = ChatMessage(role="assistant", content=None, tool_calls=[call]).template_dict()
    assert out["tool_calls"] == [call] and out["content"] == ""


def test_a_missing_temperature_is_openais_default():
    hi = [{"role": "user", "content": "hi"}]
    assert ChatCompletionRequest(model="m", messages=hi).effective_temperature() == 1.0
    assert DEFAULT_TEMPERATURE == 1.0
    assert ChatCompletionRequest(model="m", messages=hi,
                                 temperature=0).effective_temperature() == 0.0
