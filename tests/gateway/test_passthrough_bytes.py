"""What crosses the hop on a passthrough route, byte for byte: the client's request goes
upstream as written unless the gateway must change it, the upstream's whole answer comes back
as sent unless it must be relabelled, and an answer that is not a finished OpenAI answer is
a 502 naming the upstream, never passed on."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say hi."}]


def answer(model: str, *, finish: str | None = "stop", usage: bool = True) -> bytes:
    """A whole chat answer as an upstream might write it: its own spacing, a vendor field."""
    body = {"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": finish}],
            "vendor_extra": {"kept": True}}
    if usage:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6,
                         "prompt_tokens_details": {"cached_tokens": 4}}
    return json.dumps(body, indent=1).encode()


USAGE = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}


def sse_chunk(model: str, choices: list, usage: dict | None = None) -> bytes:
    """One chunk's frame as an upstream might write it: its own spacing, a vendor field."""
    return b"data: " + json.dumps({"id": "chatcmpl-up", "object": "chat.completion.chunk",
                                   "created": 1, "model": model, "choices": choices,
                                   "usage": usage, "vendor_extra": 1}).encode() + b"\n\n"


def frames(model: str) -> bytes:
    """A one-token streamed answer with its usage chunk, as SSE."""
    return (sse_chunk(model, [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}])
            + sse_chunk(model, [{"index": 0, "delta": {}, "finish_reason": "stop"}])
            + sse_chunk(model, [], USAGE)
            + b"data: [DONE]\n\n")


@pytest.fixture
def gateway_url(start_gateway, scripted_upstream) -> str:
    """Route `renamed` sends model `upstream-name`, route `always` streams every request;
    every other name passes as it is."""
    url = scripted_upstream.base_url
    return start_gateway({
        "upstreams": {
            "scripted": {"kind": "openai", "base_url": url},
            "renaming": {"kind": "openai", "base_url": url, "model": "upstream-name"},
            "streaming": {"kind": "openai", "base_url": url, "always_stream": True},
        },
        "routes": [{"name": "renamed", "models": ["renamed"], "upstream": "renaming"},
                   {"name": "always", "models": ["always"], "upstream": "streaming"},
                   {"name": "passthrough", "models": ["*"], "upstream": "scripted"}],
    })


def post(url: str, raw: bytes) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", content=raw,
                      headers={"content-type": "application/json"})


def test_an_unchanged_request_goes_upstream_as_the_client_wrote_it(gateway_url,
                                                                    scripted_upstream):
    scripted_upstream.answer = (200, answer("m"))
    raw = b'{ "temperature": 0,  "model": "m", "messages": [{"role": "user", "content": "Hi"}],' \
          b' "vendor_param": 3, "stream": false }'
    assert post(gateway_url, raw).status_code == 200
    assert scripted_upstream.requests == [("/v1/chat/completions", raw)]


def test_a_stream_goes_upstream_as_written_with_the_usage_option_first(gateway_url,
                                                                      scripted_upstream):
    scripted_upstream.answer = (200, frames("m"))
    raw = b'  {"model": "m", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}'
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "hi"
    scripted_upstream.requests.clear()
    with httpx.stream("POST", gateway_url + "/v1/chat/completions", content=raw,
                      headers={"content-type": "application/json"}) as r:
        text = r.read().decode()
    assert r.status_code == 200 and '"content": "hi"' in text and text.endswith("[DONE]\n\n")
    assert scripted_upstream.requests == [
        ("/v1/chat/completions", b'  {"stream_options":{"include_usage":true},' + raw[3:])]


STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


@pytest.mark.parametrize(("fields", "model", "sent"), [
    ({"cache": {"no_store": True}}, "m", {}),  # the gateway's own field
    ({"session_id": "s1"}, "m", {}),  # travels as a header
    ({"n": 1}, "m", {}),  # the default, which some servers reject
    ({"user": None}, "m", {}),  # a null
    ({}, "renamed", {"model": "upstream-name"}),  # the route names another model
    ({"stream": True, "stream_options": {"include_usage": False}}, "m", STREAMED),
    ({}, "always", STREAMED),  # unstreamed by the client, streamed by the upstream's config
])
def test_a_request_the_gateway_must_change_is_rendered_again(gateway_url, scripted_upstream,
                                                             fields, model, sent):
    upstream_model = "upstream-name" if model == "renamed" else model
    streamed = "stream_options" in sent
    scripted_upstream.answer = (200, frames(upstream_model) if streamed
                                else answer(upstream_model))
    body = {"model": model, "messages": MESSAGES, "temperature": 0, **fields}
    assert post(gateway_url, json.dumps(body).encode()).status_code == 200
    [(_, upstream_got)] = scripted_upstream.requests
    assert json.loads(upstream_got) == {"model": model, "messages": MESSAGES, "temperature": 0,
                                        **sent}


