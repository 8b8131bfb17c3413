"""Structured outputs end to end on the real model: every answer that ends with `stop` is
valid under its schema (checked with `jsonschema`), constrained requests batched with an
unconstrained one. Greedy and short, so the whole suite runs as one batch."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.grammar import json_object_grammar, json_schema_grammar
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.schema_suite import SCHEMA_SUITE

MAX_TOKENS = 48
PARAM = "response_format.json_schema.schema"


@pytest.fixture(scope="module")
def engine(smollm_bf16) -> LLMEngine:
    return LLMEngine(EngineConfig(num_kv_blocks=1024, max_num_seqs=32,
                                  max_num_batched_tokens=2048), loaded=tuple(smollm_bf16))


def chat(engine: LLMEngine, question: str) -> str:
    return engine.tokenizer.apply_chat_template([{"role": "user", "content": question}])


def test_every_finished_answer_of_the_suite_follows_its_schema(engine):
    assert len(SCHEMA_SUITE) >= 20
    prompts = [chat(engine, question) for _, question, _ in SCHEMA_SUITE]
    params = [SamplingParams(max_tokens=MAX_TOKENS, temperature=0,
                             grammar=json_schema_grammar(schema, PARAM))
              for _, _, schema in SCHEMA_SUITE]
    prompts.append(chat(engine, "Say hi."))  # an unconstrained neighbour in the batch
    params.append(SamplingParams(max_tokens=8, temperature=0))
    outputs = engine.generate(prompts, params)
    finished = 0
    for (name, _, schema), out in zip(SCHEMA_SUITE, outputs, strict=False):
        if out.finish_reason == "stop":
            finished += 1
            jsonschema.validate(json.loads(out.text), schema)  # raises, naming the case
        else:
            assert out.finish_reason == "length", name
    assert finished >= len(SCHEMA_SUITE) * 3 // 4
    assert not outputs[-1].text.startswith("{")


def test_a_sampled_answer_follows_its_schema_too(engine):
    _, question, schema = next(case for case in SCHEMA_SUITE if case[0] == "weather")
    outputs = engine.generate([chat(engine, question)] * 3, [
        SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=seed,
                       grammar=json_schema_grammar(schema, PARAM)) for seed in (1, 2, 3)])
    for out in outputs:
        assert out.finish_reason == "stop"
        jsonschema.validate(json.loads(out.text), schema)


def test_a_schema_left_open_gets_the_listed_properties_only(engine):
    """pydantic's schema of a model, as Instructor's JSON_SCHEMA mode sends it (no
    `additionalProperties`, no `strict`): greedily the model writes the two properties and
    then, left open, invents more until `max_tokens` (2026-12-02)."""
    schema = {"description": "A person.", "properties": {
        "name": {"maxLength": 20, "title": "Name", "type": "string"},
        "age": {"maximum": 120, "minimum": 0, "title": "Age", "type": "integer"}},
        "required": ["name", "age"], "title": "Person", "type": "object"}
    (out,) = engine.generate([chat(engine, "Invent a person.")], SamplingParams(
        max_tokens=80, temperature=0, grammar=json_schema_grammar(schema, PARAM)))
    assert out.finish_reason == "stop" and set(json.loads(out.text)) == {"name", "age"}


def test_json_mode_answers_one_object_and_stops_when_it_closes(engine):
    question = "Give me a JSON object describing a cat with name and age."
    (out,) = engine.generate([chat(engine, question)], SamplingParams(
        max_tokens=120, temperature=0, grammar=json_object_grammar()))
    assert isinstance(json.loads(out.text), dict)
    assert out.finish_reason == "stop" and out.text.endswith("}")


def test_a_keyword_that_cannot_be_enforced_is_refused_before_queueing(engine):
    schema = {"type": "object", "properties": {"ids": {"type": "array",
                                                       "uniqueItems": True}}}
    with pytest.raises(InvalidRequest) as info:
        engine.make_sequence("x", SamplingParams(grammar=json_schema_grammar(schema, PARAM)))
    assert info.value.param == f"{PARAM}.properties.ids.uniqueItems"
    assert "uniqueItems" in info.value.message and not engine.has_unfinished()
