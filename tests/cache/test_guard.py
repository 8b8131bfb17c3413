"""The guard: exact checks reject by name what no wording can fix; the pair verifier reads
the rest. (How often the verifier is right is measured on labelled pairs: test_eval.py and
`headstart eval-cache`; here, what the guard does with its scores.) Every table asserts the reason, so a guard that crashes (reason `guard_error`)
fails it instead of passing as a rejection."""

import pytest
import torch

from bench.cache.verifier_bench import logit
from cache.checks import clash, conversation_clash
from cache.guard import Guard
from cache.keys import TURN_SEP
from cache.pair_model import WEIGHTS, PairConfig, PairModel, dequantized, quantized, shared

guard = Guard()


@pytest.mark.parametrize(("cached", "new", "reason", "said"), [
    ("Track order 48213", "Track order 48231", "numbers", (("48213",), ("48231",))),
    ("Book a table for two at 7pm", "Book a table for 4 at 7pm", "numbers",
     (("2", "7pm"), ("4", "7pm"))),
    ("How do I roast a 5 kg turkey?", "How do I roast a 5 lb turkey?", "units",
     (("kg",), ("lb",))),
    ("Is the office open on Saturday?", "Is the office open on Sunday?", "dates",
     (("saturday",), ("sunday",))),
    ("Is flight BA117 delayed?", "Is flight BA171 delayed?", "identifiers",
     (("ba117",), ("ba171",))),
    ("cancel my subscription", "do NOT cancel my subscription", "negation", (("0",), ("1",))),
    ("How do I lock my card?", "How do I unlock my card?", "opposite", (("lock",), ("unlock",))),
    ("What are the advantages of leasing?", "List the disadvantages of leasing.", "opposite",
     (("advantages",), ("disadvantages",))),
    ("How do I migrate from MySQL to Postgres?", "How do I migrate from Postgres to MySQL?",
     "swapped", (("postgres",), ("mysql",))),
    ("Convert CSV to JSON", "How do I turn JSON into CSV?", "swapped",
     (("json",), ("csv",))),
    ("What does memcpy return?", "What does mecmpy return?", "lookalike",
     (("memcpy",), ("mecmpy",))),
    # a unit goes with its number, a sign with its value, an operator or a "+" names a thing
    ("How many euros is 100 dollars?", "How many dollars is 100 euros?", "numbers",
     (("100usd",), ("100eur",))),
    ("What is 80% of 15?", "What is 15% of 80?", "numbers",
     (("15", "80percent"), ("15percent", "80"))),
    ("What is the square root of 144?", "What is the square root of -144?", "numbers",
     (("144",), ("-144",))),
    ("What's the difference between == and === in JavaScript?",
     "What's the difference between != and !== in JavaScript?", "identifiers",
     (("==", "==="), ("!=", "!=="))),
    ("How firm is the Slumbra Cloud+ mattress?", "How firm is the Slumbra Cloud mattress?",
     "lookalike", (("cloud+",), ("cloud",))),
    # an owner's duties, a C type, two things trading places around a verb
    ("What are the landlord's duties to the tenant?",
     "What are the tenant's duties to the landlord?", "swapped", (("tenant",), ("landlord",))),
    ("How do I cast a float to an int in C?", "How do I cast an int to a float in C?",
     "swapped", (("int",), ("float",))),
    ("Why do dogs chase cats?", "um, why do cats chase dogs? cheers", "swapped",
     (("dogs",), ("cats",))),
])
def test_exact_checks_reject_by_name(cached, new, reason, said):
    verdict = guard.check(cached, new)
    assert (verdict.ok, verdict.reason) == (False, reason)
    assert (verdict.clash.cached, verdict.clash.new) == said
    assert verdict.score is None  # the verifier never ran


@pytest.mark.parametrize(("cached", "new"), [
    ("Can I return it after two weeks?", "Can I return it after 14 days?"),
    ("What's the rate on a two-year fix?", "What's the rate on a 2-year fix?"),
    ("How do I turn on 2FA?", "How do I turn on two-factor authentication?"),
])
def test_numbers_compare_by_value_and_one_sided_classes_pass_to_the_verifier(cached, new):
    assert guard.check(cached, new).reason in ("verified", "verifier", "same_text")


