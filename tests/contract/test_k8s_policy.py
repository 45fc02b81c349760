"""Our own rules for the rendered manifests, beyond schema validity.

Every overlay is checked as shipped (the trainer component is part of the base).

Security (non-root, read-only root fs, no privileges), resources, native gRPC probes on the
ports of k4d.config.SERVICE_PORTS, the GPU placement of the generator, graceful shutdown,
and the wiring between resources (config -> Kafka/MinIO/OTel, topics -> events.proto,
autoscalers -> Deployments, monitors -> Services).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from k4d.bus.topics import ALL_TOPICS
from k4d.config import ENV_VARS, SERVICE_PORTS, load_config
from k4d.testing.modules import load_path_module

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OVERLAYS = ["base", "overlays/dev", "overlays/prod"]
# Opt-in kustomize components (infra/k8s/components/<name>) deploying one service each that
# no overlay includes, rendered added on top as "DIR+name" (none at present: the trainer's
# component is part of the base).
OPT_IN_SERVICES: set[str] = set()
OVERLAYS = DEFAULT_OVERLAYS + [f"{o}+{s}" for o in DEFAULT_OVERLAYS for s in sorted(OPT_IN_SERVICES)]
WORKLOAD_RENDERS = OVERLAYS + ["jobs/train", "jobs/datagen", "jobs/policy-eval"]
# Created out of band outside dev (docs/operations.md): allowed to be absent from a render.
EXTERNAL_SECRETS = {"k4d-s3-credentials", "k4d-minio-config", "k4d-auth-tokens"}
APP_UID = 10001


def _manifests_tool():
    return load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")


tool = _manifests_tool()


def _render(kustomization: str) -> list[dict]:
    """"DIR" or "DIR+component+...": DIR with those infra/k8s/components enabled."""
    try:
        return tool.render_spec(kustomization)
    except tool.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)


def _deployed_services(kustomization: str) -> set[str]:
    enabled = set(kustomization.split("+")[1:])
    return set(SERVICE_PORTS) - (OPT_IN_SERVICES - enabled)


def _kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def _by_name(docs, kind):
    return {d["metadata"]["name"]: d for d in _kind(docs, kind)}


def _pod_specs(docs):
    """(id, pod spec) of every workload: Deployments, Jobs and PyTorchJob replica templates."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield tool.resource_id(doc), doc["spec"]["template"]["spec"]
        elif doc["kind"] == "PyTorchJob":
            for role, replica in doc["spec"]["pytorchReplicaSpecs"].items():
                yield f"{tool.resource_id(doc)}[{role}]", replica["template"]["spec"]


def _config(docs) -> dict[str, str]:
    (config_map,) = [d for d in _kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("k4d-config")]
    return config_map["data"]


def _proto_services() -> set[str]:
    names = set()
    for proto in (REPO / "proto" / "kinema4d" / "v1").glob("*.proto"):
        names |= {f"kinema4d.v1.{m}" for m in re.findall(r"^service (\w+)", proto.read_text(), re.M)}
    return names


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTOR = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _quantity(value) -> float:
    match = _QUANTITY.match(str(value))
    assert match, f"unparsable quantity {value!r}"
    return float(match.group(1)) * _FACTOR[match.group(2)]


# ---- security ------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", WORKLOAD_RENDERS)
def test_pods_run_unprivileged(kustomization):
    for workload, pod in _pod_specs(_render(kustomization)):
        context = pod.get("securityContext", {})
        assert context.get("runAsNonRoot") is True, workload
        assert context.get("runAsUser") == APP_UID, workload
        assert context.get("seccompProfile", {}).get("type") == "RuntimeDefault", workload
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), workload
        assert not any("hostPath" in v for v in pod.get("volumes", [])), workload
        for container in pod["containers"] + pod.get("initContainers", []):
            where = f"{workload}/{container['name']}"
            sc = container.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert not sc.get("privileged"), where
            assert sc.get("runAsUser", APP_UID) != 0, where


