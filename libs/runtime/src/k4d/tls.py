"""TLS for every gRPC server and client, from one set of settings (docs/operations.md,
"Security"): servers `K4D_TLS_CERT` + `K4D_TLS_KEY` (+ `K4D_TLS_CLIENT_CA`: mutual TLS),
clients `K4D_TLS_CA` (+ the same cert and key as their client certificate under mTLS)."""

from __future__ import annotations

from pathlib import Path

import grpc

from k4d.errors import InvalidArgument

_PEM_MARKERS = {"certificate": b"-----BEGIN CERTIFICATE-----", "private key": b"PRIVATE KEY-----"}


def read_pem(path: str, setting: str, kind: str = "certificate") -> bytes:
    """The PEM bytes of `path`; InvalidArgument naming `setting` when unreadable or not PEM."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument.for_field(setting, f"cannot read {path}: {exc.strerror}") from None
    if _PEM_MARKERS[kind] not in data:
        raise InvalidArgument.for_field(setting, f"{path} holds no PEM {kind}")
    return data


def server_credentials(config) -> grpc.ServerCredentials | None:
    """TLS credentials of a server with `config.tls_cert` (None: plaintext)."""
    if not config.tls_cert:
        return None
    cert = read_pem(config.tls_cert, "K4D_TLS_CERT")
    key = read_pem(config.tls_key, "K4D_TLS_KEY", "private key")
    client_ca = read_pem(config.tls_client_ca, "K4D_TLS_CLIENT_CA") if config.tls_client_ca else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


def channel_credentials(ca: str, cert: str = "", key: str = "",
                        setting: str = "K4D_TLS_CA") -> grpc.ChannelCredentials:
    """TLS credentials of a client trusting `ca` (PEM path), presenting cert + key when
    both are given (servers with K4D_TLS_CLIENT_CA require it)."""
    root = read_pem(ca, setting)
    if cert and key:
        return grpc.ssl_channel_credentials(root, read_pem(key, "K4D_TLS_KEY", "private key"),
                                            read_pem(cert, "K4D_TLS_CERT"))
    return grpc.ssl_channel_credentials(root)