def test_the_same_text_once_normalised_passes_without_the_model():
    verdict = guard.check("How do I reset my password?", "um, how do i reset my password")
    assert (verdict.ok, verdict.reason, verdict.score) == (True, "same_text", None)


@pytest.mark.parametrize(("cached", "new"), [
    ("Which languages are spoken in Peru?", "In Peru, which languages are spoken?"),
    ("For 7 nights, how much is a double room?", "how much is a double room for 7 nights"),
    ("If I miss a payment, will I be charged a fee?", "Will I be charged a fee if I miss a payment?"),
])
def test_a_clause_moved_to_the_other_end_is_the_same_text(cached, new):
    verdict = guard.check(cached, new)
    assert (verdict.ok, verdict.reason) == (True, "same_text")


@pytest.mark.parametrize(("cached", "new"), [
    ("How do I convert JSON to YAML?", "How do I convert YAML to JSON?"),
    ("Can I return a Kohl's item at Amazon?", "At Kohl's, can I return an Amazon item?"),
])
def test_words_moved_inside_a_clause_are_not(cached, new):
    assert guard.check(cached, new).reason != "same_text"


@pytest.mark.parametrize(("cached", "new"), [
    # the same direction said another way, two items compared either way round, a plural,
    # a misspelt English word (mended first), a word that only looks prefixed
    ("How long is the flight from Dublin to Boston?", "Flying to Boston from Dublin: how long?"),
    ("How do I move photos from my iPhone to my Mac?", "Transfer pictures from an iPhone onto a Mac"),
    ("Is Python better than Java?", "Java vs Python: which is better?"),
    ("Do kitchens need a GFCI outlet?", "Are GFCIs required in a kitchen?"),
    ("How do I improve my strenght?", "How can I improve my strength?"),
    ("How do I report my income?", "Where do I report what came in?"),
    ("HSA vs FSA", "FSA vs HSA"),  # "vs" either way round
    ("How is APR calculated?", "How do you calculate APR?"),  # neighbours trade places
    ("Convert 5 km to miles", "How many miles is 5 km?"),  # 5 km either way
])
def test_rewordings_pass_the_exact_checks(cached, new):
    assert clash(cached, new) is None


@pytest.mark.parametrize(("cached", "new"), [
    ("What's the capital of Australia?", "What's the capital of Austria?"),
    ("Is ibuprofen safe with alcohol?", "Is ibuprofen dangerous with alcohol?"),
    ("When was the Eiffel Tower built?", "Where was the Eiffel Tower built?"),
    ("What's the price for adults?", "What's the price for children?"),
])
def test_the_verifier_rejects_near_misses(cached, new):
    verdict = guard.check(cached, new)
    assert (verdict.ok, verdict.reason) == (False, "verifier")
    assert verdict.score is not None and verdict.score < guard.threshold()


@pytest.mark.parametrize(("cached", "new"), [
    ("How can I increase my internet upload speed?",
     "one more thing: how can I limit my internet upload speed? :)"),
    ("How heavy is the MacBook Air?", "hey there! how thick is the MacBook Air? any idea?"),
])
def test_greetings_and_thanks_do_not_sway_the_verifier(cached, new):
    # with them it scored these 0.998-0.999, as if a filler meant the same question
    verdict = guard.check(cached, new)
    assert (verdict.ok, verdict.reason) == (False, "verifier")


def test_the_verdict_is_the_same_whichever_question_came_first():
    a, b = "How do I convert Celsius to Fahrenheit?", "How can I turn Celsius into Fahrenheit?"
    assert guard.check(a, b).ok == guard.check(b, a).ok
    assert guard.model.score([(a, b)]) == guard.model.score([(b, a)])  # both orders read


