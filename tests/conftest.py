"""Fixtures shared by every test folder: real processes, never mocks."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.support.processes import RedisProcess  # noqa: E402


@pytest.fixture(scope="session")
def redis_server():
    """One real Redis (or Valkey) server for the session, on a free port."""
    server = RedisProcess().start()
    yield server
    server.close()


@pytest.fixture
def fresh_redis():
    """A Redis server of the test's own, which the test may stop and restart."""
    server = RedisProcess().start()
    yield server
    server.close()
