"""Lossless compression: the same content in fewer tokens, no model needed.

Applied first because it costs microseconds: trailing and repeated blanks, runs of spaces
inside lines (leading indentation is kept — it is meaningful in code and YAML), repeated
lines and paragraphs (kept once), and pretty-printed JSON re-emitted compact.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_INNER_SPACES = re.compile(r"(?<=\S)[ \t]{2,}(?=\S)")
_BLANK_RUN = re.compile(r"\n{3,}")
_FENCED_JSON = re.compile(r"```(?:json)?\n(.*?)\n```", re.DOTALL)
_MIN_REPEAT_CHARS = 20  # shorter lines ("}", "---", "") repeat legitimately


@dataclass
class LosslessResult:
    text: str
    json_blocks: int = 0
    repeats_removed: int = 0


def compact_json(text: str) -> tuple[str, int]:
    """Pretty-printed JSON (whole text, fenced blocks, or standalone multi-line blocks) → compact."""
    whole = _compact(text)
    if whole is not None:
        return whole, 1
    count = 0

    def fenced(match: re.Match[str]) -> str:
        nonlocal count
        compact = _compact(match.group(1))
        if compact is None:
            return match.group(0)
        count += 1
        return f"```json\n{compact}\n```"

    text = _FENCED_JSON.sub(fenced, text)
    out, i, lines = [], 0, text.split("\n")
    while i < len(lines):
        line = lines[i]
        end = _json_block_end(lines, i) if line.strip() in ("{", "[") else None
        if end is None:
            out.append(line)
            i += 1
            continue
        out.append(_compact("\n".join(lines[i:end + 1])) or "")
        count += 1
        i = end + 1
    return "\n".join(out), count


def _json_block_end(lines: list[str], start: int) -> int | None:
    """The line closing the JSON block opened at `start` (same indentation), if it parses."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    closer = "}" if lines[start].strip() == "{" else "]"
    for j in range(start + 1, min(len(lines), start + 5000)):
        stripped = lines[j].strip()
        if stripped in (closer, closer + ",") and len(lines[j]) - len(lines[j].lstrip()) == indent:
            block = "\n".join(lines[start:j + 1]).rstrip().rstrip(",")
            return j if _compact(block) is not None else None
    return None


def _compact(text: str) -> str | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[" or "\n" not in stripped:
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def drop_repeats(text: str) -> tuple[str, int]:
    """Keep the first copy of each repeated paragraph and of each consecutive repeated line."""
    removed = 0
    seen: set[str] = set()
    paragraphs = []
    for para in text.split("\n\n"):
        key = para.strip()
        if len(key) >= _MIN_REPEAT_CHARS and key in seen:
            removed += 1
            continue
        seen.add(key)
        lines: list[str] = []
        for line in para.split("\n"):
            if lines and line == lines[-1] and len(line.strip()) >= _MIN_REPEAT_CHARS:
                removed += 1
                continue
            lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs), removed


def squeeze_whitespace(text: str) -> str:
    lines = [_INNER_SPACES.sub(" ", line.rstrip()) for line in text.split("\n")]
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip("\n")


def compress_lossless(text: str) -> LosslessResult:
    """All lossless steps, JSON first (its indentation is what the whitespace step keeps)."""
    text, blocks = compact_json(text)
    text = squeeze_whitespace(text)
    text, repeats = drop_repeats(text)
    return LosslessResult(text, blocks, repeats)
