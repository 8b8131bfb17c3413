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
    return GrammarSpec("json_schema", canonical_schema(schema), param)


def json_object_grammar(param: str = "response_format") -> GrammarSpec:
    """JSON mode: any one JSON object."""
    return json_schema_grammar({"type": "object"}, param)
