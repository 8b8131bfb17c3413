"""llama.cpp's own `llama-server` as an engine of bench/engine/engine_bench.py: the server users
deploy (parallel slots, continuous batching), started here as a subprocess on a free
loopback port with the same GGUF and the same threads, and measured over HTTP.

The binary: `--llama-server PATH`, else `$VIRTUAL_ENV/bin/llama-server` or
`sys.prefix/bin/llama-server` (`make install-bench` builds it there), else the PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench.engine.timing import decode_rate

BINARY = "llama-server"
SLOTS = 8
SLOT_CONTEXT = 4096  # tokens per slot: the 2,048-token prompts and the 2,048-token prefix


def find_binary(explicit: str | None = None) -> str | None:
    """The llama-server to run, or None where there is none."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    folders = [os.environ.get("VIRTUAL_ENV"), sys.prefix]
    for folder in filter(None, folders):
        path = Path(folder) / "bin" / BINARY
        if os.access(path, os.X_OK):
            return str(path)
    return shutil.which(BINARY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


class LlamaServerBench:
    """`llama-server --parallel 8` (continuous batching) over HTTP on loopback."""

    name = "llama-server"

    def __init__(self, model_path: str, binary: str, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [binary, "-m", model_path, "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(threads), "-tb", str(threads), "--parallel", str(SLOTS),
                "-c", str(SLOTS * SLOT_CONTEXT), "--cont-batching", "--no-webui"]
        self.log = open(os.devnull, "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.config = {"binary": binary, "parallel": SLOTS, "threads": threads,
                       "ctx": SLOTS * SLOT_CONTEXT, "cont_batching": True}
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.close()
        raise RuntimeError("llama-server did not become ready")

    def close(self) -> None:
        stop_process(self.proc)
        self.log.close()

    def _complete(self, prompt: list[int], tokens: int, slot: int = -1,
                  cache: bool = False) -> list[float]:
        """Stream one completion; the arrival time of each token."""
        body = {"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "top_k": 1,
                "ignore_eos": True, "cache_prompt": cache, "stream": True, "id_slot": slot}
        req = urllib.request.Request(f"{self.url}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        stamps: list[float] = []
        with urllib.request.urlopen(req, timeout=600) as resp:
            for line in resp:
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if event.get("content") or event.get("tokens"):
                    stamps.append(time.perf_counter())
                if event.get("stop"):
                    break
        return stamps

    def ttft(self, prompt: list[int]) -> float:
        start = time.perf_counter()
        return self._complete(prompt, 1)[0] - start

    def cached_ttft(self, prefix: list[int], warm: list[int], new: list[int]) -> float:
        self._complete(prefix + warm, 1, slot=0, cache=True)
        start = time.perf_counter()
        return self._complete(prefix + new, 1, slot=0, cache=True)[0] - start

    def decode(self, prompts: list[list[int]], tokens: int) -> float:
        """Every prompt at once, each on its own connection (its own slot): aggregate tok/s."""
        stamps: list[list[float]] = [[] for _ in prompts]

        def run(i: int) -> None:
            stamps[i] = self._complete(prompts[i], tokens)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return decode_rate(stamps)
