"""`bench.experiments.gateway_overhead`: the gateway running the engine in its own process
(`--bundled-engine`), on a passthrough route, answering like the engine server it is
compared with; the raw-socket timing of the `stream-wire` mode."""

import openai
import pytest

from bench.experiments.gateway_overhead import MODEL, WireClient, main, measure, start_headstart
from tests.gateway.conftest import GatewayThread


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


def test_wire_mode_times_each_paths_first_frame_on_one_socket(canned):
    gateway = GatewayThread({
        "upstreams": {"canned": {"kind": "openai", "base_url": canned.base_url + "/v1"}},
        "routes": [{"name": "r", "models": ["*"], "upstream": "canned"}]}).start()
    try:
        paths = {"direct": (canned.base_url, None), "gateway": (gateway.base_url, None)}
        result = measure(paths, 5, "stream-wire")
        assert result["requests"] == 5
        assert 1 <= result["direct"]["p50_ms"] < 1000  # the canned upstream waits 1 ms
        assert result["gateway"]["p50_ms"] >= 1
        assert "added_p50_ms" in result["gateway"] and "added_p50_ms" not in result["direct"]
        wire = WireClient(gateway.base_url)
        try:
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
            assert wire.first_frame(body) > 0
            assert wire.first_frame(body) > 0  # the same socket, kept alive
            with pytest.raises(RuntimeError, match="not a 200 stream.*HTTP/1.1 400"):
                wire.first_frame({"model": "m", "messages": []})
        finally:
            wire.close()
    finally:
        gateway.stop()
