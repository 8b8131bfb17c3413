"""`headstart engine` as an engine of bench/engine/engine_bench.py (`headstart-server`): the
server users run, started here as a subprocess on a free loopback port with the same GGUF
and the same threads, and measured as a client sees it: streamed `/v1/completions` over
HTTP, the prompt sent as token ids (so every engine reads the same tokens), the first
token's arrival on the wire.

Beside the in-process `headstart` figures, the difference is the server path's own cost:
HTTP, the asyncio loop, the engine's step thread, detokenising and the SSE frames.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.engine.llama_server_bench import free_port, stop_process
from bench.engine.timing import decode_rate

MODEL_NAME = "bench"


class HeadstartServerBench:
    """`headstart engine` with its defaults, `OMP_NUM_THREADS` = this process's threads."""

    name = "headstart-server"

    def __init__(self, model_path: str, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "gateway.cli", "engine", "--model", model_path,
                "--served-model-name", MODEL_NAME, "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning"]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
        self.log = tempfile.NamedTemporaryFile(prefix="headstart-engine-", suffix=".log",  # noqa: SIM115
                                               delete=False)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=Path(__file__).resolve().parents[2])
        self.client = httpx.Client(base_url=self.url, timeout=600)
        self.config = {"command": "headstart engine (defaults)", "threads": threads,
                       "api": "POST /v1/completions, stream, prompt as token ids"}
        self._wait_ready()

    def _wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"headstart engine exited with {self.proc.returncode}: "
                                   + Path(self.log.name).read_text(errors="replace")[-2000:])
            try:
                if self.client.get("/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.close()
        raise RuntimeError("headstart engine did not become ready")

    def close(self) -> None:
        self.client.close()
        stop_process(self.proc)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)

    def _complete(self, prompt: list[int], tokens: int, client: httpx.Client | None = None
                  ) -> tuple[float, list[float]]:
        """Stream one completion: (when it was sent, the arrival time of each token)."""
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": tokens,
                "temperature": 0.0, "ignore_eos": True, "stream": True}
        stamps: list[float] = []
        start = time.perf_counter()
        with (client or self.client).stream("POST", "/v1/completions", json=body) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                if any(c.get("text") for c in event.get("choices", [])):
                    stamps.append(time.perf_counter())
        return start, stamps

    def ttft(self, prompt: list[int]) -> float:
        start, stamps = self._complete(prompt, 1)
        return stamps[0] - start

    def cached_ttft(self, prefix: list[int], warm: list[int], new: list[int]) -> float:
        self._complete(prefix + warm, 1)
        return self.ttft(prefix + new)

    def decode(self, prompts: list[list[int]], tokens: int) -> float:
        """Every prompt at once, each on its own connection: aggregate tok/s."""
        stamps: list[list[float]] = [[] for _ in prompts]

        def run(i: int) -> None:
            with httpx.Client(base_url=self.url, timeout=600) as client:
                stamps[i] = self._complete(prompts[i], tokens, client)[1]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return decode_rate([s for s in stamps if s])
