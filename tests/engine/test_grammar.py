"""engine/grammar/: compiling grammars once, refusing what cannot be enforced, and masking
the logits of constrained rows only. The real SmolLM2 tokenizer; no model."""

from __future__ import annotations

import json

import pytest
import torch

from engine.grammar import (
    GrammarCompiler,
    GrammarError,
    GrammarSpec,
    apply_grammar_masks,
    json_object_grammar,
    json_schema_grammar,
)
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

PERSON = {"type": "object", "properties": {"name": {"type": "string"}},
          "required": ["name"], "additionalProperties": False}


@pytest.fixture(scope="module")
def compiler(smollm_tokenizer) -> GrammarCompiler:
    return GrammarCompiler(smollm_tokenizer, capacity=2)


def constrained(compiler: GrammarCompiler, spec: GrammarSpec | None, rid: str) -> Sequence:
    seq = Sequence(rid, [1], SamplingParams(temperature=0, grammar=spec))
    seq.grammar = compiler.matcher(spec) if spec is not None else None
    return seq


def allowed(logits_row: torch.Tensor) -> set[int]:
    return set(torch.nonzero(logits_row > float("-inf")).flatten().tolist())


def test_a_repeated_grammar_is_compiled_once_and_the_least_recent_leaves_first(compiler):
    before = compiler.compiles
    a, b, c = (json_schema_grammar({"type": "integer", "maximum": m}, "p") for m in (1, 2, 3))
    compiler.matcher(a)
    compiler.matcher(a)
    compiler.matcher(b)
    assert compiler.compiles - before == 2
    compiler.matcher(c)  # capacity 2: `a` is dropped
    compiler.matcher(b)
    assert compiler.compiles - before == 3
    compiler.matcher(a)
    assert compiler.compiles - before == 4 and len(compiler) == 2


def test_each_request_gets_its_own_matcher(compiler, smollm_tokenizer):
    first, second = (compiler.matcher(json_object_grammar()) for _ in range(2))
    for token in smollm_tokenizer.encode('{"a": 1}'):
        assert first.consume(token)
    assert first.finished and not second.finished


def test_key_order_is_part_of_the_grammar():
    forward = json_schema_grammar({"properties": {"a": {}, "b": {}}}, "p")
    backward = json_schema_grammar({"properties": {"b": {}, "a": {}}}, "p")
    assert forward.key != backward.key
    assert forward == json_schema_grammar({"properties": {"a": {}, "b": {}}}, "other")


def test_every_object_with_properties_that_leaves_additional_properties_out_is_closed():
    schema = {"type": "object", "properties": {
        "who": {"type": "object", "properties": {"name": {"type": "string"}}},
        "tags": {"type": "array", "items": {"properties": {"k": {}}}},
        "any": {"type": "object"},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}}},
        "$defs": {"Pet": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}
    strict = json.loads(json_schema_grammar(schema, "p").source)
    assert strict["additionalProperties"] is False
    assert strict["properties"]["who"]["additionalProperties"] is False
    assert strict["properties"]["tags"]["items"]["additionalProperties"] is False
    assert strict["properties"]["extra"]["additionalProperties"] == {"type": "integer"}
    assert strict["properties"]["any"] == {"type": "object"}  # any object, as JSON mode's
    assert strict["$defs"]["Pet"] == schema["$defs"]["Pet"]
    assert json.loads(json_object_grammar().source) == {"type": "object"}


@pytest.mark.parametrize(("schema", "path", "words"), [
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
     ".properties.tags.uniqueItems", "uniqueItems"),
    ({"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]}, ".anyOf[1].not", "not"),
    ({"type": "string", "format": "bogus"}, ".format", "bogus"),
    ({"type": "object", "properties": {"p": {"type": "string", "pattern": "(?<=a)b"}}},
     ".properties.p.pattern", "look-around"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "", "Unsatisfiable"),
])
def test_what_cannot_be_enforced_is_refused_with_its_place(compiler, schema, path, words):
    with pytest.raises(GrammarError) as info:
        compiler.matcher(json_schema_grammar(schema, "response_format.json_schema.schema"))
    assert info.value.path == path and words in info.value.message


def test_only_constrained_rows_are_masked(compiler, smollm_tokenizer):
    seqs = [constrained(compiler, json_schema_grammar(PERSON, "p"), "a"),
            constrained(compiler, None, "b")]
    logits = torch.zeros(2, smollm_tokenizer.vocab_size + 64)  # a padded LM head
    masked = apply_grammar_masks(logits, [s.grammar for s in seqs])
    # the schema forces `{"name": "`; the library allows its own tokens for forced text
    picks = allowed(masked[0])
    assert picks and all('{"name": "'.startswith(smollm_tokenizer.decode([t])) for t in picks)
    assert torch.equal(masked[1], logits[1]) and torch.equal(logits, torch.zeros_like(logits))


def test_a_finished_grammar_allows_only_the_end_of_text(compiler, smollm_tokenizer):
    seq = constrained(compiler, json_object_grammar(), "a")
    for token in smollm_tokenizer.encode("{}"):
        seq.grammar.consume(token)
    masked = apply_grammar_masks(torch.zeros(1, smollm_tokenizer.vocab_size), [seq.grammar])
    assert allowed(masked[0]) == set(smollm_tokenizer.eos_token_ids)


def test_a_matcher_in_error_allows_only_the_end_of_text(compiler, smollm_tokenizer):
    seq = constrained(compiler, json_object_grammar(), "a")
    assert not seq.grammar.consume(smollm_tokenizer.encode("hello")[0])
    masked = apply_grammar_masks(torch.zeros(1, smollm_tokenizer.vocab_size), [seq.grammar])
    assert allowed(masked[0]) == set(smollm_tokenizer.eos_token_ids)


def test_a_lark_grammar_is_compiled_too(compiler, smollm_tokenizer):
    matcher = compiler.matcher(GrammarSpec("lark", 'start: "yes" | "no"\n', "tools"))
    for token in smollm_tokenizer.encode("no"):
        assert matcher.consume(token)
    assert matcher.finished
