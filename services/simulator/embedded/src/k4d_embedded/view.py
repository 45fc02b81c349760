"""`k4d view PATH`: open a rollout, episode or evaluation in the Rerun viewer.

PATH is a `.rrd` file, a directory holding recordings (a `k4d simulate` / `k4d generate`
output has rollout.rrd; a `k4d eval` directory has comparison/<episode>.rrd, or
comparison.rrd from `k4d eval pair`), or an episode of the
shared format (`<dataset>/episodes/<episode_id>`, recorded on the fly). Where a display
exists the native Rerun viewer opens; otherwise (or with --web) the Rerun web viewer is
served from the rerun-sdk wheel's own assets on loopback (no network needed) and its URL is
printed. `--html` keeps the zero-install path: print (or --serve) the rollout's viewer.html.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import webbrowser
from pathlib import Path

from k4d.errors import FailedPrecondition, InvalidArgument
from k4d.recording import RECORDING_FILE

from k4d_embedded.outputs import VIEWER_HTML

WEB_VIEWER_START_TIMEOUT_S = 60.0
_URL_LINE = re.compile(r"connect at (http://\S+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ------------------------------------------------------------------ what to open

def viewer_path(directory: Path) -> Path:
    path = directory / VIEWER_HTML if directory.is_dir() else directory
    if not path.is_file():
        raise InvalidArgument.for_field(
            "dir", f"no {VIEWER_HTML} in {directory}; pass a `k4d simulate --out` directory")
    return path.resolve()


def is_episode_dir(path: Path) -> bool:
    """An episode group of the shared format: <dataset>/episodes/<episode_id>/zarr.json
    (a dataset has meta/info.json, or manifest.json in the earlier layout)."""
    root = path.parent.parent
    return (path.is_dir() and path.parent.name == "episodes" and (path / "zarr.json").is_file()
            and ((root / "meta" / "info.json").is_file() or (root / "manifest.json").is_file()))


def find_recordings(path: Path) -> list[Path]:
    """The .rrd files PATH stands for: itself, a directory's rollout.rrd, else every .rrd
    in the directory (`k4d eval pair`'s comparison.rrd), else every .rrd one level down (one
    directory per episode or rollout; `k4d eval`'s comparison/<episode>.rrd), sorted."""
    if path.is_file():
        if path.suffix != ".rrd":
            raise InvalidArgument.for_field("path", f"{path} is not a .rrd recording")
        return [path.resolve()]
    if not path.is_dir():
        raise InvalidArgument.for_field("path", f"no such file or directory: {path}")
    if (path / RECORDING_FILE).is_file():
        return [(path / RECORDING_FILE).resolve()]
    found = sorted(p.resolve() for p in path.glob("*.rrd") if p.is_file())
    found = found or sorted(p.resolve() for p in path.glob("*/*.rrd") if p.is_file())
    if not found:
        raise InvalidArgument.for_field(
            "path", f"no Rerun recording (.rrd) in {path}: pass a `k4d simulate`, `k4d generate` "
                    f"or `k4d eval` output directory, an episode directory or a .rrd file "
                    f"(`--html` opens viewer.html instead)")
    return found


def record_episode(episode_dir: Path, out_dir: Path) -> Path:
    """Write an episode of the shared format as a recording in out_dir; returns its path."""
    from k4d.episodes import open_dataset
    from k4d.recording import record_episode as write

    episode = open_dataset(str(episode_dir.parent.parent)).open(episode_dir.name)
    return write(episode, out_dir / f"{episode.meta.episode_id}.rrd")


# ------------------------------------------------------------------ how to open

def has_display(env=None, platform: str | None = None) -> bool:
    """Whether a native window can open: always on macOS and Windows, on Linux with X11 or
    Wayland."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if platform == "darwin" or platform.startswith("win"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def rerun_command() -> list[str]:
    """The rerun CLI of the installed rerun-sdk (the wheel ships the viewer binary)."""
    from k4d.recording import require_rerun

    require_rerun()
    return [sys.executable, "-m", "rerun"]


def open_native(recordings: list[Path], out=None) -> int:
    print(f"opening {', '.join(map(str, recordings))} in the Rerun viewer", file=out, flush=True)
    return subprocess.call([*rerun_command(), *map(str, recordings)])


class WebViewer:
    """`rerun --serve-web` on loopback: the web viewer (HTTP, the wheel's own assets) and the
    gRPC proxy streaming the recordings to it. Use as a context manager; `url` opens it."""

    def __init__(self, recordings: list[Path], port: int = 0):
        self.recordings, self.port = recordings, port
        self.url = ""
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> WebViewer:
        self._proc = subprocess.Popen(
            [*rerun_command(), "--serve-web", "--bind", "127.0.0.1", "--web-viewer-port",
             str(self.port), "--port", "0", *map(str, self.recordings)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, NO_COLOR="1"),
            # `python -m rerun` starts the viewer binary as its own child: a session of
            # their own lets __exit__ stop both
            start_new_session=True)
        found = threading.Event()
        lines: list[str] = []
        threading.Thread(target=self._drain, args=(found, lines), daemon=True).start()
        if not found.wait(WEB_VIEWER_START_TIMEOUT_S) or not self.url:
            self.__exit__(None, None, None)
            tail = " | ".join(lines[-3:])
            raise FailedPrecondition(f"the Rerun web viewer did not start: {tail or 'no output'}")
        return self

    def _drain(self, found: threading.Event, lines: list[str]) -> None:
        # Read the server's log until it exits: the URL line, then keep the pipe empty.
        for line in self._proc.stderr:
            line = _ANSI.sub("", line).strip()
            lines.append(line)
            del lines[:-20]
            match = _URL_LINE.search(line)
            if match and not self.url:
                self.url = match.group(1)
                found.set()
        found.set()

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self._proc.pid, sig)  # the wrapper and the viewer binary
            except ProcessLookupError:
                break
            try:
                self._proc.wait(timeout=10)
                _wait_group_gone(self._proc.pid, timeout_s=10)
                break
            except subprocess.TimeoutExpired:
                continue


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Until no process of the group is left (raises TimeoutExpired otherwise)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise subprocess.TimeoutExpired(f"process group {pgid}", timeout_s)


def serve_web(recordings: list[Path], *, port: int = 0, open_browser: bool = False, out=None,
              stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()
    with WebViewer(recordings, port) as viewer, _stop_on_sigterm(stop):
        print(f"Rerun web viewer (served on loopback, no network needed): {viewer.url}",
              file=out, flush=True)
        print("Ctrl-C to stop", file=out, flush=True)
        if open_browser:
            webbrowser.open(viewer.url)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


@contextlib.contextmanager
def _stop_on_sigterm(stop: threading.Event):
    """SIGTERM ends the wait like Ctrl-C does, so the viewer server is always stopped
    (only the main thread may set handlers; elsewhere the caller's `stop` is the way)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def view(path: Path, *, web: bool = False, port: int = 0, open_browser: bool = False,
         out=None, stop: threading.Event | None = None) -> int:
    """`k4d view PATH` without --html: the native viewer where a display exists, else the
    served web viewer."""
    _check_port(port)
    with tempfile.TemporaryDirectory(prefix="k4d-view-") as scratch:
        if is_episode_dir(path):
            recordings = [record_episode(path, Path(scratch))]
        else:
            recordings = find_recordings(path)
        rerun_command()  # fails with the install hint before anything starts
        if not web and has_display():
            return open_native(recordings, out)
        return serve_web(recordings, port=port, open_browser=open_browser, out=out, stop=stop)


# ------------------------------------------------------------------ viewer.html (--html)

def make_server(directory: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server for `directory` bound to 127.0.0.1 only (never all interfaces)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass


def _check_port(port: int) -> None:
    if not 0 <= port <= 65535:
        raise InvalidArgument.for_field("--port", f"must be in [0, 65535], got {port}")


def view_directory(directory: Path, *, serve: bool = False, port: int = 0,
                   open_browser: bool = False, out=None,
                   stop: threading.Event | None = None) -> int:
    """`k4d view DIR --html`: print viewer.html's path; --serve it on loopback."""
    _check_port(port)
    path = viewer_path(directory)
    print(f"viewer: {path}", file=out)
    if not serve:
        if open_browser:
            webbrowser.open(path.as_uri())
        return 0
    server = make_server(path.parent, port)
    url = f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
    print(f"serving {path.parent} at {url} (Ctrl-C to stop)", file=out, flush=True)
    if open_browser:
        webbrowser.open(url)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0
