from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.support.processes import ServerProcess, free_port


@pytest.fixture(scope="module")
def canned() -> Iterator[ServerProcess]:
    """`bench/experiments/canned_upstream.py` on a free port, answering after 1 ms."""
    port = free_port()
    server = ServerProcess([sys.executable, "-m", "bench.experiments.canned_upstream", "--port", str(port),
                            "--delay-ms", "1"], port, timeout_s=60).start()
    yield server
    server.stop()
