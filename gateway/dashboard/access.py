"""Who may read the dashboard: the admin key, as for `/admin/*`, sent in a header or held by
a session cookie that the login form sets. Never in the URL, which ends up in logs.

The cookie holds `session_token(admin_key)`, an HMAC of the key rather than the key itself,
so a stolen cookie does not give the admin API away, and changing the key ends every session.
It is HttpOnly (page scripts cannot read it), SameSite=Strict, limited to `/dashboard`, and
Secure when the page is served over HTTPS.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import HTTPConnection
from starlette.responses import Response

from gateway.auth import Authenticator, header_key

COOKIE = "headstart_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_MAX_AGE_S = 12 * 3600


def session_token(admin_key: str) -> str:
    return hmac.new(admin_key.encode(), b"headstart dashboard session", hashlib.sha256).hexdigest()


def has_session(conn: HTTPConnection, auth: Authenticator) -> bool:
    """True when the request carries a valid session cookie."""
    cookie = conn.cookies.get(COOKIE)
    return bool(cookie and auth.admin_key
                and hmac.compare_digest(cookie.encode(), session_token(auth.admin_key).encode()))


def check_dashboard_access(conn: HTTPConnection, auth: Authenticator) -> None:
    """Pass, or raise the admin API's 401/403 (`Authenticator.check_admin_key`). Open when
    the whole gateway is (no API keys, no admin key)."""
    if not has_session(conn, auth):
        auth.check_admin_key(header_key(conn))


def start_session(response: Response, conn: HTTPConnection, admin_key: str) -> None:
    response.set_cookie(COOKIE, session_token(admin_key), max_age=SESSION_MAX_AGE_S,
                        path=COOKIE_PATH, httponly=True, samesite="strict",
                        secure=_https(conn))


def end_session(response: Response, conn: HTTPConnection) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                           secure=_https(conn))


def _https(conn: HTTPConnection) -> bool:
    return conn.url.scheme == "https" or conn.headers.get("x-forwarded-proto") == "https"
