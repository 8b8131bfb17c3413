"""Key canonicalisation: formatting never changes a key, anything answer-changing does."""

import json

from cache.keys import (
    TURN_SEP,
    CacheRequest,
    answer_fits,
    answer_tokens,
    context_hash,
    counted,
    exact_key,
    partition_key,
    query_text,
    verify_text,
)


def req(**kw) -> CacheRequest:
    base = dict(route="r", model="m", messages=[{"role": "user", "content": "hi"}],
                params={"temperature": 0})
    base.update(kw)
    return CacheRequest(**base)


def test_field_order_and_json_whitespace_do_not_change_the_key():
    a = json.loads('{"temperature": 0, "top_p": 0.9, "stop": ["x"]}')
    b = json.loads('{ "stop" : [ "x" ],\n "top_p":0.9,"temperature":0 }')
    msgs_a = [{"role": "user", "content": "hi", "name": None}]
    msgs_b = [{"content": "hi", "role": "user"}]
    assert exact_key(req(params=a, messages=msgs_a)) == exact_key(req(params=b, messages=msgs_b))


def test_transport_fields_and_defaults_do_not_change_the_key():
    plain = exact_key(req(params={"temperature": 0}))
    assert plain == exact_key(req(params={"temperature": 0, "stream": True, "user": "u",
                                          "stream_options": {"include_usage": True},
                                          "session_id": "s", "cache": {"no_store": True},
                                          "n": 1, "logprobs": None}))
    assert exact_key(req(params={"max_tokens": 9})) == exact_key(
        req(params={"max_completion_tokens": 9}))
    assert exact_key(req(params={"stop": "x"})) == exact_key(req(params={"stop": ["x"]}))


def test_everything_answer_changing_changes_the_key():
    base = exact_key(req())
    variants = [
        req(params={"temperature": 0.5}), req(params={"temperature": 0, "seed": 1}),
        req(params={"temperature": 0, "tools": [{"type": "function"}]}),
        req(params={"temperature": 0, "tool_choice": "none"}),
        req(params={"temperature": 0, "response_format": {"type": "json_object"}}),
        req(params={"temperature": 0, "stop": ["."]}),
        req(params={"temperature": 0, "some_new_field": 1}),
        req(messages=[{"role": "user", "content": "hi "}]),
        req(messages=[{"role": "system", "content": "hi"}]),
        req(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]),
        req(tenant="a"), req(namespace="n"), req(route="r2"), req(model="m2"),
        req(kind="completion"),
    ]
    keys = {exact_key(v) for v in variants}
    assert base not in keys and len(keys) == len(variants)


def test_partition_ignores_sampling_but_not_context_or_shape():
    assert partition_key(req(params={"temperature": 0})) == partition_key(
        req(params={"temperature": 0.2, "max_tokens": 5, "seed": 3}))
    assert partition_key(req()) != partition_key(req(params={"response_format": {"t": 1}}))
    assert partition_key(req()) != partition_key(req(tenant="b"))
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "about X"},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "cancel it"}]
    other = convo[:1] + [{"role": "user", "content": "about Y"}] + convo[2:]
    assert query_text(req(messages=convo)) == query_text(req(messages=other)) == "cancel it"
    assert partition_key(req(messages=convo)) != partition_key(req(messages=other))
    # context: system keeps only the system prompt; none ignores the history
    assert partition_key(req(messages=convo), "system") == partition_key(
        req(messages=other), "system")
    assert context_hash(req(messages=convo), "none") == context_hash(req(), "none")


def test_query_text_is_the_last_user_turn_only():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert query_text(req(messages=[{"role": "user", "content": parts}])) == "ab"
    tool_last = [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]
    assert query_text(req(messages=tool_last)) is None
    assert query_text(req(kind="completion", messages=[], prompt="p")) == "p"


def test_a_long_turn_embeds_its_question_and_matches_its_document_exactly():
    """A pasted document then a question: the embedder would read only the document, so two
    questions about it would look the same. The document goes to the partition instead."""
    doc_a = "Document A\n\n" + "The red team ships on Mondays. " * 60
    doc_b = "Document B\n\n" + "The blue team ships on Fridays. " * 60

    def ask(doc: str, question: str, **kw) -> CacheRequest:
        return req(messages=[{"role": "user", "content": f"{doc}\n\n{question}"}], **kw)

    q1, q2 = "Question: when does it ship?", "Question: who ships?"
    assert query_text(ask(doc_a, q1)) == q1 and query_text(ask(doc_a, q2)) == q2
    assert partition_key(ask(doc_a, q1)) == partition_key(ask(doc_a, q2))
    assert partition_key(ask(doc_a, q1)) != partition_key(ask(doc_b, q1))
    # the document counts in every context mode, even "none"
    assert context_hash(ask(doc_a, q1), "none") != context_hash(ask(doc_b, q1), "none")
    short = req(messages=[{"role": "user", "content": "x"}])
    assert context_hash(req(), "none") == context_hash(short, "none")  # short turns: no doc
    # a long turn with no short last paragraph has nothing to embed: exact cache only
    assert query_text(req(messages=[{"role": "user", "content": doc_a.replace("\n", " ")}])) \
        is None
    assert query_text(ask(doc_a, "Question: " + "why? " * 300)) is None
    # completions: the prompt string is split the same way
    prompt = req(kind="completion", messages=[], prompt=f"{doc_a}\n\n{q1}")
    assert query_text(prompt) == q1
    assert partition_key(prompt) != partition_key(
        req(kind="completion", messages=[], prompt=f"{doc_b}\n\n{q1}"))


def test_the_length_limit_does_not_split_the_exact_key_but_must_fit_the_answer():
    assert exact_key(req(params={"temperature": 0, "max_tokens": 8})) == exact_key(req())
    answer = {"content": "Paris.", "usage": {"completion_tokens": 3}}
    assert answer_fits(answer, req(params={"max_tokens": 3}))
    assert answer_fits(answer, req(params={"max_completion_tokens": 100}))
    assert answer_fits(answer, req(params={}))
    assert not answer_fits(answer, req(params={"max_tokens": 2}))
    assert answer_tokens({"content": "x" * 41}) == 11  # no count (curated): 4 chars a token
    stored_with_a_limit = counted({"content": "x" * 41}, req(params={"max_tokens": 4}))
    assert answer_tokens(stored_with_a_limit) == 4  # the curator said it fits 4
    assert answer_tokens(counted({"content": "x" * 41}, req())) == 11


def test_route_wide_entries_have_one_scope_for_every_tenant():
    assert exact_key(req(tenant="a"), route_wide=True) == exact_key(req()) == exact_key(
        req(tenant="b"), route_wide=True)
    assert exact_key(req(tenant="a")) != exact_key(req())
    assert partition_key(req(tenant="a"), route_wide=True) == partition_key(req())


def test_semantic_context_matches_the_system_prompt_and_turn_count_and_verifies_the_turns():
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "about X"},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "cancel it"}]
    reworded = convo[:1] + [{"role": "user", "content": "regarding X"},
                            {"role": "assistant", "content": "sure"}] + convo[3:]
    assert partition_key(req(messages=convo), "semantic") == partition_key(
        req(messages=reworded), "semantic")
    assert partition_key(req(messages=convo), "semantic") != partition_key(
        req(messages=convo[:1] + convo[3:]), "semantic")  # one user turn fewer
    assert verify_text(req(messages=convo), "semantic").split(TURN_SEP) == [
        "cancel it", "assistant: ok", "user: about X"]
    assert verify_text(req(messages=convo), "full") == "cancel it"
