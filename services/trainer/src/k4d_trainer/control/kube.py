"""A minimal Kubernetes API client for the trainer's launcher: create, get and delete
namespaced objects with the pod's service-account token (the Role of
infra/k8s/components/trainer allows exactly that). Plain HTTPS through urllib3, so the
control-plane image needs no Kubernetes client library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from k4d.errors import FailedPrecondition, NotFound, Unavailable

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# kind -> (API path prefix, plural)
RESOURCES = {"ConfigMap": ("/api/v1", "configmaps"),
             "PyTorchJob": ("/apis/kubeflow.org/v1", "pytorchjobs")}


def resource_path(kind: str, namespace: str, name: str | None = None) -> str:
    prefix, plural = RESOURCES[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


class KubeClient:
    def __init__(self, base_url: str, token: str, ca_file: str | None, timeout_s: float = 30.0):
        import urllib3

        self.base_url, self._token = base_url.rstrip("/"), token
        self._http = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED" if ca_file else "CERT_NONE", ca_certs=ca_file,
            timeout=urllib3.Timeout(total=timeout_s), retries=urllib3.Retry(total=3, backoff_factor=0.5))

    @classmethod
    def in_cluster(cls) -> KubeClient:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        token_file = SERVICE_ACCOUNT_DIR / "token"
        if not host or not port or not token_file.is_file():
            raise FailedPrecondition(
                "K4D_TRAINER_LAUNCHER=kubernetes needs to run in a pod with a service-account "
                "token (KUBERNETES_SERVICE_HOST/PORT and " f"{token_file})")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file.read_text().strip(),
                   str(SERVICE_ACCOUNT_DIR / "ca.crt"))

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        try:
            response = self._http.request(method, self.base_url + path, body=data, headers=headers)
        except Exception as exc:  # urllib3 errors: connection refused, TLS, timeouts
            raise Unavailable(f"kubernetes API {method} {path}: {type(exc).__name__}") from None
        payload = response.data.decode(errors="replace")
        if response.status == 404:
            raise NotFound(f"kubernetes: {path} not found")
        if response.status >= 400:
            raise Unavailable(f"kubernetes API {method} {path}: HTTP {response.status}: "
                              f"{payload[:300]}")
        return json.loads(payload) if payload else {}

    def create(self, obj: dict) -> dict:
        """Create `obj`; an object of the same name that exists already is returned as is
        (a redelivered launch must not fail)."""
        meta = obj["metadata"]
        try:
            return self._request("POST", resource_path(obj["kind"], meta["namespace"]), obj)
        except Unavailable as exc:
            if "HTTP 409" not in str(exc):
                raise
            return self.get(obj["kind"], meta["namespace"], meta["name"])

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return self._request("GET", resource_path(kind, namespace, name))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        try:
            self._request("DELETE", resource_path(kind, namespace, name),
                          {"kind": "DeleteOptions", "apiVersion": "v1",
                           "propagationPolicy": "Background"})
        except NotFound:
            pass
