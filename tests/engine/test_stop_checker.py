"""StopChecker: stop strings across delta boundaries, stop ids, EOS, max_tokens."""

from __future__ import annotations

from engine.sampling_params import SamplingParams
from engine.stop_checker import StopChecker


def feed_all(checker: StopChecker, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for piece in pieces:
        text, stopped = checker.feed_text(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + checker.flush(), False


def test_no_stop_strings_passes_text_through() -> None:
    checker = StopChecker(SamplingParams(), [2], 100)
    assert checker.feed_text("hello") == ("hello", False)


def test_stop_string_split_across_deltas_is_never_emitted() -> None:
    checker = StopChecker(SamplingParams(stop=["<END>"]), [], 100)
    emitted = []
    for piece in ["Hi the", "re <E", "N", "D> tail"]:
        text, stopped = checker.feed_text(piece)
        emitted.append(text)
        if stopped:
            break
    assert emitted == ["Hi the", "re ", "", ""] and stopped
    assert "".join(emitted) == "Hi there "


def test_held_text_released_when_it_is_not_a_stop() -> None:
    checker = StopChecker(SamplingParams(stop=["<END>"]), [], 100)
    assert checker.feed_text("a <E") == ("a ", False)
    assert checker.feed_text("X") == ("<EX", False)


def test_earliest_of_several_stop_strings_wins() -> None:
    checker = StopChecker(SamplingParams(stop=["world", "lo"]), [], 100)
    assert feed_all(checker, ["hello world"]) == ("hel", True)


def test_flush_returns_held_suffix_at_length_finish() -> None:
    checker = StopChecker(SamplingParams(stop=["###"]), [], 100)
    assert checker.feed_text("answer #") == ("answer ", False)
    assert checker.flush() == "#"
    assert checker.flush() == ""


def test_stop_ids_and_eos() -> None:
    checker = StopChecker(SamplingParams(stop_token_ids=[5]), [2], 100)
    assert checker.is_stop_token(5) and checker.is_stop_token(2)
    assert not checker.is_stop_token(3)
    ignoring = StopChecker(SamplingParams(ignore_eos=True, stop_token_ids=[5]), [2], 100)
    assert not ignoring.is_stop_token(2) and ignoring.is_stop_token(5)


def test_length_by_max_tokens_or_model_len() -> None:
    checker = StopChecker(SamplingParams(max_tokens=3), [2], max_model_len=10)
    assert not checker.length_reached(num_output_tokens=2, num_tokens=8)
    assert checker.length_reached(num_output_tokens=3, num_tokens=8)
    assert checker.length_reached(num_output_tokens=1, num_tokens=10)
