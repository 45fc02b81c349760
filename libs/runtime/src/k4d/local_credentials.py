"""The credentials of a `k4d up` cluster, kept in its state directory:

    tls/ca.pem, tls/ca-key.pem          the local CA (clients trust ca.pem: K4D_TLS_CA)
    tls/server.pem, tls/server-key.pem  every service's certificate (localhost, 127.0.0.1)
    tokens/{user,operator,service}.token  one bearer token per role
    auth-tokens                         the servers' K4D_AUTH_TOKENS (hashes only; lines
                                        you add for other callers are kept)

What is there and still valid is reused (a restart keeps the clients' exports working);
anything missing, expired or not signed by the CA is made anew. Private keys and tokens
are readable by their owner only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from k4d import auth, local_pki
from k4d.pipeline_topology import OPERATOR, SERVICE, USER

# role -> the caller name its token carries (job owner)
LOCAL_NAMES = {USER: "user", OPERATOR: "operator", SERVICE: "k4d-services"}


@dataclass(frozen=True)
class LocalCredentials:
    ca: Path
    server: local_pki.KeyPair
    tokens: dict[str, Path]  # role -> token file
    auth_tokens: Path

    def token(self, role: str) -> str:
        return auth.read_token_file(self.tokens[role], f"{role} token")

    def server_env(self) -> dict[str, str]:
        """What each service gets: TLS on, tokens checked, its own token as a client."""
        return {"K4D_TLS_CERT": str(self.server.cert), "K4D_TLS_KEY": str(self.server.key),
                "K4D_AUTH_TOKENS": str(self.auth_tokens), "K4D_TLS_CA": str(self.ca),
                "K4D_TOKEN": self.token(SERVICE)}

    def client_env(self, role: str = USER) -> dict[str, str]:
        return {"K4D_TLS_CA": str(self.ca), "K4D_TOKEN": self.token(role)}


def ensure_local_credentials(state_dir: Path) -> LocalCredentials:
    """The cluster's CA, server certificate and tokens under `state_dir` (made if needed)."""
    tls = state_dir / "tls"
    ca = local_pki.KeyPair(tls / "ca.pem", tls / "ca-key.pem")
    if not (ca.key.is_file() and local_pki.certificate_valid(ca.cert, ca.cert, 7)):
        ca = local_pki.create_ca(tls)
    server = local_pki.KeyPair(tls / "server.pem", tls / "server-key.pem")
    if not (server.key.is_file() and local_pki.certificate_valid(server.cert, ca.cert)):
        server = local_pki.issue(ca, tls, "server")
    tokens = {}
    for role in LOCAL_NAMES:
        path = state_dir / "tokens" / f"{role}.token"
        if not path.is_file() or not path.read_text().strip():
            auth.write_secret(path, auth.new_token() + "\n")
        tokens[role] = path
    credentials = LocalCredentials(ca.cert, server, tokens, state_dir / "auth-tokens")
    lines = [auth.token_line(role, name, credentials.token(role))
             for role, name in LOCAL_NAMES.items()]
    if credentials.auth_tokens.is_file():  # keep the callers someone added
        lines += [f"{e.role} {e.name} {e.sha256}" for e in auth.parse_token_file(
            credentials.auth_tokens.read_text(), str(credentials.auth_tokens))
            if e.name not in LOCAL_NAMES.values()]
    auth.write_secret(credentials.auth_tokens,
                      "# ROLE NAME SHA256-OF-TOKEN (k4d up)\n" + "\n".join(lines) + "\n")
    return credentials
