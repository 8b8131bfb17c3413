"""`bench.gateway_overhead --bundled-engine`: the gateway running the engine in its own
process, on a passthrough route, answering like the engine server it is compared with."""

import openai
import pytest

from bench.gateway_overhead import MODEL, main, start_headstart


def test_bundled_engine_gateway_answers_on_its_passthrough_route(tmp_path):
    gateway = start_headstart(None, tmp_path)
    try:
        assert "kind: engine" in (tmp_path / "bundled.yaml").read_text()
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "Reply with one word: ok."}]
        answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
        assert answer.model == MODEL and answer.choices[0].finish_reason == "length"
        assert answer.usage.completion_tokens == 1
        again = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, max_tokens=1)
        assert again.headers["x-cache"] == "bypass"  # no cache on the passthrough route
    finally:
        gateway.stop()


@pytest.mark.parametrize("other", [["--canned-upstream", "0"], ["--engine-url", "http://x"]])
def test_bundled_engine_needs_the_engine_the_bench_starts(other, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--bundled-engine", *other])
    assert exc.value.code == 2
    assert "--bundled-engine compares with the engine this starts" in capsys.readouterr().err
