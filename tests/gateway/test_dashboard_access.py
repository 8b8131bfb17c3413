"""Who may see `/dashboard`, over real HTTP: the admin key in a header or the session cookie
the login form sets, never in the query string; open only on an open gateway; off when the
gateway has API keys but no admin key. And the page's assets come from the package."""

from __future__ import annotations

import tomllib

import httpx
import pytest

from gateway.config import ConfigError, GatewayConfig
from gateway.dashboard.access import COOKIE, session_token
from tests.gateway.conftest import GatewayThread
from tests.support.processes import REPO, free_port

ADMIN = "the-admin-key"
TEAM = "a-team-key"


def config(auth: dict | None, **extra) -> dict:
    return {"auth": auth or {},
            "upstreams": {"u": {"kind": "openai",
                                "base_url": f"http://127.0.0.1:{free_port()}/v1"}},
            "routes": [{"name": "r", "models": ["m"], "upstream": "u"}], **extra}


@pytest.fixture(scope="module")
def guarded():
    server = GatewayThread(config({"admin_key": ADMIN,
                                   "keys": [{"key": TEAM, "tenant": "t"}]})).start()
    yield server.base_url
    server.stop()


def test_without_a_session_the_page_is_the_login_form(guarded):
    r = httpx.get(guarded + "/dashboard")
    assert r.status_code == 401
    assert '<form method="post" action="/dashboard/login" id="login">' in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("how", [{"params": {"api_key": ADMIN}}, {"params": {"key": ADMIN}},
                                 {"headers": {"Authorization": f"Bearer {TEAM}"}}, {}])
def test_data_refuses_the_query_string_and_other_keys(guarded, how):
    r = httpx.get(guarded + "/dashboard/data", **how)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_admin_key"


@pytest.mark.parametrize("header", [{"Authorization": f"Bearer {ADMIN}"}, {"x-api-key": ADMIN}])
def test_data_takes_the_admin_key_in_a_header(guarded, header):
    r = httpx.get(guarded + "/dashboard/data", headers=header)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    assert r.json()["guarded"] is True


def test_login_sets_an_httponly_session_cookie_not_the_key(guarded):
    with httpx.Client(base_url=guarded) as client:
        r = client.post("/dashboard/login", data={"key": ADMIN})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={session_token(ADMIN)};")
        assert ADMIN not in cookie
        for attribute in ("HttpOnly", "Path=/dashboard", "SameSite=strict", "Max-Age=43200"):
            assert attribute in cookie
        assert "Secure" not in cookie  # plain HTTP here; set behind HTTPS
        page = client.get("/dashboard")
        assert page.status_code == 200 and 'id="routes"' in page.text
        assert client.get("/dashboard/data").status_code == 200
        r = client.post("/dashboard/logout")
        assert r.status_code == 303 and 'Max-Age=0' in r.headers["set-cookie"]
        assert client.get("/dashboard/data").status_code == 401


def test_a_forged_cookie_is_refused(guarded):
    r = httpx.get(guarded + "/dashboard/data", cookies={COOKIE: session_token("guess")})
    assert r.status_code == 401


def test_a_wrong_key_shows_the_form_again_with_a_note(guarded):
    r = httpx.post(guarded + "/dashboard/login", data={"key": "wrong"})
    assert r.status_code == 401 and "set-cookie" not in r.headers
    assert '<p class="error" id="login-error">Wrong admin key.</p>' in r.text


def test_https_sessions_are_secure_cookies(guarded):
    r = httpx.post(guarded + "/dashboard/login", data={"key": ADMIN},
                   headers={"x-forwarded-proto": "https"})
    assert "Secure" in r.headers["set-cookie"]


def test_api_keys_without_an_admin_key_turn_it_off(start_gateway):
    base = start_gateway(config({"keys": [{"key": TEAM, "tenant": "t"}]}))
    r = httpx.get(base + "/dashboard")
    assert r.status_code == 403 and "The dashboard is off" in r.text
    r = httpx.get(base + "/dashboard/data", headers={"Authorization": f"Bearer {TEAM}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"


def test_an_open_gateway_shows_it_to_anyone_with_its_slo(start_gateway):
    base = start_gateway(config(None, dashboard={"slo_ms": 450, "refresh_s": 2}))
    assert httpx.get(base + "/dashboard").status_code == 200
    data = httpx.get(base + "/dashboard/data").json()
    assert (data["guarded"], data["slo_ms"], data["refresh_s"]) == (False, 450, 2)
    assert data["routes"] == [{"name": "r", "upstream": "u", "fallback": None, "cached": False}]


@pytest.mark.parametrize("bad", [{"slo_ms": 0}, {"refresh_s": 0.01}, {"slo": 700}])
def test_bad_dashboard_settings_stop_the_config(bad):
    with pytest.raises(ConfigError, match="dashboard"):
        GatewayConfig.from_dict(config(None, dashboard=bad))


@pytest.mark.parametrize("name, kind, opening", [
    ("uPlot.iife.min.js", "text/javascript", b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */"),
    ("uPlot.min.css", "text/css", b".uplot"),
    ("metrics.js", "text/javascript", b"// Reading /dashboard/data"),
    ("view.js", "text/javascript", b"// What the page shows"),
    ("tables.js", "text/javascript", b"// The tables, all since"),
    ("dashboard.js", "text/javascript", b"// The live page"),
    ("dashboard.css", "text/css", b"/* Headstart dashboard"),
])
def test_assets_come_from_the_package(guarded, name, kind, opening):
    r = httpx.get(f"{guarded}/dashboard/static/{name}")  # public: they hold no data
    assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert r.content.startswith(opening)


def test_only_the_listed_assets_are_served(guarded):
    for name in ("login.html", "index.html", "nothing.js", "vendor"):
        r = httpx.get(f"{guarded}/dashboard/static/{name}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(f"{guarded}/dashboard/static/..%2F__init__.py")  # no route: the router's 404
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_every_asset_ships_as_package_data():
    """A wheel (not only an editable install) carries the page: pyproject's globs cover
    every file under gateway/dashboard/static."""
    package = REPO / "gateway" / "dashboard"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["gateway.dashboard"]
    files = {p.relative_to(package).as_posix() for p in (package / "static").rglob("*")
             if p.is_file()}
    shipped = {p.relative_to(package).as_posix() for g in globs for p in package.glob(g)}
    assert len(files) >= 9 and shipped == files