def test_a_near_miss_is_read_one_way_when_that_reading_already_decides():
    model = PairModel.load()  # its own LRU of readings
    batches = []
    encoder = model.model

    def counted(*enc):
        batches.append(enc[0].shape[0])
        return encoder(*enc)

    model.model = counted
    near = ("When was the Eiffel Tower built?", "Where was the Eiffel Tower built?")
    same = ("How do I reset my password?", "What are the steps to reset my password?")
    bound = model.score([near, same], at_least=model.threshold)
    assert batches == [2, 1]  # both pairs one way, then only the rewording the other way
    full = model.score([near, same])
    assert batches == [2, 1, 1]  # what `at_least` skipped: the near miss's other reading
    assert bound[1] == full[1] >= model.threshold
    assert full[0] <= bound[0] < model.threshold  # a bound above the mean, still under


def test_candidates_are_verified_in_one_batch_in_order():
    verdicts = guard.check_many(["How do I lock my card?", "How do I lock card 2?",
                                 "how do i lock my card", "Where can I lock my card?"],
                                "How do I lock my card?", threshold=0.0)
    assert [v.reason for v in verdicts] == ["same_text", "numbers", "same_text", "verified"]
    assert verdicts[3].score is not None


def test_a_threshold_override_moves_the_operating_point():
    a, b = "When was the Eiffel Tower built?", "Where was the Eiffel Tower built?"
    score = float(guard.model.score([(a, b)])[0])  # both orders, unrounded
    assert guard.check(a, b, threshold=score).ok
    assert not guard.check(a, b, threshold=min(1.0, score + 1e-3)).ok


def test_without_a_model_only_exact_checks_and_same_text_pass():
    bare = Guard(model=None)
    assert bare.check("Track order 1", "track order 1").reason == "same_text"
    assert bare.check("Track order 1", "Track order 2").reason == "numbers"
    assert bare.check("How do I lock my card?", "Where can I lock my card?").reason == \
        "no_verifier"


def test_a_crash_is_a_rejection_named_guard_error():
    class Broken:
        threshold = 0.5

        def score(self, pairs, at_least=None):
            raise RuntimeError("boom")

    verdict = Guard(model=Broken()).check("How do I lock my card?", "Where can I lock my card?")
    assert (verdict.ok, verdict.reason) == (False, "guard_error")


def test_the_shipped_model_is_small_and_cross_validated():
    model = shared()
    assert model is not None and 0.0 < model.threshold < 1.0
    assert set(model.config.operating_points) >= {"false<=1.0%"}
    assert model.config.tuned_layers == 6
    assert WEIGHTS.stat().st_size < 20 * 2**20  # int8 matrices: 11 MB, not 42 MB


def test_int8_storage_keeps_each_weight_within_half_a_step():
    torch.manual_seed(0)
    weights = {"w": torch.randn(8, 16), "bias": torch.randn(8), "head": torch.randn(1, 16)}
    stored = quantized(weights)
    assert stored["w.q8"].dtype == torch.int8 and set(stored) == {"w.q8", "w.scale", "bias", "head"}
    back = dequantized(stored)
    step = weights["w"].abs().amax(1, keepdim=True) / 127
    assert bool(((back["w"] - weights["w"]).abs() <= step / 2 + 1e-7).all())
    assert torch.equal(back["bias"], weights["bias"]) and torch.equal(back["head"], weights["head"])


SCORED_PAIRS = [
    ("How do I reset my password?", "I forgot my password, how do I get a new one?"),
    ("When was the Eiffel Tower built?", "Where was the Eiffel Tower built?"),
    ("How do I migrate from MySQL to Postgres?", "How do I migrate from Postgres to MySQL?"),
    ("What is the capital of Australia?", "Which city is Australia's capital?"),
    ("How many calories are in a banana?", "How much potassium is in a banana?"),
]


def test_bfloat16_scores_stay_within_a_hundredth_of_float32():
    if not shared().bf16:
        pytest.skip("this CPU has no native bfloat16: the verifier runs in float32")
    bf16 = PairModel.load(bf16=True, int8=False)
    exact = PairModel.load(bf16=False)
    assert abs(exact.score(SCORED_PAIRS) - bf16.score(SCORED_PAIRS)).max() < 0.015


