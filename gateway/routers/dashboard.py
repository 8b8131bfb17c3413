"""`GET /dashboard`: the gateway's own live page, and what it reads.

    GET  /dashboard           the page (the login form while the admin key is needed)
    POST /dashboard/login     form field `key`: the admin key -> session cookie, back to the page
    POST /dashboard/logout    ends the session
    GET  /dashboard/data      the metrics as compact JSON (gateway/dashboard/data.py);
                              `?since=T` adds the per-second samples taken after T
    GET  /dashboard/static/F  the page's script, styles and the vendored uPlot

Access is the admin API's (gateway/dashboard/access.py): open on an open gateway, else the
admin key in a header or the session cookie. The assets hold no data and are public.
"""

from __future__ import annotations

import html
from importlib import resources
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gateway.dashboard.access import check_dashboard_access, end_session, start_session
from gateway.deps import AuthDep, DashboardAccess, DashboardData
from openai_api import APIError, read_body

router = APIRouter(prefix="/dashboard", tags=["dashboard"])

STATIC = resources.files("gateway.dashboard") / "static"
ASSETS = {  # name -> media type; each read once, on its first request
    "metrics.js": "text/javascript; charset=utf-8",
    "view.js": "text/javascript; charset=utf-8",
    "tables.js": "text/javascript; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
}
PAGE_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
LOGIN_BODY_LIMIT = 4096
_cache: dict[str, bytes] = {}


def _asset(name: str) -> bytes:
    if name not in _cache:
        path = STATIC / "vendor" / name if name.startswith("uPlot") else STATIC / name
        _cache[name] = path.read_bytes()
    return _cache[name]


def _refusal(e: APIError, tried: bool) -> HTMLResponse:
    """The login form (with a note when a key was `tried` and refused); where no key would
    do (API keys but no admin key), the form says so."""
    if e.code == "admin_disabled":
        message = "The dashboard is off: this gateway has API keys but no auth.admin_key."
    else:
        message = "Wrong admin key." if tried else ""
    return _login_page(message, e.status)


def _login_page(message: str, status: int) -> HTMLResponse:
    text = _asset("login.html").decode().replace("{{message}}", html.escape(message))
    return HTMLResponse(text, status_code=status, headers=PAGE_HEADERS)


@router.get("")
async def page(request: Request, auth: AuthDep) -> Response:
    try:
        check_dashboard_access(request, auth)
    except APIError as e:
        return _refusal(e, tried=False)
    return HTMLResponse(_asset("index.html"), headers=PAGE_HEADERS)


@router.post("/login")
async def login(request: Request, auth: AuthDep) -> Response:
    form = parse_qs((await read_body(request, LOGIN_BODY_LIMIT)).decode("utf-8", "replace"))
    key = (form.get("key") or [""])[0]
    try:
        auth.check_admin_key(key)
    except APIError as e:
        return _refusal(e, tried=True)
    response = RedirectResponse("/dashboard", status_code=303)
    if auth.admin_key:
        start_session(response, request, auth.admin_key)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    response = RedirectResponse("/dashboard", status_code=303)
    end_session(response, request)
    return response


@router.get("/data")
async def data(_: DashboardAccess, feed: DashboardData, since: float | None = None) -> Response:
    return Response(feed.body(since), media_type="application/json",
                    headers={"cache-control": "no-store"})


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in ASSETS:
        raise APIError(404, f"No dashboard asset {name!r}", code="not_found")
    return Response(_asset(name), media_type=ASSETS[name],
                    headers={"cache-control": "public, max-age=3600",
                             "x-content-type-options": "nosniff"})
