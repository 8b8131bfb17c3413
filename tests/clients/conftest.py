"""The client libraries apps are built on, against a real gateway (its embedded default:
the bundled engine in-process, SmolLM2), over HTTP on loopback.

These libraries need openai 3.x, which the project's litellm pin refuses, so the tests run
in a venv of their own (`.venv-clients`, `make test-clients`, part of `make test`) and start
the gateway with the project's interpreter (`HEADSTART_PYTHON`, default `.venv/bin/python`).
Under the project's venv, where the libraries are absent, nothing here is collected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import agents  # noqa: F401
    import instructor  # noqa: F401
    import langchain_openai  # noqa: F401
    import pydantic_ai  # noqa: F401
except ImportError:
    collect_ignore_glob = ["test_*.py"]

from tests.support.processes import REPO, ServerProcess, free_port  # noqa: E402

MODEL = "smollm2-135m-instruct"
PYTHON = os.environ.get("HEADSTART_PYTHON", str(REPO / ".venv" / "bin" / "python"))


@pytest.fixture(scope="session")
def gateway_url() -> Iterator[str]:
    """`headstart serve` with no config (the embedded default), its /v1 base URL."""
    if not Path(PYTHON).exists():
        pytest.fail(f"no project interpreter at {PYTHON} (run `make install`)")
    port = free_port()
    server = ServerProcess([PYTHON, "-m", "gateway.cli", "serve", "--port", str(port)], port,
                           env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    server.start()
    yield f"{server.base_url}/v1"
    server.stop()
