"""`response_format` in, the grammar the answer must follow out.

- `text` (or none): no grammar.
- `json_object`: any one JSON object (JSON mode).
- `json_schema`: `{"name", "schema", "strict"}` as OpenAI takes it; the answer follows the
  schema whatever `strict` says (the engine never answers outside a schema it was given);
  an object that lists `properties` and leaves `additionalProperties` out is closed
  (`engine.grammar.spec.closed`).
  A schema keyword the grammar library cannot enforce is a 400 naming its place,
  `response_format.json_schema.schema.properties.tags.uniqueItems` (raised where the
  grammar is compiled, `LLMEngine.make_sequence`).
"""

from __future__ import annotations

import re
from typing import Any

from engine.grammar import GrammarSpec, json_object_grammar, json_schema_grammar
from openai_api import APIError

SCHEMA_PARAM = "response_format.json_schema.schema"
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for the schema's name


def response_grammar(response_format: dict[str, Any] | None) -> GrammarSpec | None:
    """The grammar for `response_format`; a 400 naming the field for a malformed one."""
    if response_format is None:
        return None
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_object_grammar("response_format")
    if kind != "json_schema":
        raise APIError(400, f"response_format type {kind!r} is not supported; use 'text', "
                       "'json_object' or 'json_schema'", param="response_format.type")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise APIError(400, "response_format.json_schema must be an object with `name` and "
                       "`schema`", param="response_format.json_schema")
    name = spec.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise APIError(400, "response_format.json_schema.name must be 1-64 letters, digits, "
                       "underscores or dashes", param="response_format.json_schema.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise APIError(400, f"{SCHEMA_PARAM} must be a JSON schema object", param=SCHEMA_PARAM)
    return json_schema_grammar(schema, SCHEMA_PARAM)
