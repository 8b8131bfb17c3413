"""What a request asks its output to follow, as data the engine can key a cache on.

`source` is the grammar in one canonical text: a JSON schema as compact JSON with its key
order kept (llguidance writes an object's properties in the schema's order, so two schemas
that differ only in order are two grammars), or a Lark grammar (llguidance's dialect, which
can embed JSON schemas with `%json`). `param` names the request field a refusal points at;
it is not part of the grammar's identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

GrammarKind = Literal["json_schema", "lark"]


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    source: str
    param: str = field(default="response_format", compare=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.source


def canonical_schema(schema: Any) -> str:
    """Compact JSON, key order kept (see the module docstring)."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def json_schema_grammar(schema: dict[str, Any] | bool, param: str) -> GrammarSpec:
    """The grammar of `closed(schema)`."""
    return GrammarSpec("json_schema", canonical_schema(closed(schema)), param)


# keywords whose values are subschemas, one or a list or a map of them
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions", "patternProperties")


def closed(schema: Any) -> Any:
    """`schema` with every object that lists `properties` and leaves `additionalProperties`
    out closed (false): the answer holds the properties listed and no others, as OpenAI's
    strict mode reads a schema and as vLLM's default grammar backend (xgrammar's strict
    mode) generates. JSON Schema's own default allows any more keys, and a small model,
    once the listed ones are written, may go on inventing keys until `max_tokens`
    (pydantic's schemas, as Instructor's JSON_SCHEMA mode sends them, leave it out). An
    object with no `properties` (JSON mode's `{"type": "object"}`) stays any object."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE:
        if key in out:
            out[key] = closed(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(s) for name, s in out[key].items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def json_object_grammar(param: str = "response_format") -> GrammarSpec:
    """JSON mode: any one JSON object."""
    return json_schema_grammar({"type": "object"}, param)
