"""Generate labelled question pairs that teach phenomena, not a vocabulary.

    python -m training.generate [--seed 7] [--out training/data/generated_pairs.jsonl]

Same-answer pairs: sibling rewordings of one hand-written family (training/bank.py),
symmetric questions with their two items swapped, and any question with fillers, typos, a
reordered clause or a synonym. Near misses: another family about the same slot (the asked-for
attribute or question word), another slot of the same class, directed questions with their
arguments swapped, negation and antonyms, other numbers, dates or units, look-alike
identifiers, an added constraint, a related but different item. Every pair carries a `group`
(the family or template it came from) so cross-validation folds never share one.
Output: JSON lines in fow-cache's format plus `group`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path

from training import perturb as p
from training.bank import DIRECTED, FAMILIES, SLOTS, SYMMETRIC

OUT = Path(__file__).with_name("data") / "generated_pairs.jsonl"
Pair = dict

NUMBERED = [  # (template, number kind); {n} a number, {u} a unit, {d} a day, {m} a month
    ("Can I return an item after {n} days?", "n"), ("What is {n}% of 250?", "n"),
    ("How long do I roast a {n} {u} chicken?", "u"), ("Is the office open on {d}?", "d"),
    ("What happened in {y}?", "y"), ("What's the forecast for {d} in Lyon?", "d"),
    ("How much is a double room for {n} nights?", "n"), ("Is shipping free on orders over ${n}0?", "n"),
    ("Can I take {n} tablets at once?", "n"), ("What was the inflation rate in {y}?", "y"),
    ("How many {u} is a marathon?", "u"), ("Is the museum open on {m} 1st?", "m"),
    ("What's the best way to invest {n},000 euros?", "n"), ("Can I cancel within {n} hours?", "n"),
    ("Which team won the league in {y}?", "y"), ("How do I train for a {n}k run?", "n"),
    ("What's the monthly payment on a {n}0-year loan?", "n"), ("Is there a train to Bern on {d} night?", "d"),
    ("How many {u} of water should I drink a day?", "u"), ("Who was president in {y}?", "y"),
    ("Can kids under {n} fly alone?", "n"), ("What do I need for a {n} day hike?", "n"),
    ("How warm is the sea in {m}?", "m"), ("Is a {n} year warranty standard for fridges?", "n"),
]
IDENTIFIED = ["What does error code {i} mean?", "Is flight {i} on time?",
              "What are the specs of the {i}?", "How do I use {i}() in my code?",
              "Where is gate {i}?", "Which parts fit the {i} model?", "Is the {i} chip any good?",
              "What does the {i} setting change?", "How do I update firmware on the {i}?"]
IDENTS = ["E12", "F07", "LH452", "UA88", "X200", "RTX3060", "M2", "A14", "B7", "QX9", "strlen",
          "memcpy", "getenv", "parseInt", "readline", "KX-350", "ZR7", "S10", "T480", "C40",
          "setTimeout", "fopen", "printf", "np.dot", "os.walk", "H3", "DL220", "EX4"]
RELATED = [("gift wrapping", "a gift card"), ("a refund", "store credit"), ("my username", "my email address"),
           ("a checking account", "a credit card"), ("a flu shot", "a COVID booster"),
           ("a visa", "a work permit"), ("annual leave", "sick leave"), ("a mortgage", "a personal loan"),
           ("a driving test", "a driving licence renewal"), ("home insurance", "contents insurance"),
           ("a dentist appointment", "a dental cleaning"), ("a return label", "a shipping label"),
           ("a hotel upgrade", "a late checkout"), ("seat selection", "extra legroom"),
           ("a library card", "a museum pass"), ("a rain check", "a price match"),
           ("a tax return", "a tax refund"), ("an invoice", "a receipt"), ("a warranty claim", "a repair booking"),
           ("a gym membership", "a personal trainer"), ("parental leave", "unpaid leave")]
RELATED_FORMS = ["How do I get {x}?", "How do I apply for {x}?", "What do I need for {x}?",
                 "How long does {x} take?", "Can I request {x} online?"]
OPEN_ENDED = ["Explain how {x} works", "Give me tips for {x}", "Summarise the history of {x}",
              "Write a short guide to {x}", "What should I know about {x}?"]
TOPICS = ["compound interest", "solar panels", "sourdough baking", "remote work", "jet lag",
          "composting", "public speaking", "password managers", "electric cars", "meditation",
          "index funds", "container shipping", "the immune system", "carbon offsets", "chess openings"]


def pair(a: str, b: str, same: bool, category: str, group: str) -> Pair:
    return {"a": a, "b": b, "same_answer": same, "category": category, "group": group}


def numbered(pairs: list[Pair], prefix: str) -> list[Pair]:
    """`pairs` with ids `<prefix>-NNNNN` in their order."""
    for i, x in enumerate(pairs):
        x["id"] = f"{prefix}-{i:05d}"
    return pairs


def family_pairs(rnd: random.Random, per_slot: int) -> Iterator[Pair]:
    """Rewordings (same), other families on the slot (attribute), other slots (entity)."""
    for cls, families in FAMILIES.items():
        slots = SLOTS[cls]
        for name, forms in families.items():
            group = f"{cls}.{name}"
            for x in rnd.sample(slots, min(per_slot, len(slots))):
                a, b = rnd.sample(forms, 2)
                yield pair(a.format(x=x), b.format(x=x), True, "reworded", group)
                other = rnd.choice([f for n, f in families.items() if n != name])
                yield pair(rnd.choice(forms).format(x=x), rnd.choice(other).format(x=x), False,
                           "attribute", group)
                y = rnd.choice([s for s in slots if s != x])
                form = rnd.choice(forms)
                yield pair(form.format(x=x), (form if rnd.random() < 0.6 else rnd.choice(forms))
                           .format(x=y), False, "entity_swap", group)


def directed_pairs(rnd: random.Random) -> Iterator[Pair]:
    """Swapped arguments are near misses; the same arguments reworded are not; symmetric
    questions keep their answer whichever item comes first."""
    for name, (forms, items) in DIRECTED.items():
        for x, y in items * 3:
            yield pair(rnd.choice(forms).format(x=x, y=y), rnd.choice(forms).format(x=y, y=x),
                       False, "swapped", f"directed.{name}")
            a, b = rnd.sample(forms, 2)
            yield pair(a.format(x=x, y=y), b.format(x=x, y=y), True, "reworded", f"directed.{name}")
    forms, items = SYMMETRIC
    for x, y in items:
        a, b = rnd.sample(forms, 2)
        yield pair(a.format(x=x, y=y), b.format(x=y, y=x), True, "reworded", "symmetric")


def negation_pairs(rnd: random.Random, n: int) -> Iterator[Pair]:
    """Antonym verbs, adjectives and nouns, and an inserted "not"."""
    for _ in range(n):
        v, w = rnd.choice(p.ANTONYM_VERBS)
        obj = rnd.choice(p.OBJECTS)
        form = rnd.choice(["How do I {v} {o}?", "Where can I {v} {o}?", "Why can I not {v} {o}?",
                           "Is there a way to {v} {o}?"])
        yield pair(form.format(v=v, o=obj), form.format(v=w, o=obj), False, "negation", "neg.verb")
        adj, opp = rnd.choice(p.ANTONYM_ADJ)
        x = rnd.choice(SLOTS[rnd.choice(["food", "city", "asset", "app"])])
        form = rnd.choice(["Is {x} {a}?", "Why is {x} considered {a}?", "Which parts of {x} are {a}?"])
        yield pair(form.format(x=x, a=adj), form.format(x=x, a=opp if rnd.random() < 0.6
                                                       else "not " + adj), False, "negation", "neg.adj")
        noun, other = rnd.choice(p.ANTONYM_NOUNS)
        topic = rnd.choice(TOPICS)
        form = rnd.choice(["What are the {a} of {t}?", "List the {a} of {t}.", "Tell me the {a} of {t}."])
        yield pair(form.format(a=noun, t=topic), form.format(a=other, t=topic), False, "negation",
                   "neg.noun")
        food = rnd.choice(SLOTS["food"])
        yield pair(f"Should I eat {food} before a workout?", f"Should I not eat {food} before a workout?",
                   False, "negation", "neg.not")


def number_pairs(rnd: random.Random, n: int) -> Iterator[Pair]:
    """Another number, year, day, month or unit is a near miss; the same one spelled out or
    reworded around is not."""
    for _ in range(n):
        form, kind = rnd.choice(NUMBERED)
        k, j = rnd.sample([2, 3, 4, 5, 6, 7, 8, 9, 12], 2)
        u, v = rnd.choice(p.UNITS)
        fill = {"n": (k, j), "y": tuple(rnd.sample(range(1890, 2024), 2)),
                "d": tuple(rnd.sample(p.DAYS, 2)), "m": tuple(rnd.sample(p.MONTHS, 2)), "u": (u, v)}
        x, y = fill[kind]
        base = dict(n=k, u=u, d=p.DAYS[0], m=p.MONTHS[0], y=1990)
        a = form.format(**{**base, kind: x})
        yield pair(a, form.format(**{**base, kind: y}), False, "numbers", f"num.{kind}")
        if kind == "n" and "{n}" in form and "{n}0" not in form and "{n}," not in form and k in p.NUMBER_WORDS:
            yield pair(a, form.format(**{**base, "n": p.spelled(k)}), True, "numbers_same", "num.spelled")


def identifier_pairs(rnd: random.Random, n: int) -> Iterator[Pair]:
    """Look-alike identifiers (one character apart) are near misses; the same one reworded,
    filled or mistyped elsewhere is not."""
    for _ in range(n):
        ident, form = rnd.choice(IDENTS), rnd.choice(IDENTIFIED)
        a = form.format(i=ident)
        yield pair(a, form.format(i=p.lookalike(ident, rnd)), False, "lookalike", "ident")
        yield pair(a, p.with_filler(a, rnd), True, "filler", "ident")


def constraint_pairs(rnd: random.Random, n: int) -> Iterator[Pair]:
    """An added format, length, audience, source, language or scope changes the answer."""
    for _ in range(n):
        q = rnd.choice(OPEN_ENDED).format(x=rnd.choice(TOPICS))
        if not q.endswith("?"):
            q += "."
        yield pair(q, p.with_constraint(q, rnd), False, "constraint", "constraint")


def related_pairs(rnd: random.Random) -> Iterator[Pair]:
    for x, y in RELATED:
        form = rnd.choice(RELATED_FORMS)
        yield pair(form.format(x=x), form.format(x=y), False, "related", "related")


def surface_pairs(questions: list[Pair], rnd: random.Random) -> Iterator[Pair]:
    """Same-answer pairs from any question: fillers, typos, a reordered clause, a synonym;
    and the same perturbation on both sides of a near miss (a mistyped trap is a trap)."""
    for item in questions:
        q, group = item["a"], item["group"]
        yield pair(q, p.with_filler(q, rnd), True, "filler", group)
        yield pair(q, p.with_typos(q, rnd, rnd.choice((1, 1, 2))), True, "typo", group)
        if (r := p.reordered(q)) is not None:
            yield pair(q, r, True, "reordered", group)
        if (s := p.with_synonym(q, rnd)) is not None:
            yield pair(q, s, True, "synonym", group)


def generate(seed: int = 7, per_slot: int = 10) -> list[Pair]:
    rnd = random.Random(seed)
    core = list(itertools.chain(family_pairs(rnd, per_slot), directed_pairs(rnd),
                                negation_pairs(rnd, 120), number_pairs(rnd, 260),
                                identifier_pairs(rnd, 200), constraint_pairs(rnd, 200),
                                related_pairs(rnd)))
    bases = rnd.sample(core, min(len(core), 800))
    pairs = core + list(surface_pairs(bases, rnd))
    for item in rnd.sample([x for x in core if not x["same_answer"]], 400):
        pairs.append(pair(p.with_typos(item["a"], rnd), item["b"], False, item["category"],
                          item["group"]))  # a typo on one side keeps a near miss a near miss
    pairs = [x for x in pairs if x["a"].strip().lower() != x["b"].strip().lower() or x["same_answer"]]
    return numbered(pairs, "gen")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.generate", description=__doc__)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    pairs = generate(args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as fh:
        for x in pairs:
            fh.write(json.dumps(x, ensure_ascii=False) + "\n")
    same = sum(x["same_answer"] for x in pairs)
    print(f"{len(pairs)} pairs ({same} same-answer) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
