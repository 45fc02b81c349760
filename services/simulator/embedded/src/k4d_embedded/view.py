"""`k4d view DIR`: print the viewer's path, optionally serve the directory on loopback."""

from __future__ import annotations

import functools
import http.server
import threading
import webbrowser
from pathlib import Path

from k4d.errors import InvalidArgument
from k4d_embedded.outputs import VIEWER_HTML


def viewer_path(directory: Path) -> Path:
    path = directory / VIEWER_HTML if directory.is_dir() else directory
    if not path.is_file():
        raise InvalidArgument.for_field(
            "dir", f"no {VIEWER_HTML} in {directory}; pass a `k4d simulate --out` directory")
    return path.resolve()


def make_server(directory: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server for `directory` bound to 127.0.0.1 only (never all interfaces)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass


def view_directory(directory: Path, *, serve: bool = False, port: int = 0,
                   open_browser: bool = False, out=None,
                   stop: threading.Event | None = None) -> int:
    if not 0 <= port <= 65535:
        raise InvalidArgument.for_field("--port", f"must be in [0, 65535], got {port}")
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
