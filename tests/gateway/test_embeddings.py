"""`/v1/embeddings` through the SDK: the gateway's own all-MiniLM-L6-v2 (384 dims)."""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest


def test_embeddings(client):
    r = client.embeddings.create(model="all-minilm-l6-v2",
                                 input=["A cat sat on the mat.", "A kitten on a rug.",
                                        "Quarterly tax filing deadlines."])
    assert r.object == "list" and r.model == "all-minilm-l6-v2"
    vectors = np.array([d.embedding for d in r.data])
    assert vectors.shape == (3, 384) and [d.index for d in r.data] == [0, 1, 2]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.2  # the cats are closer to each other than to taxes
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens


def test_single_string_and_base64(client):
    floats = client.embeddings.create(model="m", input="hello", encoding_format="float")
    raw = client.embeddings.with_raw_response.create(model="m", input="hello",
                                                     encoding_format="base64")
    encoded = raw.http_response.json()["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(encoded), dtype="<f4")
    assert np.allclose(decoded, floats.data[0].embedding, atol=1e-6)


def test_bad_dimensions(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="m", input="x", dimensions=12)
    assert info.value.body["param"] == "dimensions"


def test_encodes_run_on_the_in_process_engines_step_thread(gateway, client):
    """With the bundled engine on this CPU, the shared embedder encodes between engine steps
    (gateway.app.share_step_thread) instead of competing with them for the cores."""
    from cache.embedder import Embedder

    engine = gateway.app.state.engine
    assert engine.on_cpu and Embedder.shared().executor is engine.executor
    text = f"a sentence nobody embedded before {np.random.default_rng().integers(1 << 30)}"
    assert len(client.embeddings.create(model="m", input=text).data[0].embedding) == 384


def test_the_embedder_goes_back_to_an_engine_still_running():
    """Apps in one process (tests) start and stop engines out of order: stopping one hands
    the embedder to the newest engine still running, never to a stopped one."""
    from cache.embedder import Embedder
    from gateway.app import share_step_thread

    class CpuEngine:  # what share_step_thread reads of an engine
        on_cpu = True

        def __init__(self) -> None:
            self.executor = object()

    embedder, before = Embedder.shared(), Embedder.shared().executor
    a, b, c = CpuEngine(), CpuEngine(), CpuEngine()
    undo_a, undo_b = share_step_thread(a), share_step_thread(b)
    undo_b()
    assert embedder.executor is a.executor
    undo_c = share_step_thread(c)
    undo_a()
    assert embedder.executor is c.executor
    undo_c()
    assert embedder.executor is before
