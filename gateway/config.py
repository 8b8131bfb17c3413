"""The gateway's configuration: upstreams, routes with their policies, auth and limits.

One YAML file (`headstart serve --config FILE`) is loaded into `GatewayConfig`. `${VAR}` and
`${VAR:-default}` are read from the environment. A bad file fails at start with a
`ConfigError` naming the file, the key path and what is wrong. Without a file the embedded
default serves the bundled engine as `smollm2-135m-instruct`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.fleet.endpoints import check_spec
from gateway.policy import RoutePolicy

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_MAX_QUEUE_S = 2.0  # the embedded default's queue limit (`make serve`)


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointEntry(_Strict):
    """One replica of a fleet given with its own KV events address."""

    url: str
    kv_events: str | None = None


class UpstreamConfig(_Strict):
    """Where answers come from: the in-process engine, an OpenAI-compatible URL, or litellm."""

    kind: Literal["engine", "openai", "litellm"]
    name: str = ""  # filled from the key under `upstreams:`
    model: str | None = None  # the model name sent upstream; None = the client's model name
    path: str | None = None  # engine: weights (.gguf file or HF folder); None = bundled SmolLM2
    base_url: str | None = None  # openai: `http://host:port/v1`; litellm: the provider's api_base
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)  # openai: extra headers sent upstream
    max_connections: int = Field(default=100, ge=1)  # openai: connection pool size
    always_stream: bool = False  # openai: ask non-streamed requests streamed too
    engine: dict[str, Any] = Field(default_factory=dict)  # engine: EngineConfig overrides
    # openai with several replicas (README, "Fleet"): URLs or dns+http://name:port/v1
    endpoints: list[str | EndpointEntry] = Field(default_factory=list)
    balance: Literal["prefix", "session", "least_loaded", "round_robin", "random"] = "prefix"
    kv_events: str | None = None  # ZeroMQ address of each replica's KV events: tcp://{host}:5557
    tokenizer: str | None = None  # the replicas' model (.gguf or HF folder); default SmolLM2
    block_size: int = Field(default=16, ge=1)  # the replicas' KV block size
    health_interval_s: float = Field(default=1.0, gt=0)
    dns_interval_s: float = Field(default=5.0, gt=0)
    first_token_timeout_s: float | None = Field(default=None, gt=0)  # then try another replica
    # a prefill pool (`headstart engine --role prefill`): each request is read there, then
    # decoded by one of `endpoints` (`--role decode`) from the handed KV blocks; empty: off
    prefill_endpoints: list[str | EndpointEntry] = Field(default_factory=list)

    @field_validator("endpoints", "prefill_endpoints")
    @classmethod
    def _endpoint_urls(cls, v: list[str | EndpointEntry]) -> list[str | EndpointEntry]:
        for entry in v:
            check_spec(entry if isinstance(entry, str) else entry.url)
        return v

    @model_validator(mode="after")
    def _kind_needs(self) -> UpstreamConfig:
        if self.endpoints and (self.kind != "openai" or self.base_url):
            raise ValueError("endpoints apply to kind 'openai', instead of base_url")
        if self.kind == "openai" and not (self.base_url or self.endpoints):
            raise ValueError("kind 'openai' needs base_url (or endpoints)")
        if self.kind == "litellm" and not self.model:
            raise ValueError("kind 'litellm' needs model (a litellm provider string)")
        if self.kind != "openai" and self.always_stream:
            raise ValueError("always_stream applies to kind 'openai' only")
        if self.kind != "engine" and (self.path or self.engine):
            raise ValueError("path/engine options apply to kind 'engine' only")
        if self.prefill_endpoints:
            if not self.endpoints:
                raise ValueError("prefill_endpoints need endpoints: the decode pool "
                                 "(engines started with --role decode)")
            both = {_url(e) for e in self.endpoints} & {_url(e) for e in self.prefill_endpoints}
            if both:
                raise ValueError(f"{sorted(both)[0]} is in both endpoints and "
                                 "prefill_endpoints: a replica is either a decode or a "
                                 "prefill engine")
        return self


def _url(entry: str | EndpointEntry) -> str:
    return (entry if isinstance(entry, str) else entry.url).rstrip("/")


class RouteConfig(RoutePolicy):
    """A route: which client model names it serves, its upstream, and its policy sections."""

    name: str = Field(min_length=1)
    models: list[str] = Field(default_factory=list)  # globs matched against the request's model
    upstream: str
    fallback: str | None = None  # tried when the upstream fails before the first chunk
    timeout_s: float = Field(default=60.0, gt=0)  # the upstream's longest silence (see README)
    total_timeout_s: float | None = Field(default=None, gt=0)  # whole answer; None = no cap
    # engine prefix cache partitioned by tenant (`cache_salt`); None: `tenant` when API keys
    # exist, else `none`
    kv_isolation: Literal["tenant", "none"] | None = None
    max_queue_s: float | None = Field(default=None, gt=0)  # overrides limits.max_queue_s
    # the engine's request priority for this route's requests (vLLM's: lower first); None:
    # the client's own `priority`. Engines must schedule by priority for a non-zero one
    priority: int | None = Field(default=None, ge=-(2 ** 31), le=2 ** 31 - 1)

    @field_validator("name")
    @classmethod
    def _path_safe(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", v):
            raise ValueError("route names may use letters, digits, '.', '_' and '-' only")
        return v

    def caching_enabled(self) -> bool:
        return self.cache.exact.enabled or self.cache.semantic.enabled


class RateLimits(_Strict):
    """Requests and tokens per minute (either optional); see gateway/rate_limit.py."""

    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)


class ApiKey(RateLimits):
    key: str
    tenant: str = Field(min_length=1)


class AuthConfig(_Strict):
    admin_key: str | None = None  # guards /admin/* and /dashboard
    keys: list[ApiKey] = Field(default_factory=list)  # without keys the gateway is open
    tenants: dict[str, RateLimits] = Field(default_factory=dict)  # limits shared by a tenant's keys

    @field_validator("admin_key")
    @classmethod
    def _empty_is_unset(cls, v: str | None) -> str | None:
        return v or None

    @field_validator("keys")
    @classmethod
    def _drop_unset(cls, v: list[ApiKey]) -> list[ApiKey]:
        return [k for k in v if k.key]  # `${UNSET_VAR}` expands to "": that key is not offered


class LimitsConfig(_Strict):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)  # larger bodies get 413
    # expected queue wait past this -> 429 + Retry-After (gateway/admission.py); None: off
    max_queue_s: float | None = Field(default=None, gt=0)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)  # request line + headers; 431
    header_timeout_s: float = Field(default=10.0, gt=0)  # a request's headers must be in by then
    body_timeout_s: float = Field(default=30.0, gt=0)  # and its body by this after them; 408


class CorsConfig(_Strict):
    """Web pages on these origins may call the API (`*`: any); none without the section."""

    allow_origins: list[str] = Field(default_factory=list)
    max_age_s: int = Field(default=600, ge=0)  # how long a browser may reuse a preflight

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for origin in v:
            if origin != "*" and ("://" not in origin or origin.endswith("/")):
                raise ValueError(f"{origin!r} is not an origin: scheme://host[:port], or *")
        return v


class DashboardConfig(_Strict):
    """`GET /dashboard`: the TTFT target its charts and figures are judged against."""

    slo_ms: float = Field(default=700.0, gt=0)  # p95 TTFT target (the SLO line)
    refresh_s: float = Field(default=1.0, ge=0.2, le=60)  # how often the page polls


class ResponsesConfig(_Strict):
    """How long stored responses (`POST /v1/responses` with `store`) are kept: in Redis
    when `redis:` is set, else in the gateway's memory."""

    ttl_s: float = Field(default=30 * 24 * 3600.0, gt=0)  # OpenAI keeps them 30 days
    max_entries: int = Field(default=10_000, ge=1)  # in memory: the oldest go past this


