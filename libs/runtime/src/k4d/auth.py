"""Who is calling, and may they: bearer tokens checked against a hashed token file, and
the roles table of `k4d.pipeline_topology` (RPC_ACCESS) per RPC.

- The token file (`K4D_AUTH_TOKENS`) has one `ROLE NAME SHA256-OF-TOKEN` line per token
  (`#` comments and blank lines allowed). Servers never hold a token itself, only its
  hash, and compare hashes in constant time. `hash_token` and `token_line` make lines.
- Clients send `authorization: Bearer <token>` (`K4D_TOKEN`, `--token-file`).
- `AuthInterceptor` refuses a call without a known token (UNAUTHENTICATED) or whose role
  the table does not list for the RPC (PERMISSION_DENIED), each with its reason; health
  checks pass without a token. The handler reads its caller with `current_caller()`.

Without a token file a server checks nothing and `current_caller()` is None (`k4d up
--insecure`, unit tests, the embedded mode, which has no server at all).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from k4d import pipeline_topology
from k4d.errors import InvalidArgument
from k4d.grpc_interceptors import around, wrap_handler
from k4d.logs import get_logger

log = get_logger(__name__)
AUTHORIZATION = "authorization"
BEARER = "Bearer "
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its name (job owner) and role."""

    name: str
    role: str

    @property
    def sees_all_jobs(self) -> bool:
        return self.role == pipeline_topology.OPERATOR


@dataclass(frozen=True)
class TokenEntry:
    role: str
    name: str
    sha256: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_line(role: str, name: str, token: str) -> str:
    """The token file line for `token` (what a server stores instead of the token)."""
    return f"{role} {name} {hash_token(token)}"


def parse_token_file(text: str, source: str = "K4D_AUTH_TOKENS") -> tuple[TokenEntry, ...]:
    """The entries of a token file; InvalidArgument naming the line of a malformed one."""
    entries, seen = [], set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"line {number}"
        if len(parts) != 3:
            raise InvalidArgument.for_field(source, f"{where}: expected ROLE NAME SHA256, got "
                                                    f"{len(parts)} fields")
        role, name, digest = parts[0], parts[1], parts[2].lower()
        if role not in pipeline_topology.ROLES:
            raise InvalidArgument.for_field(source, f"{where}: unknown role {role!r}; expected "
                                                    f"one of {', '.join(pipeline_topology.ROLES)}")
        if not _NAME.match(name):
            raise InvalidArgument.for_field(source, f"{where}: bad name {name!r} (letters, "
                                                    "digits, . _ @ -; at most 128)")
        if not _SHA256.match(digest):
            raise InvalidArgument.for_field(source, f"{where}: expected the token's sha256 as 64 "
                                                    "hex digits")
        if digest in seen:
            raise InvalidArgument.for_field(source, f"{where}: the same token twice")
        seen.add(digest)
        entries.append(TokenEntry(role, name, digest))
    return tuple(entries)


def bearer_token(metadata) -> str | None:
    """The bearer token of a call's metadata (None without an authorization header)."""
    for key, value in metadata or ():
        if key == AUTHORIZATION:
            value = value.decode() if isinstance(value, bytes) else value
            return value[len(BEARER):].strip() if value.startswith(BEARER) else ""
    return None


def authenticate(entries: tuple[TokenEntry, ...], token: str | None) -> Caller | str:
    """The caller `token` belongs to, or the reason it is refused (a string)."""
    if token is None:
        return "no token: send `authorization: Bearer <token>` (K4D_TOKEN or --token-file)"
    if not token:
        return "malformed authorization header: expected `Bearer <token>`"
    digest = hash_token(token)
    found = None
    for entry in entries:  # every entry compared, in constant time each
        if hmac.compare_digest(entry.sha256, digest):
            found = entry
    if found is None:
        return "unknown or revoked token"
    return Caller(found.name, found.role)


def authorize(caller: Caller, method: str) -> str | None:
    """None when `caller`'s role may call `method`, else the reason it may not."""
    allowed = pipeline_topology.roles_for(method)
    if allowed is None or caller.role in allowed:
        return None
    return (f"role {caller.role!r} ({caller.name}) may not call {method.lstrip('/')}; "
            f"allowed: {', '.join(allowed)}")


class TokenFile:
    """The token file, re-read when it changes (rotation without a restart: a Secret
    update, an edit), checked at most once per RELOAD_CHECK_S. A changed file that does
    not parse keeps the previous tokens and logs why."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._entries = self._read()
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int]:
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise InvalidArgument.for_field(
                "K4D_AUTH_TOKENS", f"cannot read {self.path}: {exc.strerror}") from None
        return stat.st_mtime_ns, stat.st_size

    def _read(self) -> tuple[TokenEntry, ...]:
        entries = parse_token_file(self.path.read_text(), f"K4D_AUTH_TOKENS ({self.path})")
        if not entries:
            raise InvalidArgument.for_field("K4D_AUTH_TOKENS", f"{self.path} has no tokens")
        return entries

    def entries(self) -> tuple[TokenEntry, ...]:
        if time.monotonic() - self._checked < RELOAD_CHECK_S:
            return self._entries
        with self._lock:
            self._checked = time.monotonic()
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._entries, self._stamp = self._read(), stamp
                    log.info("token file reloaded", extra={"tokens": len(self._entries)})
            except (InvalidArgument, OSError) as exc:
                log.error("token file not reloaded, keeping the previous tokens: %s", exc)
        return self._entries


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("k4d_caller", default=None)


def current_caller() -> Caller | None:
    """The authenticated caller of the RPC this thread is handling (None: auth is off)."""
    return _CALLER.get()


def _refusal(code: grpc.StatusCode, reason: str):
    def wrap(behavior, response_streaming):
        def refuse(request, context):
            context.abort(code, reason)
        return refuse
    return wrap


class AuthInterceptor(grpc.ServerInterceptor):
    """Bearer token -> Caller -> the RPC's roles (pipeline_topology.RPC_ACCESS)."""

    def __init__(self, tokens: TokenFile):
        self.tokens = tokens

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        handler = continuation(handler_call_details)
        if handler is None or pipeline_topology.roles_for(method) is None:
            return handler
        caller = authenticate(self.tokens.entries(),
                              bearer_token(handler_call_details.invocation_metadata))
        if isinstance(caller, str):
            return wrap_handler(handler, _refusal(grpc.StatusCode.UNAUTHENTICATED, caller))
        denied = authorize(caller, method)
        if denied:
            return wrap_handler(handler, _refusal(grpc.StatusCode.PERMISSION_DENIED, denied))

        def before(context):
            return _CALLER.set(caller)

        def after(token, context, exc):
            _CALLER.reset(token)

        return wrap_handler(handler, lambda behavior, streaming: around(behavior, streaming,
                                                                         before, after))


def server_interceptors(config) -> list[grpc.ServerInterceptor]:
    """[AuthInterceptor] when the config names a token file, else []."""
    return [AuthInterceptor(TokenFile(config.auth_tokens))] if config.auth_tokens else []


def read_token_file(path: str | Path, flag: str = "--token-file") -> str:
    """A client's token from a file (its first line; whitespace stripped)."""
    try:
        token = Path(path).read_text().strip().splitlines()
    except OSError as exc:
        raise InvalidArgument.for_field(flag, f"cannot read {path}: {exc.strerror}") from None
    if not token or not token[0].strip():
        raise InvalidArgument.for_field(flag, f"{path} is empty")
    return token[0].strip()


def write_secret(path: Path, text: str) -> Path:
    """Write `text` to `path` readable by its owner only (tokens, private keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)
    return path
