"""The NetworkPolicies of infra/k8s, derived from the pipeline topology (issue 47).

`python infra/tools/network_policies.py` rewrites infra/k8s/base/security/network-policies.yaml;
tests/contract/test_k8s_network_policy.py fails when the committed file differs from what
this renders, and checks each policy against `k4d.pipeline_topology` itself.

What the topology says, and the policy it becomes (namespace k4d, default deny both ways):
- a service with an RPC that `user`s may call (RPC_ACCESS) takes its gRPC port from anywhere
  (users reach the front door); every other service only from the platform's own pods
  and from namespaces labelled `kinema4d.io/operator-access: "true"` (operators' tooling);
- every service that runs a Stage reaches Kafka; every service reaches MinIO (the object
  store) and the OpenTelemetry collector; services reach the gRPC ports of the services
  whose RPCs allow the `service` role (stages calling each other);
- the trainer reaches the Kubernetes API server (it creates PyTorchJobs) and its pods
  reach each other (torchrun rendezvous);
- the batch jobs (datagen, policy evaluation) reach MinIO, the collector and those services;
- `/metrics` is open to namespaces labelled `kinema4d.io/metrics-scraper: "true"`;
- Kafka, MinIO and the collector take traffic from the namespace and from namespaces
  labelled `kinema4d.io/platform-operator: "true"` (their operators); DNS is open to all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT = REPO_ROOT / "infra" / "k8s" / "base" / "security" / "network-policies.yaml"
NAME_LABEL = "app.kubernetes.io/name"
KAFKA_PODS = {"strimzi.io/cluster": "k4d"}
MINIO_PODS = {"v1.min.io/tenant": "k4d-minio"}
OTEL_PODS = {"app.kubernetes.io/component": "opentelemetry-collector"}
PORTS = {"kafka": 9092, "minio": 9000, "otel": 4317}
API_SERVER_PORTS = (443, 6443)
API_SERVER_CLIENTS = ("trainer",)  # creates PyTorchJobs (components/trainer RBAC)
OPERATOR_NAMESPACES = {"kinema4d.io/operator-access": "true"}
SCRAPER_NAMESPACES = {"kinema4d.io/metrics-scraper": "true"}
PLATFORM_OPERATOR_NAMESPACES = {"kinema4d.io/platform-operator": "true"}
# Batch jobs of infra/k8s/jobs in the namespace (the training job's pods are the trainer's):
# they read and write the object store and may call the services other services call.
BATCH_JOBS = ("datagen", "policy-eval")


def _ports(*numbers: int, protocol: str = "TCP") -> list[dict]:
    return [{"protocol": protocol, "port": n} for n in numbers]


def _policy(name: str, selector: dict, ingress: list | None, egress: list | None,
            comment: str = "") -> dict:
    spec: dict = {"podSelector": selector, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    metadata = {"name": name}
    if comment:
        metadata["annotations"] = {"kinema4d.io/why": comment}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata, "spec": spec}


def platform_services() -> tuple[str, ...]:
    """The deployed gRPC services (each one Deployment named after it)."""
    from k4d.config import SERVICE_PORTS

    return tuple(SERVICE_PORTS)


def _platform_pods(services) -> dict:
    return {"matchExpressions": [{"key": NAME_LABEL, "operator": "In",
                                  "values": sorted(services)}]}


def service_policy(service: str) -> dict:
    from k4d import pipeline_topology as topology
    from k4d.config import SERVICE_PORTS

    grpc_port, metrics_port = SERVICE_PORTS[service]
    services = platform_services()
    if service in topology.user_facing_services():
        grpc_from: list | None = None  # users: from anywhere
        why = "users may call it (RPC_ACCESS)"
    else:
        grpc_from = [{"podSelector": _platform_pods(services)},
                     {"namespaceSelector": {"matchLabels": OPERATOR_NAMESPACES}}]
        why = "platform services and operators only (RPC_ACCESS)"
    grpc_rule = {"ports": _ports(grpc_port)}
    if grpc_from is not None:
        grpc_rule = {"from": grpc_from, **grpc_rule}
    ingress = [grpc_rule, {"from": [{"namespaceSelector": {"matchLabels": SCRAPER_NAMESPACES}}],
                           "ports": _ports(metrics_port)}]
    egress = []
    if topology.stages_of(service):
        egress.append({"to": [{"podSelector": {"matchLabels": KAFKA_PODS}}],
                       "ports": _ports(PORTS["kafka"])})
    egress += [{"to": [{"podSelector": {"matchLabels": MINIO_PODS}}], "ports": _ports(PORTS["minio"])},
               {"to": [{"podSelector": {"matchLabels": OTEL_PODS}}], "ports": _ports(PORTS["otel"])}]
    callees = [s for s in topology.service_called_services() if s in services and s != service]
    if callees:
        egress.append({"to": [{"podSelector": _platform_pods(callees)}],
                       "ports": _ports(*sorted(SERVICE_PORTS[s][0] for s in callees))})
    if service in API_SERVER_CLIENTS:
        egress.append({"ports": _ports(*API_SERVER_PORTS)})
        same = {"podSelector": {"matchLabels": {NAME_LABEL: service}}}
        ingress.append({"from": [same]})
        egress.append({"to": [same]})
    return _policy(f"k4d-{service}", {"matchLabels": {NAME_LABEL: service}}, ingress, egress, why)


def jobs_policy() -> dict:
    from k4d import pipeline_topology as topology
    from k4d.config import SERVICE_PORTS

    callees = [s for s in topology.service_called_services() if s in SERVICE_PORTS]
    egress = [{"to": [{"podSelector": {"matchLabels": MINIO_PODS}}], "ports": _ports(PORTS["minio"])},
              {"to": [{"podSelector": {"matchLabels": OTEL_PODS}}], "ports": _ports(PORTS["otel"])},
              {"to": [{"podSelector": _platform_pods(callees)}],
               "ports": _ports(*sorted(SERVICE_PORTS[s][0] for s in callees))}]
    return _policy("k4d-batch-jobs", _platform_pods(BATCH_JOBS), [], egress,
                   "batch jobs: the object store and the services' service-role RPCs")


def infra_policy(name: str, pods: dict) -> dict:
    peers = [{"podSelector": {}},
             {"namespaceSelector": {"matchLabels": PLATFORM_OPERATOR_NAMESPACES}}]
    return _policy(name, {"matchLabels": pods}, [{"from": peers}],
                   [{"to": [{"podSelector": {}}]}, {"ports": _ports(*API_SERVER_PORTS)}],
                   "platform infrastructure: the namespace and its operators")


def policies() -> list[dict]:
    dns = {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": _ports(53) + _ports(53, protocol="UDP")}
    return [
        _policy("default-deny", {}, [], [], "nothing in or out unless a policy below allows it"),
        _policy("allow-dns", {}, None, [dns], "name resolution for every pod"),
        *(service_policy(s) for s in platform_services()),
        jobs_policy(),
        infra_policy("k4d-kafka", KAFKA_PODS),
        infra_policy("k4d-minio", MINIO_PODS),
        infra_policy("k4d-otel-collector", OTEL_PODS),
    ]


def render() -> str:
    header = ("# Generated by infra/tools/network_policies.py from k4d.pipeline_topology; do not\n"
              "# edit (tests/contract/test_k8s_network_policy.py checks it).\n")
    return header + yaml.safe_dump_all(policies(), sort_keys=False, default_flow_style=False)


def main() -> int:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
