"""The roles table and the NetworkPolicies agree with the pipeline topology (issue 47):
RPC_ACCESS names every RPC of proto/ and nothing else; infra/k8s/base/security's policies
are what infra/tools/network_policies.py derives from the topology, and each one admits
what the topology says and no more."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k4d import pipeline_topology as topology
from k4d.config import SERVICE_PORTS
from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
tool = load_path_module(REPO / "infra/tools/network_policies.py", "k4d_network_policies")
POLICIES = {p["metadata"]["name"]: p for p in yaml.safe_load_all(tool.OUTPUT.read_text())}


def _proto_rpcs() -> set[str]:
    from kinema4d.v1 import (
        generator_pb2,
        kinematics_pb2,
        policy_pb2,
        projection_pb2,
        simulator_pb2,
        trainer_pb2,
    )

    return {f"/{service.full_name}/{method.name}"
            for module in (generator_pb2, kinematics_pb2, policy_pb2, projection_pb2,
                           simulator_pb2, trainer_pb2)
            for service in module.DESCRIPTOR.services_by_name.values()
            for method in service.methods}


def test_the_roles_table_names_every_rpc_and_only_known_roles():
    table = topology.rpc_roles()
    assert set(table) == _proto_rpcs()
    for method, roles in table.items():
        assert roles and set(roles) <= set(topology.ROLES), method
        assert topology.OPERATOR in roles, f"operators may call everything: {method}"
    users = {m for m, roles in table.items() if topology.USER in roles}
    assert users == {f"/kinema4d.v1.SimulatorService/{m}"
                     for m in ("Submit", "Get", "Watch", "Cancel", "ListJobs")}
    for method in ("/kinema4d.v1.GeneratorService/LoadModel",
                   "/kinema4d.v1.TrainerService/SubmitTrainingJob"):
        assert table[method] == (topology.OPERATOR,)
    assert topology.roles_for("/grpc.health.v1.Health/Check") is None
    assert topology.roles_for("/grpc.reflection.v1alpha.ServerReflection/"
                              "ServerReflectionInfo") == topology.ROLES
    for access in topology.RPC_ACCESS:
        assert (REPO / "services" / access.service / "pyproject.toml").is_file(), access.service


def test_the_committed_policies_are_the_derived_ones():
    assert tool.OUTPUT.read_text() == tool.render(), \
        "run: python infra/tools/network_policies.py"


def test_the_namespace_denies_by_default():
    deny = POLICIES["default-deny"]["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress", "Egress"]
    assert deny["ingress"] == [] and deny["egress"] == []


def _grpc_rule(policy: dict, port: int) -> dict:
    (rule,) = [r for r in policy["spec"]["ingress"]
               if any(p["port"] == port for p in r.get("ports", []))]
    return rule


def _egress_ports(policy: dict, selector: dict) -> set[int]:
    return {p["port"] for rule in policy["spec"]["egress"]
            for peer in rule.get("to", []) if peer.get("podSelector") == {"matchLabels": selector}
            for p in rule.get("ports", [])}


@pytest.mark.parametrize("service", sorted(SERVICE_PORTS))
def test_each_service_admits_what_the_topology_says(service):
    policy = POLICIES[f"k4d-{service}"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {tool.NAME_LABEL: service}}
    grpc_port, metrics_port = SERVICE_PORTS[service]
    rule = _grpc_rule(policy, grpc_port)
    if service in topology.user_facing_services():
        assert "from" not in rule  # users reach the front door from anywhere
    else:
        peers = rule["from"]
        assert {"namespaceSelector": {}} not in peers and {"podSelector": {}} not in peers
        names = set(peers[0]["podSelector"]["matchExpressions"][0]["values"])
        assert names == set(SERVICE_PORTS)
    metrics = _grpc_rule(policy, metrics_port)
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": tool.SCRAPER_NAMESPACES}}]
    kafka = _egress_ports(policy, tool.KAFKA_PODS)
    assert kafka == ({tool.PORTS["kafka"]} if topology.stages_of(service) else set())
    assert _egress_ports(policy, tool.MINIO_PODS) == {tool.PORTS["minio"]}
    api_server = [r for r in policy["spec"]["egress"] if "to" not in r]
    assert bool(api_server) == (service in tool.API_SERVER_CLIENTS)
    if api_server:
        assert {p["port"] for p in api_server[0]["ports"]} == set(tool.API_SERVER_PORTS)


def test_the_batch_jobs_reach_the_store_and_are_covered():
    policy = POLICIES["k4d-batch-jobs"]
    for job in tool.BATCH_JOBS:
        (rendered,) = [d for d in load_path_module(
            REPO / "infra/tools/manifests.py", "k4d_infra_manifests").render_spec(f"jobs/{job}")
            if d["kind"] == "Job"]
        name = rendered["spec"]["template"]["metadata"]["labels"][tool.NAME_LABEL]
        assert name in policy["spec"]["podSelector"]["matchExpressions"][0]["values"], job
    assert _egress_ports(policy, tool.MINIO_PODS) == {tool.PORTS["minio"]}
    assert policy["spec"]["ingress"] == []


def test_the_base_deploys_the_policies_and_every_deployment_is_covered():
    manifests = load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")
    try:
        rendered = manifests.render_spec("base")
    except manifests.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)
    deployed = {d["metadata"]["name"] for d in rendered if d["kind"] == "NetworkPolicy"}
    assert deployed == set(POLICIES)
    for deployment in (d for d in rendered if d["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [p for p in POLICIES.values() if p["spec"]["podSelector"].get(
            "matchLabels", {}).items() <= labels.items() and p["spec"]["podSelector"]]
        assert covering, f"no allow policy selects {deployment['metadata']['name']}"
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        name = deployment["metadata"]["name"]
        assert volumes["tls"]["secret"]["secretName"] == f"{name}-tls"
        assert volumes["auth-tokens"]["secret"]["secretName"] == "k4d-auth-tokens"
    certificates = {c["spec"]["secretName"] for c in rendered if c["kind"] == "Certificate"}
    assert {f"{s}-tls" for s in SERVICE_PORTS} <= certificates
