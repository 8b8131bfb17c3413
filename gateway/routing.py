"""Which route serves a request: by the path prefix `/r/{route}/v1/...`, else by model glob.

Globs are matched in config order and the first match wins, so put specific routes first.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from gateway.config import GatewayConfig, RouteConfig
from openai_api import APIError

_GLOB_CHARS = set("*?[")


class RouteTable:
    """The routes of one config, looked up by model name or route name."""

    def __init__(self, config: GatewayConfig) -> None:
        self.routes = list(config.routes)
        self._by_name = {r.name: r for r in self.routes}
        self._resolved: dict[str, RouteConfig] = {}  # model name -> route, bounded memo

    def resolve(self, model: str, route_name: str | None = None) -> RouteConfig:
        """The route for this request; 404 (OpenAI-shaped) when none matches."""
        if route_name is not None:
            route = self._by_name.get(route_name)
            if route is None:
                raise APIError(404, f"route {route_name!r} does not exist", code="route_not_found")
            return route
        route = self._resolved.get(model)
        if route is not None:
            return route
        for route in self.routes:  # first match wins, literal names and globs alike
            if any(fnmatchcase(model, p) for p in route.models):
                if len(self._resolved) < 4096:
                    self._resolved[model] = route
                return route
        raise APIError(
            404,
            f"The model {model!r} does not exist; GET /v1/models lists the served models",
            param="model",
            code="model_not_found",
        )

    def model_names(self, route_name: str | None = None) -> list[str]:
        """Model names clients can send: every route's non-glob names (a route's own name if
        it only has globs)."""
        routes = self.routes if route_name is None else [self.resolve("", route_name)]
        names: list[str] = []
        for route in routes:
            literal = [p for p in route.models if not _GLOB_CHARS & set(p)]
            for name in literal or [route.name]:
                if name not in names:
                    names.append(name)
        return names
