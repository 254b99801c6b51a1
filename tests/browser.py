"""Open a page in headless Chromium through the DevTools protocol, as a person would.

Collects every failed request (network errors and HTTP >= 400), evaluates an expression in
the loaded page, and takes a full-page screenshot. Uses Debian's `chromium` package and the
`websocket-client` library; no browser download.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class Page:
    def __init__(self, ws: websocket.WebSocket) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)
        raise TimeoutError(method)

    def wait_for(self, event: str, timeout: float = 60) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == event:
                return e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == event:
                return msg
        raise TimeoutError(event)


def open_page(url: str, expression: str, screenshot: Path,
              width: int = 1280, height: int = 1000) -> dict[str, Any]:
    """Load ``url``; return {'failed': [...], 'value': <expression result>, 'screenshot': path}."""
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium on PATH (apt-get install chromium)")
    # chromium's helper processes (crashpad, renderers) may still write to the profile while
    # they die: the whole process group is killed, and a late file does not fail the test
    with tempfile.TemporaryDirectory(prefix="ladder-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            port = None
            deadline = time.monotonic() + 60
            while port is None and time.monotonic() < deadline:
                line = proc.stderr.readline() if proc.stderr else ""
                m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
                if m:
                    port = int(m.group(1))
                elif not line and proc.poll() is not None:
                    raise RuntimeError(f"chromium exited with {proc.returncode}")
            if port is None:
                raise TimeoutError("chromium did not announce its DevTools port")
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            ws = websocket.create_connection(page_ws, timeout=60, suppress_origin=True)
            page = Page(ws)
            page.call("Network.enable")
            page.call("Page.enable")
            page.call("Page.navigate", url=url)
            page.wait_for("Page.loadEventFired")
            time.sleep(0.5)  # late requests (none expected in a standalone page)
            page.call("Runtime.evaluate", expression="1")  # drain queued events
            value = page.call("Runtime.evaluate", expression=expression,
                              returnByValue=True)["result"].get("value")
            shot = page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            ws.close()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    failed = []
    for e in page.events:
        if e.get("method") == "Network.loadingFailed":
            failed.append({"error": e["params"].get("errorText"),
                           "request": e["params"].get("requestId")})
        elif e.get("method") == "Network.responseReceived":
            resp = e["params"]["response"]
            if int(resp.get("status") or 0) >= 400:
                failed.append({"url": resp.get("url"), "status": resp.get("status")})
    requests = [e["params"]["request"]["url"] for e in page.events
                if e.get("method") == "Network.requestWillBeSent"]
    return {"failed": failed, "value": value, "screenshot": str(screenshot),
            "requests": requests}
