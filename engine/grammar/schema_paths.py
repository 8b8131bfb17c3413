"""Where in a JSON schema the keyword llguidance refused sits, so a 400 can name it:
`response_format.json_schema.schema.properties.tags.uniqueItems` rather than the whole
schema. llguidance says what it refused in words (`Unimplemented keys: ["uniqueItems"]`,
`Unknown format: bogus`, a regex it cannot read); this finds the first place that fits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: (\[.*?\])")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")


def _nodes(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in the schema with its path, parents before children."""
    if isinstance(value, dict):
        yield path, value
        for key, child in value.items():
            yield from _nodes(child, f"{path}.{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _nodes(child, f"{path}[{i}]")


def refused_keyword(message: str) -> list[str]:
    """The keywords an llguidance error names as not implemented (empty for other errors)."""
    found = _UNIMPLEMENTED.search(message)
    if not found:
        return []
    try:
        names = json.loads(found.group(1))
    except ValueError:
        return []
    return [n for n in names if isinstance(n, str)]


def keyword_path(schema: Any, message: str) -> str:
    """The path (from the schema's root, starting with `.`) of what `message` refuses; ""
    when it names nothing that can be found."""
    names = refused_keyword(message)
    fmt = _UNKNOWN_FORMAT.search(message)
    for path, node in _nodes(schema):
        for name in names:
            if name in node:
                return f"{path}.{name}"
        if fmt and node.get("format") == fmt.group(1):
            return f"{path}.format"
        pattern = node.get("pattern")
        if "regex" in message and isinstance(pattern, str) and pattern in message:
            return f"{path}.pattern"
    return ""
