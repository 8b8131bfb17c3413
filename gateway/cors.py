"""Requests from web pages on other origins (`cors:` in the config).

A browser asks first (an `OPTIONS` preflight: may this origin POST with these headers?) and
then lets the page read an answer only when it names the page's origin. With no `cors:`
section the gateway sends none of these headers and browsers keep other origins out, as
before. Starlette's `CORSMiddleware` does this for the FastAPI routes; the generation
endpoints run in front of FastAPI (`GatewayApp`), so they hand preflights to it and add the
answer's headers themselves (`CorsPolicy.wrap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.types import Message, Send

from gateway.config import CorsConfig

# what a page may read besides the simple headers: everything the gateway reports
EXPOSED = ["x-request-id", "x-cache", "x-cache-similarity", "x-headstart-transforms",
           "x-headstart-upstream", "server-timing"]


@dataclass(frozen=True)
class CorsPolicy:
    """The allowed origins (`*`: any)."""

    origins: frozenset[str]
    max_age_s: int

    @classmethod
    def from_config(cls, config: CorsConfig) -> CorsPolicy | None:
        """The policy, or None when no origin is allowed (no CORS headers at all)."""
        return cls(frozenset(config.allow_origins), config.max_age_s) if config.allow_origins \
            else None

    def allows(self, origin: str) -> bool:
        return "*" in self.origins or origin in self.origins

    def middleware_options(self) -> dict[str, Any]:
        """Starlette's `CORSMiddleware` options for this policy (preflights, FastAPI routes)."""
        return {"allow_origins": sorted(self.origins),
                "allow_methods": ["GET", "POST", "DELETE", "OPTIONS"], "allow_headers": ["*"],
                "expose_headers": EXPOSED, "max_age": self.max_age_s}

    def wrap(self, send: Send, origin: str | None) -> Send:
        """`send` with the headers that let a page from `origin` read the answer (errors
        included); `send` itself for a request from no origin or a refused one."""
        if origin is None or not self.allows(origin):
            return send
        allowed = b"*" if "*" in self.origins else origin.encode("latin-1")
        extra = [(b"access-control-allow-origin", allowed),
                 (b"access-control-expose-headers", ", ".join(EXPOSED).encode())]
        if allowed != b"*":
            extra.append((b"vary", b"origin"))

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        return send_with_cors
