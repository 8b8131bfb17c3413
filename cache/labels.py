"""The labelled-pairs log: every judgement, appended as one line in `eval-cache`'s format.

    {"id": "judged-support-3f9c...", "category": "judged:agreement:yes", "a": "<cached question>",
     "b": "<new question>", "same_answer": true, "route": "support", "score": 0.8312,
     "reason": "agreed", "at": 1764633600.0}

`a` is the entry's question (its answer was cached), `b` the question judged against it,
`same_answer` the judge's verdict (also the category's last part, so `eval-cache`'s table
per category keeps yes and no apart): `headstart eval-cache --pairs LOG` reports the
verifier on a deployment's own traffic, and `python -m training.train --judged LOG` adds
the pairs to the verifier's training (training/judged.py). The extra fields say where each
line came from.
A pair judged twice is written twice (one id): the judge may have changed its mind.
Writes go to a worker thread, off the event loop; a log that cannot be written is logged
once and the judgement still stands.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from pathlib import Path

from cache.judgement import Judgement

log = logging.getLogger("headstart.cache")


def label(route: str, cached: str, new: str, judgement: Judgement, score: float) -> dict:
    """One line of the log."""
    digest = hashlib.sha1(f"{route}\x1f{cached}\x1f{new}".encode()).hexdigest()[:16]
    verdict = "yes" if judgement.same else "no"
    return {"id": f"judged-{route}-{digest}", "category": f"judged:{judgement.judge}:{verdict}",
            "a": cached, "b": new, "same_answer": judgement.same, "route": route,
            "score": round(score, 4), "reason": judgement.reason, "at": round(time.time(), 3)}


class LabelLog:
    """Appends lines to JSONL files, one per path, creating folders as needed."""

    def __init__(self) -> None:
        self._failed: set[str] = set()

    async def append(self, path: str, line: dict) -> None:
        await asyncio.to_thread(self._write, path, json.dumps(line, ensure_ascii=False))

    def _write(self, path: str, text: str) -> None:
        try:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            if path not in self._failed:
                self._failed.add(path)
                log.warning("cache: cannot write the labelled-pairs log %s (%s)", path, e)