class GatewayConfig(_Strict):
    redis: str | None = None  # cache store; in-process memory without it
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    cors: CorsConfig = Field(default_factory=CorsConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    upstreams: dict[str, UpstreamConfig] = Field(min_length=1)
    routes: list[RouteConfig] = Field(min_length=1)

    @field_validator("redis")
    @classmethod
    def _empty_redis(cls, v: str | None) -> str | None:
        return v or None

    @model_validator(mode="after")
    def _names_resolve(self) -> GatewayConfig:
        for name, up in self.upstreams.items():
            up.name = name
        seen: set[str] = set()
        for i, route in enumerate(self.routes):
            where = f"routes.{i}"
            if route.name in seen:
                raise ValueError(f"{where}.name: duplicate route name {route.name!r}")
            seen.add(route.name)
            judge = route.cache.semantic.judge
            for key, ref in (("upstream", route.upstream), ("fallback", route.fallback),
                             ("cache.semantic.judge.upstream", judge and judge.upstream)):
                if ref is not None and ref not in self.upstreams:
                    known = ", ".join(sorted(self.upstreams))
                    raise ValueError(f"{where}.{key}: unknown upstream {ref!r} (known: {known})")
        for i, route in enumerate(self.routes):
            _check_priority(route, self.upstreams, f"routes.{i}")
        engine_paths = {u.path for u in self.upstreams.values() if u.kind == "engine"}
        if len(engine_paths) > 1:
            raise ValueError("upstreams: all `kind: engine` upstreams must share one path")
        return self

    def route(self, name: str) -> RouteConfig | None:
        return next((r for r in self.routes if r.name == name), None)

    def engine_upstream(self) -> UpstreamConfig | None:
        return next((u for u in self.upstreams.values() if u.kind == "engine"), None)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<config>") -> GatewayConfig:
        """Validate a parsed config; errors name `source` and the key path."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the top level must be a mapping")
        try:
            return cls.model_validate(expand_env(data))
        except ValidationError as e:
            lines = []
            for err in e.errors():
                path = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                lines.append(f"{source}: {path}: {msg}" if path else f"{source}: {msg}")
            raise ConfigError("\n".join(lines)) from None


def _check_priority(route: RouteConfig, upstreams: dict[str, UpstreamConfig], where: str) -> None:
    """A non-zero route priority needs the in-process engine to schedule by priority (it
    refuses such requests otherwise): say so at start rather than 400 every request."""
    if not route.priority:
        return
    for key in ("upstream", "fallback"):
        up = upstreams.get(getattr(route, key) or "")
        if up is not None and up.kind == "engine" \
                and up.engine.get("scheduling_policy", "fcfs") != "priority":
            raise ValueError(f"{where}.priority: {route.priority} needs the engine upstream "
                             f"{up.name!r} to set engine: {{scheduling_policy: priority}}")


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PLACEHOLDER = re.compile(r"__headstart_env_(\d+)__")


def _env_value(name: str, default: str | None) -> str:
    return os.environ.get(name) or (default or "")


def expand_env(value: Any) -> Any:
    """`${VAR}` / `${VAR:-default}` in every string, recursively; unset expands to ""."""
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: _env_value(m.group(1), m.group(2)), value)
    if isinstance(value, dict):
        return {k: expand_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v) for v in value]
    return value


def parse_yaml(text: str) -> Any:
    """YAML where `${VAR}` may stand anywhere a scalar can, even unquoted inside a flow
    mapping (`{key: ${K}}`): references become plain placeholders for parsing, then values."""
    refs: list[tuple[str, str | None]] = []

    def hide(m: re.Match[str]) -> str:
        refs.append((m.group(1), m.group(2)))
        return f"__headstart_env_{len(refs) - 1}__"

    def reveal(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: _env_value(*refs[int(m.group(1))]), value)
        if isinstance(value, dict):
            return {k: reveal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [reveal(v) for v in value]
        return value

    return reveal(yaml.safe_load(_ENV_REF.sub(hide, text)))


def load_config(path: str | os.PathLike[str] | None) -> GatewayConfig:
    """The config in `path`, or the embedded default when `path` is None."""
    if path is None:
        return default_config()
    p = Path(path)
    try:
        data = parse_yaml(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    return GatewayConfig.from_dict(data, source=str(p))


def default_config() -> GatewayConfig:
    """The bundled engine in-process, served as `smollm2-135m-instruct`, caching off; a
    burst it cannot serve within 2 s is partly answered 429 rather than queued."""
    return GatewayConfig.from_dict(
        {
            "limits": {"max_queue_s": DEFAULT_MAX_QUEUE_S},
            "upstreams": {"local": {"kind": "engine", "model": DEFAULT_MODEL_NAME}},
            "routes": [
                {"name": DEFAULT_MODEL_NAME, "models": [DEFAULT_MODEL_NAME], "upstream": "local"}
            ],
        },
        source="<embedded default>",
    )
