"""Adaptive skipping of semantic lookups on a route whose semantic hits stay near zero.

A semantic lookup costs an embedding and, for candidates, the verifier: a few milliseconds
of CPU that a route of one-off questions (chat) pays on every request for nothing, and that
on a small machine the bundled engine feels. Each route keeps a window of its recent
lookups; once `window` lookups in a row served fewer than `min_rate` of them, only one
request in `probe_every` is looked up (a probe), and the first probe that hits turns lookups
back on for every request. While skipping, only requests that were looked up (the probes,
whose embedding is at hand) are stored in the semantic index: the others would cost an
embedding each for a route that has shown it does not repeat itself.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW = 50
MIN_RATE = 0.02  # under one hit in 50
PROBE_EVERY = 16


@dataclass
class _Route:
    lookups: int = 0  # in the current window
    hits: int = 0
    skipping: bool = False
    since_probe: int = 0


class SkipGate:
    """`should_look(route)` before a semantic lookup; `record(route, hit)` after it."""

    def __init__(self, window: int = WINDOW, min_rate: float = MIN_RATE,
                 probe_every: int = PROBE_EVERY) -> None:
        self.window, self.min_rate, self.probe_every = window, min_rate, probe_every
        self._routes: dict[str, _Route] = {}

    def should_look(self, route: str) -> bool:
        state = self._routes.setdefault(route, _Route())
        if not state.skipping:
            return True
        state.since_probe += 1
        if state.since_probe >= self.probe_every:
            state.since_probe = 0
            return True
        return False

    def record(self, route: str, hit: bool) -> None:
        state = self._routes.setdefault(route, _Route())
        if state.skipping:
            if hit:  # a probe hit: look up every request again
                self._routes[route] = _Route()
            return
        state.lookups += 1
        state.hits += hit
        if state.lookups >= self.window:
            state.skipping = state.hits < self.min_rate * state.lookups
            state.lookups = state.hits = 0

    def skipping(self, route: str) -> bool:
        state = self._routes.get(route)
        return bool(state and state.skipping)