@pytest.mark.parametrize("kustomization", ["base", "overlays/prod", "jobs/train", "jobs/datagen",
                                           "jobs/policy-eval"])
def test_root_filesystem_is_read_only_with_writable_scratch(kustomization):
    for workload, pod in _pod_specs(_render(kustomization)):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            where = f"{workload}/{container['name']}"
            assert container["securityContext"].get("readOnlyRootFilesystem") is True, where
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            for path in ("/tmp", "/home/k4d/.cache"):
                assert path in mounts, f"{where}: no writable {path}"
                assert "emptyDir" in volumes[mounts[path]], f"{where}: {path} is not an emptyDir"
                assert "sizeLimit" in volumes[mounts[path]]["emptyDir"], f"{where}: unbounded {path}"


@pytest.mark.parametrize("kustomization", ["overlays/dev"])
def test_only_dev_relaxes_the_read_only_root_for_tilt_live_update(kustomization):
    for _, pod in _pod_specs(_render(kustomization)):
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is False


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_only_the_trainer_gets_an_api_token(kustomization):
    docs = _render(kustomization)
    for deployment in _kind(docs, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        expected = deployment["metadata"]["name"] == "trainer"
        assert pod.get("automountServiceAccountToken") is expected, tool.resource_id(deployment)
    bindings, roles = _kind(docs, "RoleBinding"), _kind(docs, "Role")
    if "trainer" not in _deployed_services(kustomization):
        assert not bindings and not roles, "RBAC without the trainer that uses it"
        return
    (binding,) = bindings
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": "k4d"}]
    (role,) = roles
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]


# ---- resources -----------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", WORKLOAD_RENDERS)
def test_requests_and_limits_are_set(kustomization):
    for workload, pod in _pod_specs(_render(kustomization)):
        for container in pod["containers"]:
            where = f"{workload}/{container['name']}"
            resources = container.get("resources", {})
            for resource in ("cpu", "memory"):
                request = resources.get("requests", {}).get(resource)
                limit = resources.get("limits", {}).get(resource)
                assert request is not None and limit is not None, f"{where}: {resource} unset"
                assert _quantity(request) <= _quantity(limit), f"{where}: {resource} request > limit"


