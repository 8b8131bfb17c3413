"""Schemas for structured-output checks: nested objects, arrays, enums, required keys,
number ranges and string patterns, each with the question a client would ask with it.
Shared by tests/engine/test_structured_outputs.py and bench/engine/structured_bench.py."""

from __future__ import annotations

from typing import Any

NAME = {"type": "string", "maxLength": 24}
CLOSED = {"additionalProperties": False}


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, **CLOSED}


SCHEMA_SUITE: list[tuple[str, str, dict[str, Any]]] = [
    ("person", "Invent a person.", obj({"name": NAME, "age": {"type": "integer"}})),
    ("age_range", "How old is a typical student?",
     obj({"age": {"type": "integer", "minimum": 5, "maximum": 30}})),
    ("price", "Price of a coffee in euros?",
     obj({"price": {"type": "number", "minimum": 0.5, "maximum": 10}})),
    ("colour_enum", "Name the colour of the sky.",
     obj({"colour": {"enum": ["red", "green", "blue", "grey"]}})),
    ("sentiment", "Sentiment of: 'I love this phone!'",
     obj({"label": {"enum": ["positive", "negative", "neutral"]},
          "confidence": {"type": "number", "minimum": 0, "maximum": 1}})),
    ("boolean", "Is Paris in France?", obj({"answer": {"type": "boolean"}})),
    ("const", "Say which API version this is.", obj({"version": {"const": "v1"}, "ok": {"type": "boolean"}})),
    ("zip_pattern", "Give a US zip code.",
     obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}})),
    ("date_pattern", "When did the Berlin wall fall?",
     obj({"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}})),
    ("code_pattern", "Make up a product code.",
     obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}})),
    ("tags_array", "Three tags for a blog post about cooking.",
     obj({"tags": {"type": "array", "items": {"type": "string", "maxLength": 16},
                   "minItems": 1, "maxItems": 3}})),
    ("numbers_array", "List a few prime numbers.",
     obj({"primes": {"type": "array", "items": {"type": "integer", "minimum": 2,
                                                 "maximum": 100}, "maxItems": 4}})),
    ("nested_address", "Where does Sherlock Holmes live?",
     obj({"name": NAME, "address": obj({"street": NAME, "city": NAME})})),
    ("nested_two_levels", "Describe a small company.",
     obj({"company": obj({"name": NAME, "ceo": obj({"name": NAME})})})),
    ("array_of_objects", "List two planets and their order from the sun.",
     obj({"planets": {"type": "array", "maxItems": 2,
                      "items": obj({"name": NAME, "order": {"type": "integer", "minimum": 1,
                                                            "maximum": 8}})}})),
    ("optional_keys", "Describe a cat.",
     obj({"name": NAME, "lives": {"type": "integer", "maximum": 9}}, required=["name"])),
    ("nullable", "Who is the king of France today?",
     obj({"king": {"anyOf": [NAME, {"type": "null"}]}})),
    ("one_of_types", "How many legs does a spider have?",
     obj({"legs": {"anyOf": [{"type": "integer", "maximum": 100}, NAME]}})),
    ("defs_ref", "Give a point on a map.",
     {"$defs": {"coord": {"type": "number", "minimum": -180, "maximum": 180}},
      **obj({"lat": {"$ref": "#/$defs/coord"}, "lon": {"$ref": "#/$defs/coord"}})}),
    ("weather", "Weather in Rome today?",
     obj({"city": NAME, "celsius": {"type": "integer", "minimum": -50, "maximum": 60},
          "sky": {"enum": ["sunny", "cloudy", "rain", "snow"]}})),
    ("exclusive_range", "Pick a probability.",
     obj({"p": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}})),
    ("string_lengths", "A one-word greeting.",
     obj({"word": {"type": "string", "minLength": 2, "maxLength": 8}})),
    ("matrix", "A 2x2 identity matrix.",
     obj({"rows": {"type": "array", "maxItems": 2,
                   "items": {"type": "array", "maxItems": 2, "items": {"type": "integer",
                                                                       "maximum": 9}}}})),
    ("json_mode_like", "Describe a book.", {"type": "object", "maxProperties": 3}),
]
