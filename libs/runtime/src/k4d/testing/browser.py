"""A headless Chromium driven over the DevTools protocol on a pipe (no extra packages): open a
page, wait for a condition, evaluate JavaScript, take a screenshot as pixels. For tests of
the viewers (viewer.html, the served Rerun web viewer); WebGL runs on SwiftShader, the
software renderer, so no GPU is needed.

    with HeadlessBrowser() as browser:
        browser.open(url)
        browser.wait_for("window.k4dReady === true", timeout_s=60)
        pixels = browser.screenshot()        # (H, W, 3) uint8
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _above_nine(fd: int) -> int:
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class BrowserError(RuntimeError):
    pass


class HeadlessBrowser:
    def __init__(self, executable: str | None = None, width: int = 1280, height: int = 800):
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise BrowserError(f"no Chromium found (looked for {', '.join(CHROMIUM_NAMES)})")
        self.width, self.height = width, height
        self._next_id = 0
        self._buffer = b""
        self._session = None

    # lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> HeadlessBrowser:
        self._profile = tempfile.mkdtemp(prefix="k4d-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends move above fd 9 first, so they cannot be fds 3 and 4 already.
        to_browser_r, from_browser_w = (_above_nine(to_browser_r), _above_nine(from_browser_w))

        # Chromium reads commands on fd 3 and writes replies on fd 4: a shell puts the pipe
        # ends there (bash: dash cannot name fds above 9), then becomes Chromium.
        redirect = (f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} '
                    f'{to_browser_r}<&- {from_browser_w}>&-')
        self._proc = subprocess.Popen(
            ["/bin/bash", "-c", redirect, self.executable, "--headless", "--no-sandbox", "--disable-gpu",
             "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist",
             "--enable-webgl", "--remote-debugging-pipe", "--no-first-run",
             "--disable-dev-shm-usage", "--disable-background-networking",
             f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}",
             "about:blank"],
            pass_fds=(to_browser_r, from_browser_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        targets = self._call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self._call("Target.attachToTarget",
                                   {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self._call("Page.enable")
        self._call("Runtime.enable")
        self._call("Emulation.setDeviceMetricsOverride",
                   {"width": self.width, "height": self.height, "deviceScaleFactor": 1,
                    "mobile": False})
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            shutil.rmtree(self._profile, ignore_errors=True)

    # protocol --------------------------------------------------------------------------
    def _call(self, method: str, params: dict | None = None, timeout_s: float = 60.0) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if time.monotonic() > deadline:  # a page flooding events must not hold us here
                raise BrowserError(f"{method}: no reply in {timeout_s:.0f} s")

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError("Chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    # page ------------------------------------------------------------------------------
    def open(self, url: str) -> None:
        self._call("Page.navigate", {"url": url})

    def evaluate(self, expression: str):
        result = self._call("Runtime.evaluate", {"expression": expression,
                                                 "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 60.0, poll_s: float = 0.25) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.evaluate(expression):
                    return
            except BrowserError:
                pass  # the page may be between documents
            time.sleep(poll_s)
        raise BrowserError(f"timed out after {timeout_s} s waiting for {expression}")

    def screenshot(self) -> np.ndarray:
        """(H, W, 3) uint8 of the viewport."""
        from PIL import Image

        data = self._call("Page.captureScreenshot", {"format": "png"})["data"]
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