def test_a_finished_answer_under_the_clients_model_comes_back_byte_for_byte(gateway_url,
                                                                           scripted_upstream):
    scripted_upstream.answer = (200, answer("m"))
    r = post(gateway_url, json.dumps({"model": "m", "messages": MESSAGES}).encode())
    assert r.status_code == 200 and r.content == answer("m")
    assert r.headers["x-headstart-upstream"] == "scripted"


def streamed(url: str, model: str, **fields: object) -> bytes:
    """The SSE body the gateway writes for a streamed request."""
    body = {"model": model, "messages": MESSAGES, "stream": True, **fields}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        return r.read()


def test_stream_frames_come_back_byte_for_byte(gateway_url, scripted_upstream):
    scripted_upstream.answer = (200, frames("m"))
    assert streamed(gateway_url, "m", stream_options={"include_usage": True}) == frames("m")
    # unasked, the usage chunk stays behind; the other frames still pass as they came
    assert streamed(gateway_url, "m") == frames("m").replace(sse_chunk("m", [], USAGE), b"")


def test_stream_frames_the_gateway_changes_are_rendered_again(gateway_url, scripted_upstream):
    finish = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    scripted_upstream.answer = (200, sse_chunk("m", finish, USAGE) + b"data: [DONE]\n\n")
    [sent, done] = streamed(gateway_url, "m").split(b"\n\n", 1)
    chunk = json.loads(sent.removeprefix(b"data: "))
    assert chunk["usage"] is None and chunk["choices"][0]["finish_reason"] == "stop"
    assert "vendor_extra" not in chunk and done == b"data: [DONE]\n\n"  # rendered: unasked usage
    scripted_upstream.answer = (200, frames("upstream-name"))
    body = streamed(gateway_url, "renamed")
    models = {json.loads(f.removeprefix(b"data: "))["model"]
              for f in body.split(b"\n\n") if f.startswith(b"data: {")}
    assert models == {"renamed"} and b"upstream-name" not in body  # relabelled


@pytest.mark.parametrize("usage", [True, False])
def test_an_answer_under_another_model_name_is_relabelled(gateway_url, scripted_upstream,
                                                          usage):
    scripted_upstream.answer = (200, answer("upstream-name", usage=usage))
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="renamed", messages=MESSAGES)
    assert reply.model == "renamed" and reply.choices[0].message.content == "hi"
    assert reply.usage.prompt_tokens == (5 if usage else 0)


@pytest.mark.parametrize(("body", "says"), [
    (answer("m", finish=None), "ended without a finish reason"),
    (b"<html>oops</html>", "unexpected answer: <html>oops</html>"),
    (b'{"error": {"message": "overheated"}}', "error in the answer: overheated"),
])
def test_an_answer_that_is_not_a_finished_one_is_a_502(gateway_url, scripted_upstream, body,
                                                       says):
    scripted_upstream.answer = (200, body)
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="m", messages=MESSAGES)
    assert e.value.status_code == 502
    assert "upstream 'scripted'" in e.value.message and says in e.value.message


def test_each_decomposed_part_goes_upstream_as_a_request_of_its_own(start_gateway,
                                                                   scripted_upstream):
    """A part is a request the gateway made: never the client's bytes, which ask it all."""
    url = start_gateway({
        "upstreams": {"scripted": {"kind": "openai", "base_url": scripted_upstream.base_url}},
        "routes": [{"name": "split", "models": ["split"], "upstream": "scripted",
                    "decompose": {"enabled": True}, "cache": {"exact": {"enabled": True}}}],
    })
    scripted_upstream.answer = (200, answer("split"))
    asked = "Answer briefly:\n1. What is 3 + 3?\n2. Name a yellow fruit."
    raw = json.dumps({"model": "split", "messages": [{"role": "user", "content": asked}]})
    r = post(url, raw.encode())
    assert r.status_code == 200 and r.headers["x-headstart-transforms"] == "decompose:2"
    sent = [json.loads(body)["messages"][-1]["content"] for _, body in scripted_upstream.requests]
    assert len(sent) == 2 and asked not in sent
    assert any("3 + 3" in s and "fruit" not in s for s in sent)
    assert any("fruit" in s and "3 + 3" not in s for s in sent)
