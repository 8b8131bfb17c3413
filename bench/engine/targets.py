"""The in-process engines of bench/engine/engine_bench.py: Headstart's LLMEngine and Hugging Face
transformers (its default attention, SDPA, and eager as an extra), on the same GGUF."""

from __future__ import annotations

import copy
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bench.engine.timing import decode_rate


class HeadstartBench:
    """The in-process LLMEngine with its defaults (bf16 where supported, prefix caching on,
    the CPU path its loader picks)."""

    name = "headstart"

    def __init__(self, model_path: str) -> None:
        from engine.config import EngineConfig
        from engine.llm_engine import LLMEngine

        self.engine = LLMEngine(EngineConfig(model=model_path))
        self.config = asdict(self.engine.config)
        self.config["cpu_path"] = self.engine.runner.model.cpu_path

    def _run(self, prompts: list[list[int]], max_tokens: int) -> tuple[float, list[list[float]]]:
        from engine.sampling_params import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        ids = [self.engine.add_request(p, params) for p in prompts]
        stamps: dict[str, list[float]] = {i: [] for i in ids}
        while self.engine.has_unfinished():
            for delta in self.engine.step():
                now = time.perf_counter()
                stamps[delta.request_id].extend(now for _ in delta.token_ids)
        return start, [stamps[i] for i in ids]

    def ttft(self, prompt: list[int]) -> float:
        start, times = self._run([prompt], 1)
        return times[0][0] - start

    def cached_ttft(self, prefix: list[int], warm: list[int], new: list[int]) -> float:
        self.ttft(prefix + warm)
        return self.ttft(prefix + new)

    def decode(self, prompts: list[list[int]], tokens: int) -> float:
        return decode_rate(self._run(prompts, tokens)[1])

    def close(self) -> None:
        pass


class TransformersBench:
    """Hugging Face transformers, bf16, greedy decode with its KV cache; `attention` is
    "sdpa" (its default, what a user runs) or "eager"."""

    def __init__(self, model_path: str, attention: str = "sdpa") -> None:
        from transformers import AutoModelForCausalLM

        self.name = "transformers" if attention == "sdpa" else f"transformers-{attention}"
        path = Path(model_path)
        extra = {}
        try:  # transformers >= 5 keeps GGUF blocks packed unless told to unpack them
            from transformers import GgufConfig

            extra["quantization_config"] = GgufConfig(dequantize=True)
        except ImportError:
            pass
        self.model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.bfloat16,
            attn_implementation=attention, **extra).eval()
        self.config = {"dtype": "bfloat16", "attn_implementation": attention, "dequantized": True}

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, past=None):
        out = self.model(input_ids=ids, past_key_values=past, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1), out.past_key_values

    def ttft(self, prompt: list[int]) -> float:
        start = time.perf_counter()
        self._forward(torch.tensor([prompt]))
        return time.perf_counter() - start

    def cached_ttft(self, prefix: list[int], warm: list[int], new: list[int]) -> float:
        _, past = self._forward(torch.tensor([prefix]))
        past = copy.deepcopy(past)
        start = time.perf_counter()
        self._forward(torch.tensor([new]), past)
        return time.perf_counter() - start

    def decode(self, prompts: list[list[int]], tokens: int) -> float:
        token, past = self._forward(torch.tensor(prompts))
        stamps = [[time.perf_counter()] for _ in prompts]
        for _ in range(tokens - 1):
            token, past = self._forward(token[:, None], past)
            now = time.perf_counter()
            for seq in stamps:
                seq.append(now)
        return decode_rate(stamps)

    def close(self) -> None:
        pass
