"""Lossless compression: fewer tokens, the same content."""

from __future__ import annotations

import json

from prompts.lossless import compact_json, compress_lossless, drop_repeats, squeeze_whitespace


def test_pretty_json_becomes_compact_and_equal():
    data = {"user": {"id": 7, "tags": ["a", "b"], "name": "Zoë"}, "items": [1, 2, 3]}
    text, blocks = compact_json(json.dumps(data, indent=2))
    assert blocks == 1 and json.loads(text) == data and "\n" not in text


def test_json_inside_prose_and_fences():
    pretty = json.dumps({"a": [1, 2], "b": {"c": None}}, indent=4)
    doc = f"Config below:\n{pretty}\nand a fenced one:\n```json\n{pretty}\n```\nThe end."
    text, blocks = compact_json(doc)
    assert blocks == 2
    assert text.count('{"a":[1,2],"b":{"c":null}}') == 2
    assert text.startswith("Config below:") and text.endswith("The end.")


def test_invalid_json_is_left_alone():
    doc = "{\n  not: json,\n}\n"
    assert compact_json(doc)[0] == doc


def test_whitespace_keeps_indentation():
    code = "def f(x):\n    if x:   \n        return  x\n\n\n\n\nprint(f(1))"
    out = squeeze_whitespace(code)
    assert out == "def f(x):\n    if x:\n        return x\n\nprint(f(1))"


def test_repeated_paragraphs_and_lines_kept_once():
    para = "This disclaimer paragraph repeats on every page of the export."
    line = "WARNING: deprecated option used in configuration"
    doc = f"{para}\n\nintro\n{line}\n{line}\n{line}\n\n{para}\n\n}}\n\n}}"
    out, removed = drop_repeats(doc)
    assert out.count(para) == 1 and out.count(line) == 1 and removed == 3
    assert out.count("}") == 2  # short lines repeat legitimately


def test_compress_lossless_shrinks_a_messy_document(engine_counter):
    messy = ("Report   header\n\n\n\n" + json.dumps({"rows": list(range(30))}, indent=2)
             + "\n\nSame footer text on every page.\n\nSame footer text on every page.\n")
    result = compress_lossless(messy)
    assert engine_counter.count_text(result.text) < 0.75 * engine_counter.count_text(messy)
    assert "Report header" in result.text and json.dumps({"rows": list(range(30))},
                                                          separators=(",", ":")) in result.text