def test_int8_scores_keep_float32s_verdicts_and_logits_within_a_few_tenths():
    """On CPUs where the engine multiplies in int8 (AVX-512 VNNI, no AMX) the verifier does
    too: the same verdicts at the shipped threshold, logits near float32's."""
    int8 = PairModel.load(bf16=True, int8=True) if shared().bf16 else None
    if int8 is None or not int8.int8:
        pytest.skip("the engine's int8 kernels are not in use on this CPU")
    exact = PairModel.load(bf16=False)
    got, want = int8.score(SCORED_PAIRS), exact.score(SCORED_PAIRS)
    assert list(got >= exact.threshold) == list(want >= exact.threshold)
    assert abs(logit(got) - logit(want)).max() < 0.5


def conversation(question: str, *earlier: str) -> str:
    """A `semantic` context verify text: the question, then earlier turns newest first."""
    return TURN_SEP.join([question, *earlier])


@pytest.mark.parametrize(("cached", "new", "reason"), [
    # facts moved between sentences, a unit on one side, small talk adding a number: no clash
    (conversation("how much to leave now?", "user: 6 months into an 18 month plan at £30"),
     conversation("What would leaving cost?", "user: £30/month, 18-month term, six months in"),
     None),
    (conversation("and with TV?", "assistant: Fibre 150 is £26 a month"),
     conversation("and with TV?", "assistant: Fibre 150 is £26 a month.",
                  "user: hi! 3 kids here, busy day"), None),
    # another plan or price in the context, another flight, or a clash in the questions
    (conversation("and with TV?", "assistant: Fibre 150 is £26 a month"),
     conversation("and with TV?", "assistant: Fibre 900 is £45 a month"), "numbers"),
    (conversation("is it on time?", "user: I'm on BA117"),
     conversation("is it on time?", "user: I'm on BA171"), "identifiers"),
    (conversation("cancel it", "user: my plan"), conversation("don't cancel it", "user: my plan"),
     "negation"),
    # another plan named on each side; a name only one side says (small talk, a detail left
    # out) or one said in another form (plural, hyphenated, lower case) is no clash
    (conversation("how many users can i add?", "user: we're on the Taskwell Starter plan"),
     conversation("how many users can i add?", "user: we're on the Taskwell Business plan"),
     "names"),
    (conversation("does it have downloads?", "user: what's the cheapest Flixora plan?"),
     conversation("does it have downloads?",
                  "user: Morning! Back from Leeds. What's the cheapest Flixora plan?"), None),
    (conversation("which fee applies?", "assistant: two ATMs charge, the Flexible-Rate card not",
                  "user: I use Harbour cards"),
     conversation("which fee applies?", "assistant: an atm charges, the flexible rate card not",
                  "user: I use harbour cards"), None),
    (conversation("is it open?", "user: the Leeds gym, Tuesday"),
     conversation("is it open?", "user: the Leeds gym on Tuesdays"), None),
])
def test_conversations_clash_on_facts_named_anywhere_in_any_order(cached, new, reason):
    found = conversation_clash(cached, new)
    assert (found.reason if found else None) == reason


def test_conversations_of_another_length_are_another_context_and_whole_ones_are_read_once():
    calls = []

    class Scorer:
        config = PairConfig(6, threshold=0.9, operating_points={}, conversation_threshold=0.5)

        def score(self, pairs, at_least=None):
            calls.append(pairs)
            return [0.7 for _ in pairs]

    g = Guard(model=Scorer())
    short, long_ = conversation("cancel it", "user: my gym"), conversation(
        "cancel it", "assistant: ok", "user: my gym")
    assert g.check(short, long_).reason == "context"
    verdict = g.check(conversation("cancel it", "user: my gym plan"),
                      conversation("Cancel it please", "user: the gym membership"))
    assert (verdict.ok, verdict.reason, verdict.score) == (True, "verified", 0.7)  # 0.7 >= 0.5
    assert calls == [[("cancel it\nuser: my gym plan", "Cancel it please\nuser: the gym membership")]]
    assert not g.check("cancel it", "end it now").ok  # a question needs 0.9
