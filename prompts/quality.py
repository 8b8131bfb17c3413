"""The compression quality set: long contexts with planted facts, and questions about them.

Each case hides one fact ("The access code for the Harbor vault is 4711.") in pages of
filler, next to distractors of the same shape about other places, and asks for it. A
compressor passes a case when the kept text still contains the fact's value; `evaluate`
reports the compression ratio, the time spent and the share of facts that survived.
Deterministic for a given seed, so runs compare.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

PLACES = ["Harbor", "Granite", "Willow", "Cobalt", "Meadow", "Falcon", "Juniper", "Summit",
          "Orchid", "Lantern", "Copper", "Birch", "Saffron", "Quartz", "Tundra", "Ember"]
ATTRIBUTES = [("access code for the {p} vault", "What is the access code for the {p} vault?"),
              ("launch year of the {p} satellite", "In which year was the {p} satellite launched?"),
              ("budget of the {p} project in euros", "What is the budget of the {p} project "
               "in euros?"),
              ("room number of the {p} archive", "What is the room number of the {p} archive?")]
SUBJECTS = ["The committee", "Our team", "The old report", "A later survey", "The city council",
            "Engineers", "The review board", "Most visitors", "The vendor", "The auditors"]
VERBS = ["noted", "discussed", "questioned", "reviewed", "summarised", "praised", "revisited",
         "documented", "challenged", "described"]
OBJECTS = ["the seasonal schedule", "the maintenance backlog", "the cost of materials",
           "the staffing plan", "a drop in attendance", "the new signage", "weather delays",
           "the supply contract", "the safety drills", "the parking situation"]
TAILS = ["in some detail", "without reaching a conclusion", "at the quarterly meeting",
         "for the second time", "with mixed feelings", "in a short memo", "over several weeks",
         "before the deadline", "after the inspection", "during the spring"]


@dataclass
class PlantedCase:
    context: str
    question: str
    answer: str  # the fact's value; it must survive compression

    @property
    def prompt(self) -> str:
        """The user turn as sent: the document, then the question."""
        return f"{self.context}\n\n{self.question}"


@dataclass
class QualityReport:
    cases: int
    tokens_in: int
    tokens_out: int
    seconds: float
    survived: int

    @property
    def ratio(self) -> float:
        return self.tokens_out / self.tokens_in if self.tokens_in else 1.0

    @property
    def survival(self) -> float:
        return self.survived / self.cases if self.cases else 1.0


def _filler(rng: random.Random, sentences: int) -> str:
    return " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
                    f"{rng.choice(TAILS)}." for _ in range(sentences))


def _value(rng: random.Random, attribute: int) -> str:
    return [lambda: str(rng.randint(1000, 9999)), lambda: str(rng.randint(1960, 2024)),
            lambda: f"{rng.randint(2, 90)},{rng.randint(100, 999)},000",
            lambda: f"{rng.choice('ABCDEFG')}-{rng.randint(100, 999)}"][attribute]()


def make_cases(n: int = 20, paragraphs: int = 30, distractors: int = 6,
               seed: int = 0) -> list[PlantedCase]:
    """`n` contexts of about `paragraphs` × 60 words, each hiding one asked-for fact."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        attribute = rng.randrange(len(ATTRIBUTES))
        phrase, question = ATTRIBUTES[attribute]
        places = rng.sample(PLACES, distractors + 1)
        answer = _value(rng, attribute)
        facts = [f"The {phrase.format(p=places[0])} is {answer}."]
        facts += [f"The {phrase.format(p=p)} is {_value(rng, attribute)}." for p in places[1:]]
        paras = [_filler(rng, rng.randint(3, 6)) for _ in range(paragraphs)]
        for fact in facts:
            i = rng.randrange(len(paras))
            sentences = paras[i].split(". ")
            sentences.insert(rng.randint(0, len(sentences)), fact.rstrip("."))
            paras[i] = ". ".join(sentences)
        cases.append(PlantedCase("\n\n".join(paras), question.format(p=places[0]), answer))
    return cases


Compress = Callable[[PlantedCase], Awaitable[str]]


async def evaluate(cases: list[PlantedCase], compress: Compress,
                   count: Callable[[str], int]) -> QualityReport:
    """Run `compress` over every case (it returns the kept prompt); a case survives when its
    answer is still in the kept text."""
    report = QualityReport(len(cases), 0, 0, 0.0, 0)
    for case in cases:
        t0 = time.perf_counter()
        kept = await compress(case)
        report.seconds += time.perf_counter() - t0
        report.tokens_in += count(case.prompt)
        report.tokens_out += count(kept)
        report.survived += case.answer in kept
    return report
