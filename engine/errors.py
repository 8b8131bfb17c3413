"""Errors the engine raises for bad input, so front ends can map them to HTTP 400s."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """A request the engine refuses before queueing it; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class StepInterrupted(Exception):
    """A step of worse classes stopped between two layers for a better class that arrived
    (`LLMEngine.note_arrival`): nothing it computed counts, the next step plans again."""


class ModelLoadError(RuntimeError):
    """A checkpoint the engine cannot read (missing file, unsupported architecture)."""