@pytest.mark.parametrize("kustomization", ["base", "overlays/prod"])
def test_generator_gets_one_gpu_on_gpu_nodes(kustomization):
    pod = _by_name(_render(kustomization), "Deployment")["generator"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_prod_generator_runs_the_gpu_image_and_dev_the_cpu_one():
    prod = _by_name(_render("overlays/prod"), "Deployment")["generator"]
    assert prod["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":gpu")
    dev = _by_name(_render("overlays/dev"), "Deployment")["generator"]["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in str(dev["containers"][0]["resources"])
    assert "nodeSelector" not in dev and "tolerations" not in dev
    assert ":gpu" not in dev["containers"][0]["image"]


def test_only_gpu_workloads_ask_for_gpus():
    for kustomization in WORKLOAD_RENDERS:
        for workload, pod in _pod_specs(_render(kustomization)):
            wants_gpu = "nvidia.com/gpu" in str(pod["containers"][0].get("resources"))
            in_dev = kustomization.startswith("overlays/dev")
            assert wants_gpu == (("generator" in workload and not in_dev)
                                 or "PyTorchJob" in workload), workload


# ---- ports, probes, shutdown ---------------------------------------------------------


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_every_service_is_deployed_with_its_ports(kustomization):
    deployments = _by_name(_render(kustomization), "Deployment")
    assert set(deployments) == _deployed_services(kustomization)
    for name in deployments:
        grpc_port, metrics_port = SERVICE_PORTS[name]
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": grpc_port, "metrics": metrics_port}, name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["K4D_GRPC_PORT"] == str(grpc_port) and env["K4D_METRICS_PORT"] == str(metrics_port)
        assert env["OTEL_SERVICE_NAME"] == name


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_probes_are_native_grpc_and_readiness_names_the_service(kustomization):
    services = _proto_services()
    for name, deployment in _by_name(_render(kustomization), "Deployment").items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        grpc_port = SERVICE_PORTS[name][0]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["grpc"]["port"] == grpc_port, f"{name} {probe}"
        # Liveness asks about the process (""), readiness about the service itself: the
        # generator is SERVING only with a model loaded.
        assert "service" not in container["livenessProbe"]["grpc"], name
        assert container["readinessProbe"]["grpc"]["service"] in services, name
        assert container["readinessProbe"]["grpc"]["service"].lower() == f"kinema4d.v1.{name}service"


def test_generator_startup_probe_allows_slow_model_loads():
    container = _by_name(_render("base"), "Deployment")["generator"]["spec"]["template"]["spec"][
        "containers"][0]
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 600


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_termination_grace_covers_prestop_and_the_drain(kustomization):
    """k4d.grpc_server.serve on SIGTERM: health NOT_SERVING, then up to K4D_SHUTDOWN_GRACE_S
    for the worker to finish and commit, then server.stop(K4D_SHUTDOWN_GRACE_S)."""
    docs = _render(kustomization)
    grace_s = float(_config(docs)["K4D_SHUTDOWN_GRACE_S"])
    for deployment in _kind(docs, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pre_stop >= 3, "endpoint removal needs a few seconds to propagate"
        budget = pre_stop + 2 * grace_s
        assert pod["terminationGracePeriodSeconds"] >= budget + 5, tool.resource_id(deployment)


# ---- configuration and wiring ---------------------------------------------------------


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_config_map_parses_with_the_runtime_config(kustomization):
    data = _config(_render(kustomization))
    unknown = set(data) - set(ENV_VARS) - {"OTEL_EXPORTER_OTLP_PROTOCOL"}
    assert not unknown, f"settings the runtime does not read: {sorted(unknown)}"
    config = load_config("kinematics", env=data)
    assert config.store_uri.startswith("s3://") and config.kafka_bootstrap


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_config_points_at_the_platform_services(kustomization):
    docs = _render(kustomization)
    data = _config(docs)
    (kafka,) = _kind(docs, "Kafka")
    plain = [lst for lst in kafka["spec"]["kafka"]["listeners"] if not lst["tls"]]
    assert data["K4D_KAFKA_BOOTSTRAP"] == f"{kafka['metadata']['name']}-kafka-bootstrap:{plain[0]['port']}"
    (tenant,) = _kind(docs, "Tenant")
    assert tenant["spec"]["requestAutoCert"] is False and data["K4D_S3_SECURE"] == "0"
    assert data["K4D_S3_ENDPOINT"] == "minio:80"  # the operator's Service for a non-TLS tenant
    bucket = data["K4D_STORE_URI"].removeprefix("s3://").split("/")[0]
    assert {"name": bucket} in tenant["spec"]["buckets"]
    (collector,) = _kind(docs, "OpenTelemetryCollector")
    grpc_endpoint = collector["spec"]["config"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    port = grpc_endpoint.rsplit(":", 1)[1]
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{collector['metadata']['name']}-collector:{port}"


@pytest.mark.parametrize("kustomization", WORKLOAD_RENDERS)
def test_references_resolve_inside_the_render(kustomization):
    docs = _render(kustomization)
    config_maps = set(_by_name(docs, "ConfigMap"))
    secrets = set(_by_name(docs, "Secret"))
    accounts = set(_by_name(docs, "ServiceAccount"))
    if kustomization.startswith("overlays/dev"):
        allowed_missing_secrets = set()
    else:
        allowed_missing_secrets = EXTERNAL_SECRETS
    # cert-manager writes each Certificate's Secret (issue 47)
    issued = {c["spec"]["secretName"] for c in _kind(docs, "Certificate")}
    for workload, pod in _pod_specs(docs):
        assert pod["serviceAccountName"] in accounts, workload
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, workload
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets | allowed_missing_secrets | issued, \
                    workload
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps, workload
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] in secrets | allowed_missing_secrets, workload
            mounted = {m["name"] for m in container.get("volumeMounts", [])}
            assert mounted <= {v["name"] for v in pod.get("volumes", [])}, workload
    for tenant in _kind(docs, "Tenant"):
        assert tenant["spec"]["configuration"]["name"] in secrets | allowed_missing_secrets


def test_dev_generates_every_secret_it_uses():
    docs = _render("overlays/dev")
    secrets = _by_name(docs, "Secret")
    assert set(secrets) == EXTERNAL_SECRETS
    assert set(secrets["k4d-s3-credentials"]["data"]) == {"accessKey", "secretKey"}
    assert set(secrets["k4d-minio-config"]["data"]) == {"config.env"}
    assert set(secrets["k4d-auth-tokens"]["data"]) == {"tokens"}


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_services_and_monitors_select_real_pods_and_ports(kustomization):
    docs = _render(kustomization)
    deployments = _kind(docs, "Deployment")

    def selected(selector):
        return [d for d in deployments
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]

    services = _by_name(docs, "Service")
    for name, service in services.items():
        (deployment,) = selected(service["spec"]["selector"])
        container_ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports, name
    for monitor in _kind(docs, "ServiceMonitor"):
        matching = [s for s in services.values()
                    if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(matching) == 1, tool.resource_id(monitor)
        port_names = {p["name"] for p in matching[0]["spec"]["ports"]}
        assert all(e["port"] in port_names for e in monitor["spec"]["endpoints"])
    for budget in _kind(docs, "PodDisruptionBudget"):
        assert len(selected(budget["spec"]["selector"]["matchLabels"])) == 1, tool.resource_id(budget)
    assert {m["metadata"]["name"] for m in _kind(docs, "ServiceMonitor")} == _deployed_services(kustomization)


def _event_topics() -> list[str]:
    """The topics of events.proto's header, plus any the runtime names (k4d.bus.topics)."""
    header = (REPO / "proto" / "kinema4d" / "v1" / "events.proto").read_text()
    topics = re.findall(r"^//\s+(k4d\.[a-z.]+)\s+\w+", header, re.M)
    return sorted(set(topics) | set(ALL_TOPICS))


@pytest.mark.parametrize("kustomization", OVERLAYS)
def test_every_event_topic_and_its_dlq_exists(kustomization):
    docs = _render(kustomization)
    events = _event_topics()
    assert "k4d.sim.requested" in events and "k4d.model.published" in events
    topics = {t["spec"]["topicName"]: t for t in _kind(docs, "KafkaTopic")}
    assert set(topics) == set(events) | {f"{t}.dlq" for t in events}
    (kafka,) = _kind(docs, "Kafka")
    brokers = sum(p["spec"]["replicas"] for p in _kind(docs, "KafkaNodePool")
                  if "broker" in p["spec"]["roles"])
    for pool in _kind(docs, "KafkaNodePool"):
        assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
    for name, topic in topics.items():
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"], name
        replicas = topic["spec"]["replicas"]
        assert replicas <= brokers, name
        # With acks=all, one replica must be allowed to fail without blocking producers
        # (prod); a single-broker dev cluster has nothing to spare.
        min_isr = topic["spec"]["config"]["min.insync.replicas"]
        assert min_isr < replicas or replicas == 1, name


@pytest.mark.parametrize("kustomization", ["overlays/prod"])
def test_prod_autoscaling_targets_and_bounds(kustomization):
    docs = _render(kustomization)
    deployments = _by_name(docs, "Deployment")
    hpa_targets = [h["spec"]["scaleTargetRef"]["name"] for h in _kind(docs, "HorizontalPodAutoscaler")]
    keda = _kind(docs, "ScaledObject")
    keda_targets = [s["spec"]["scaleTargetRef"]["name"] for s in keda]
    assert keda_targets == ["generator"]
    assert set(hpa_targets) == {"kinematics", "projection", "simulator"}
    assert not set(hpa_targets) & set(keda_targets), "a Deployment must have one autoscaler"
    for target in hpa_targets + keda_targets:
        assert target in deployments
        # The autoscaler owns the count; a replicas field would reset it on every apply.
        assert "replicas" not in deployments[target]["spec"], target

    topics = {t["spec"]["topicName"]: t["spec"]["partitions"] for t in _kind(docs, "KafkaTopic")}
    (kafka,) = _kind(docs, "Kafka")
    for scaled in keda:
        assert scaled["spec"]["minReplicaCount"] >= 1, "keep one generator warm: loads take minutes"
        for trigger in scaled["spec"]["triggers"]:
            meta = trigger["metadata"]
            assert trigger["type"] == "kafka"
            assert meta["topic"] in topics
            assert scaled["spec"]["maxReplicaCount"] <= topics[meta["topic"]]
            assert meta["bootstrapServers"] == f"{kafka['metadata']['name']}-kafka-bootstrap.k4d.svc:9092"
    for hpa in _kind(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["minReplicas"] >= 2
        # Stage workers share their input topic's 12 partitions.
        assert hpa["spec"]["maxReplicas"] <= 12


@pytest.mark.parametrize("kustomization", ["overlays/dev"])
def test_dev_runs_one_of_everything(kustomization):
    docs = _render(kustomization)
    for deployment in _kind(docs, "Deployment"):
        assert deployment["spec"]["replicas"] == 1, tool.resource_id(deployment)
    assert [p["spec"]["replicas"] for p in _kind(docs, "KafkaNodePool")] == [1]
    assert not _kind(docs, "ScaledObject") and not _kind(docs, "HorizontalPodAutoscaler")


# Images built from another target of a service's Dockerfile: image -> (service, target).
TARGET_IMAGES = {"k4d/trainer-control": ("trainer", "control")}


def test_every_image_is_built_from_a_service_dockerfile():
    seen = set()
    for kustomization in WORKLOAD_RENDERS:
        for workload, pod in _pod_specs(_render(kustomization)):
            for container in pod["containers"]:
                image = container["image"].split(":")[0]
                assert image.startswith("k4d/"), workload
                service, target = TARGET_IMAGES.get(image, (image.removeprefix("k4d/"), "runtime"))
                dockerfile = REPO / "services" / service / "Dockerfile"
                assert dockerfile.is_file(), image
                assert re.search(rf"^FROM \S+ AS {target}$", dockerfile.read_text(), re.M), (image, target)
                seen.add(image)
    assert set(TARGET_IMAGES) <= seen, "a listed target image is no longer deployed"


def test_trainer_control_plane_runs_its_own_image_and_trains_on_the_full_one():
    """Base/prod: the control plane runs k4d/trainer-control (no torch) and launches runs
    on k4d/trainer:gpu; the dev cluster, which trains in the trainer's pod, runs k4d/trainer."""
    for kustomization, image, launcher in (("overlays/prod", "k4d/trainer-control", "kubernetes"),
                                            ("overlays/dev", "k4d/trainer", "local")):
        docs = _render(kustomization)
        (trainer,) = [d for d in _kind(docs, "Deployment") if d["metadata"]["name"] == "trainer"]
        (container,) = trainer["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert container["image"].split(":")[0] == image and env["K4D_TRAINER_LAUNCHER"] == launcher
        if launcher == "kubernetes":
            assert env["K4D_TRAINER_IMAGE"] == "k4d/trainer:gpu"


def test_training_job_is_elastic_torchrun_on_gpus():
    (job,) = _kind(_render("jobs/train"), "PyTorchJob")
    elastic = job["spec"]["elasticPolicy"]
    assert elastic["rdzvBackend"] == "c10d"
    assert 1 <= elastic["minReplicas"] <= elastic["maxReplicas"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Worker"}, "elastic jobs have no Master"
    assert elastic["minReplicas"] <= worker["replicas"] <= elastic["maxReplicas"]
    container = worker["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"  # the training operator requires this name
    assert container["command"][:3] == ["torchrun", "--no-python", "k4d"]
    assert container["image"] == "k4d/trainer:gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
