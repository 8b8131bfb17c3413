"""The learned verifier: contextual alignment of the words the guard left unmatched, the
shipped weights, and that real paraphrases align better than different questions."""

import json

import numpy as np
import pytest

from cache.embedder import Embedder
from cache.guard import Guard, to_verify
from cache.verifier import FEATURES, WEIGHTS, PairSignals, Verifier, alignment, shipped


def _pieces(*rows: tuple[str, int]) -> tuple[np.ndarray, list[str]]:
    eye = np.eye(4, dtype=np.float32)
    return np.stack([eye[k] for _, k in rows]), [p for p, _ in rows]


def test_alignment_joins_word_pieces_and_takes_the_weaker_side():
    a = _pieces(("how", 0), ("un", 1), ("##sub", 1), ("##scribe", 1))
    b = _pieces(("how", 0), ("stop", 1), ("emails", 2))
    # "unsubscribe" is said by "stop"; "emails" by nothing in a
    assert alignment(a, b, ("unsubscribe",), ("stop",)) == 1.0
    assert alignment(a, b, ("unsubscribe",), ("emails",)) == 0.0
    assert alignment(a, b, ("unsubscribe",), ("stop", "emails")) == 0.5
    assert alignment(a, b, (), ()) == 1.0  # nothing unmatched on either side


def test_features_follow_the_declared_order():
    s = PairSignals(0.65, "a", "b", ("x",), ("y",), aligned=0.4)
    assert list(s.features()) == [0.65, 0.4] and len(FEATURES) == 2


def test_shipped_weights_load_and_score_in_range():
    v = shipped()
    assert v is not None and v.features == FEATURES
    assert 0.5 < v.threshold < 1.0 and 0.0 < v.relief <= 0.3
    assert json.loads(WEIGHTS.read_text())["features"] == list(FEATURES)
    low, high = (v.score(PairSignals(0.65, "a", "b", (), (), aligned=x)) for x in (0.2, 0.7))
    assert 0.0 <= low < high <= 1.0  # better aligned words, a higher score


def test_save_and_load_round_trip(tmp_path):
    v = Verifier(mean=(0.0, 0.0), scale=(1.0, 1.0), coef=(0.0, 2.0), intercept=0.0,
                 threshold=0.6, relief=0.1)
    v.save(tmp_path / "w.json")
    back = Verifier.load(tmp_path / "w.json")
    assert back == v
    assert back.score(PairSignals(0.5, "a", "b", (), (), aligned=0.0)) == 0.5


def test_missing_or_stale_weights_load_as_none(tmp_path):
    assert Verifier.load(tmp_path / "nope.json") is None
    stale = json.loads(WEIGHTS.read_text()) | {"features": ["similarity", "overlap"]}
    (tmp_path / "old.json").write_text(json.dumps(stale))
    assert Verifier.load(tmp_path / "old.json") is None


@pytest.mark.parametrize(("a", "b", "same"), [
    ("What should I pack for a cold climate?", "What clothes should I bring somewhere freezing?",
     True),
    ("How do I apply for a passport for my baby?", "What's the process to renew my own passport?",
     False),
])
def test_real_pieces_align_a_paraphrase_not_a_different_question(a, b, same):
    embedder = Embedder.shared()
    va, vb = embedder.embed_sync([a, b])
    signals = to_verify(Guard().check(a, b, float(va @ vb), 0.78))
    assert signals is not None
    done = signals.with_pieces(embedder.tokens_sync(a), embedder.tokens_sync(b))
    assert (Guard().verified(done) is not None) == same
