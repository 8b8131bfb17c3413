"""Shared fixtures for the cache tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cache.response_cache import ResponseCache


@pytest.fixture
async def cache() -> AsyncIterator[ResponseCache]:
    """An in-memory response cache (exact + semantic), closed after the test."""
    c = await ResponseCache.open()
    yield c
    await c.close()
