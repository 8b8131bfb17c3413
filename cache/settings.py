"""A route's cache settings as plain data (the gateway maps its YAML policy onto this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class CacheSettings:
    """What the caches do for one route; `cache/` never sees the gateway's pydantic config."""

    route: str
    exact_enabled: bool = False
    exact_ttl_s: float = 3600.0
    semantic_enabled: bool = False
    threshold: float = 0.78  # cosine a reworded question needs (guard on) or any hit (guard off)
    semantic_ttl_s: float = 86400.0
    max_temperature: float = 0.3
    context: Literal["full", "system", "none"] = "full"
    allow_tools: bool = False
    guard: bool = True
    adaptive: bool = True  # raise an entry's bar when a close neighbour has another answer
    verifier: bool = False  # let the learned verifier pass rewordings a little under the
    # bar when their unmatched words are said by the other side in context (cache/verifier.py;
    # off: on the held-out split it served 3 reworded traps of 94)

    @property
    def enabled(self) -> bool:
        return self.exact_enabled or self.semantic_enabled
