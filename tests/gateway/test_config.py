"""Config loading: the DESIGN.md example, `${VAR}` expansion, defaults, and errors that name
the file, the key path and what is wrong."""

from __future__ import annotations

import textwrap

import pytest

from gateway.config import ConfigError, GatewayConfig, default_config, expand_env, load_config

DESIGN_EXAMPLE = """
redis: redis://localhost:6379/0
auth:
  admin_key: ${HEADSTART_ADMIN_KEY}
  keys:
    - {key: ${TEAM_A_KEY}, tenant: team-a}
upstreams:
  local:  {kind: engine, model: smollm2-135m-instruct}
  remote: {kind: openai, base_url: http://engine:8001/v1, api_key: ${ENGINE_KEY}}
  claude: {kind: litellm, model: anthropic/claude-3-5-haiku-latest}
routes:
  - name: support
    models: ["support", "support-*"]
    upstream: local
    fallback: remote
    timeout_s: 60
    cache:
      exact:    {enabled: true, ttl_s: 3600}
      semantic: {enabled: true, threshold: 0.90, ttl_s: 86400, max_temperature: 0.3}
    window:    {max_input_tokens: 2048, dropped: summarize}
    compress:  {enabled: true, min_tokens: 1500}
    decompose: {enabled: false}
"""


def write(tmp_path, text: str):
    path = tmp_path / "headstart.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_design_example_loads_with_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSTART_ADMIN_KEY", "adm")
    monkeypatch.setenv("TEAM_A_KEY", "ka")
    monkeypatch.delenv("ENGINE_KEY", raising=False)
    config = load_config(write(tmp_path, DESIGN_EXAMPLE))
    assert config.redis == "redis://localhost:6379/0"
    assert config.auth.admin_key == "adm"
    assert [(k.key, k.tenant) for k in config.auth.keys] == [("ka", "team-a")]
    assert config.upstreams["remote"].api_key == ""  # unset variable expands to ""
    assert config.upstreams["remote"].name == "remote"
    route = config.route("support")
    assert route.fallback == "remote" and route.timeout_s == 60
    assert route.cache.semantic.enabled and route.cache.semantic.threshold == 0.90
    assert route.window.max_input_tokens == 2048 and route.window.dropped == "summarize"
    assert route.compress.enabled and not route.decompose.enabled
    assert route.caching_enabled()


def test_unset_key_variable_drops_that_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TEAM_A_KEY", raising=False)
    monkeypatch.delenv("HEADSTART_ADMIN_KEY", raising=False)
    config = load_config(write(tmp_path, DESIGN_EXAMPLE))
    assert config.auth.keys == [] and config.auth.admin_key is None


def test_expand_env_default_and_nesting(monkeypatch):
    monkeypatch.setenv("A", "1")
    monkeypatch.delenv("B", raising=False)
    assert expand_env({"x": ["${A}-${B:-two}", 3]}) == {"x": ["1-two", 3]}


def test_embedded_default_serves_smollm2():
    config = default_config()
    assert config.upstreams["local"].kind == "engine"
    assert config.routes[0].models == ["smollm2-135m-instruct"]
    assert not config.routes[0].caching_enabled()
    assert config.limits.max_queue_s == 2.0  # make serve sheds what it cannot serve in time
    assert load_config(None) == config


@pytest.mark.parametrize("text, expected", [
    ("upstreams: {a: {kind: openai}}\nroutes: [{name: r, upstream: a}]",
     "upstreams.a: kind 'openai' needs base_url"),
    ("upstreams: {a: {kind: grpc}}\nroutes: [{name: r, upstream: a}]", "upstreams.a.kind"),
    ("upstreams: {a: {kind: litellm, model: x}}\nroutes: [{name: r, upstream: b}]",
     "routes.0.upstream: unknown upstream 'b'"),
    ("upstreams: {a: {kind: litellm, model: x}}\n"
     "routes: [{name: r, upstream: a, cache: {exact: {ttl_s: 0}}}]",
     "routes.0.cache.exact.ttl_s"),
    ("upstreams: {a: {kind: litellm, model: x}}\n"
     "routes: [{name: r, upstream: a, window: {dropped: explode}}]", "routes.0.window.dropped"),
    ("upstreams: {a: {kind: litellm, model: x}}\nroutes: [{name: r, upstream: a, typo: 1}]",
     "routes.0.typo: Extra inputs are not permitted"),
    ("upstreams: {a: {kind: litellm, model: x}}\n"
     "routes: [{name: r, upstream: a}, {name: r, upstream: a}]", "duplicate route name 'r'"),
    ("upstreams: {a: {kind: litellm, model: x}}\nroutes: [{name: 'a/b', upstream: a}]",
     "routes.0.name"),
    ("upstreams: {}\nroutes: []", "upstreams"),
    ("just a string", "the top level must be a mapping"),
    ("routes: [unclosed", "not valid YAML"),
])
def test_bad_config_names_file_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_from_dict_defaults():
    config = GatewayConfig.from_dict({
        "upstreams": {"u": {"kind": "openai", "base_url": "http://x/v1"}},
        "routes": [{"name": "r", "models": ["m*"], "upstream": "u"}],
    })
    assert config.limits.max_body_bytes == 4 * 1024 * 1024
    route = config.routes[0]
    assert route.timeout_s == 60 and route.total_timeout_s is None and route.fallback is None
    assert config.engine_upstream() is None
