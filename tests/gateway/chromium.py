"""Debian's headless Chromium, driven over the DevTools protocol (one websocket per page).

    with Chromium.launch(tmp_path) as browser:
        page = browser.page(width=1400, height=1000)
        page.goto("http://127.0.0.1:8000/dashboard")
        page.evaluate("document.title")
        page.screenshot(tmp_path / "page.png")

No Playwright and no browser download: the system's `chromium` (apt) with a fresh profile in
the test's tmp dir, on a DevTools port it picks itself. `Chromium.missing()` says why there
is none, for a skip.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--remote-allow-origins=*")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class CDPError(RuntimeError):
    pass


class Page:
    """One tab: commands and their answers over its own websocket (events, if any, are
    skipped)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    def send(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == msg_id:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise CDPError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0) -> Any:
        """Poll `expression` until it is truthy; its value. A poll that lands while the page
        navigates (a form posted, a reload) counts as not yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = self.evaluate(expression)
            except CDPError as e:
                if "navigated or closed" not in str(e) and "context was destroyed" not in str(e):
                    raise
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still falsy after {timeout_s}s: {expression}")
            time.sleep(0.05)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_loaded(url)

    def wait_loaded(self, url_prefix: str = "") -> None:
        self.wait_for(f"document.readyState === 'complete' && "
                      f"location.href.startsWith({json.dumps(url_prefix)})")

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type `text` as keyboard input would insert it."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def cookies(self, url: str) -> list[dict[str, Any]]:
        return self.send("Network.getCookies", urls=[url])["cookies"]

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path


class Chromium:
    """A headless Chromium process with its own profile directory."""

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self._sockets = ExitStack()  # each page's websocket, closed with the browser

    @staticmethod
    def missing() -> str | None:
        """Why no browser can run here (None: one can)."""
        if find_chromium() is None:
            return "Debian's chromium is not installed (`apt-get install chromium`; .ci/run does)"
        return None

    @classmethod
    def launch(cls, profile_dir: Path, timeout_s: float = 30.0) -> Chromium:
        profile_dir.mkdir(parents=True, exist_ok=True)
        exe = find_chromium()
        if exe is None:
            raise RuntimeError(cls.missing())
        port_file = profile_dir / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a reused profile's, from a browser long gone
        proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise RuntimeError(f"chromium did not start (exit {proc.poll()})")
            time.sleep(0.05)
        return cls(proc, int(port_file.read_text().split()[0]))

    def page(self, width: int = 1400, height: int = 1000) -> Page:
        """A new tab of `width` x `height` CSS pixels."""
        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank").json()
        # no domain is enabled, so no events queue up unread; no pings: a page can sit idle
        page = Page(self._sockets.enter_context(connect(
            target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, ping_interval=None,
            max_queue=None)))
        page.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        return page

    def close(self) -> None:
        """Stop the browser and every process it started (its own process group)."""
        self._sockets.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # helpers left behind, if any
        except ProcessLookupError:
            pass
        self.proc.wait()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
