"""`bench.cache.embedder_headroom`: which pairs only the cosine floor keeps from the verifier,
and how many a better encoder could bring it without bringing a trap more."""

from bench.cache.embedder_headroom import headroom, open_pairs

PARAPHRASE = {"id": "p", "a": "How do I reset my password?",
              "b": "How can I change a forgotten password?", "same_answer": True}
REWORDED_TRAP = {"id": "t", "a": "Can I book the restaurant for dinner?",
                 "b": "Is it possible to hire out the whole venue for a private party?",
                 "same_answer": False}
NEGATION_TRAP = {"id": "n", "a": "Cancel my subscription", "b": "Don't cancel my subscription",
                 "same_answer": False}
NEAR_REPEAT = {"id": "r", "a": "What time do you open?", "b": "what time do you open",
               "same_answer": True}
PAIRS = [PARAPHRASE, REWORDED_TRAP, NEGATION_TRAP, NEAR_REPEAT]


def _cos(paraphrase: float, trap: float) -> dict[tuple[str, str], float]:
    return {(PARAPHRASE["a"], PARAPHRASE["b"]): paraphrase,
            (REWORDED_TRAP["a"], REWORDED_TRAP["b"]): trap,
            (NEGATION_TRAP["a"], NEGATION_TRAP["b"]): 0.98,
            (NEAR_REPEAT["a"], NEAR_REPEAT["b"]): 0.99}


def test_only_pairs_the_cosine_decides_are_kept() -> None:
    missed, traps = open_pairs(PAIRS, 0.78, _cos(paraphrase=0.5, trap=0.3))
    # the negation trap fails an exact check; the near repeat is over the floor today
    assert [p["id"] for p in missed] == ["p"]
    assert [p["id"] for p in traps] == ["t"]
    over_the_floor, _ = open_pairs(PAIRS, 0.78, _cos(paraphrase=0.95, trap=0.3))
    assert over_the_floor == []


def test_servable_counts_missed_pairs_above_the_highest_trap() -> None:
    missed, traps = [PARAPHRASE], [REWORDED_TRAP]
    better = headroom("x", "train", missed, traps, _cos(paraphrase=0.70, trap=0.60))
    assert (better.missed, better.traps, better.top_trap, better.servable) == (1, 1, 0.6, 1)
    worse = headroom("x", "train", missed, traps, _cos(paraphrase=0.60, trap=0.70))
    assert worse.servable == 0
    assert headroom("x", "train", missed, [], _cos(0.1, 0.0)).servable == 1  # no trap: no bar
