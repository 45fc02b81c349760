"""The Kubernetes objects of one training run (docs/adr/001-trainer-job-kind.md): a ConfigMap
with the run's recipe config and an elastic Kubeflow PyTorchJob (kubeflow.org/v1) whose
workers run `torchrun --no-python k4d train --config CFG --out RUN_URI --resume`.

Pure rendering (dicts in, dicts out); `kube.KubeClient` creates them. The pod template is
the one of infra/k8s/jobs/train (tests/control check the two agree and that the render
validates against the vendored CRD). The runtime settings travel as literal env values
(the k4d-config ConfigMap has a content-hash name only kustomize knows), the S3 keys as
references to the k4d-s3-credentials Secret.
"""

from __future__ import annotations

import json

from k4d_trainer.control.spec import RunPlan

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONFIG_MOUNT = "/etc/k4d/train"
CONFIG_FILE = "config.json"
S3_SECRET = "k4d-s3-credentials"
RUN_SERVICE_ACCOUNT = "trainer-run"
# The runtime settings a training pod needs (the rest are server settings).
RUN_ENV_VARS = ("K4D_KAFKA_BOOTSTRAP", "K4D_STORE_URI", "K4D_S3_ENDPOINT", "K4D_S3_SECURE",
                "K4D_S3_REGION", "K4D_LOG_LEVEL", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_TRACES_EXPORTER")


def object_name(job_id: str, launch: int = 1) -> str:
    """`k4d-<job id>`, `k4d-<job id>-r<n>` for the n-th launch (a relaunch must not collide
    with the previous job while it is being deleted): a DNS-1123 label, job ids being
    `train-<hex>-<hex>` (30 characters)."""
    return f"k4d-{job_id}" if launch <= 1 else f"k4d-{job_id}-r{launch}"


def _labels(job_id: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "trainer", "app.kubernetes.io/part-of": "kinema4d",
            "app.kubernetes.io/component": "training-run", "k4d.io/job-id": job_id}


def train_args(run_uri: str, config_path: str, resume: bool) -> list[str]:
    """`k4d train` arguments of a run (shared by the local launcher and the pods); the
    config file holds everything else (data, steps, publishing)."""
    return ["--config", config_path, "--out", run_uri] + (["--resume"] if resume else [])


def render_config_map(job_id: str, plan: RunPlan, namespace: str, launch: int = 1) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": object_name(job_id, launch), "namespace": namespace,
                         "labels": _labels(job_id)},
            "data": {CONFIG_FILE: json.dumps(plan.config, indent=2, sort_keys=True)}}


def render_pytorchjob(job_id: str, plan: RunPlan, run_uri: str, *, namespace: str, image: str,
                      nproc_per_node: str, env: dict[str, str], launch: int = 1) -> dict:
    """The PyTorchJob of one run: one GPU per pod, `world_size` pods, elastic down to one
    (the run derives its data sharding from the world size it gets). Every start (first,
    or after a node loss) passes --resume, which continues from the newest complete
    checkpoint in RUN_URI or starts fresh when there is none."""
    name = object_name(job_id, launch)
    nodes = max(1, plan.nproc)
    container_env = [{"name": k, "value": env[k]} for k in RUN_ENV_VARS if env.get(k)]
    container_env += [{"name": "OTEL_SERVICE_NAME", "value": "trainer-run"},
                      {"name": "K4D_TRAIN_JOB_ID", "value": job_id}]
    container_env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": S3_SECRET, "key": key}}}
                      for var, key in (("K4D_S3_ACCESS_KEY", "accessKey"),
                                       ("K4D_S3_SECRET_KEY", "secretKey"))]
    container = {
        # The training operator requires this container name.
        "name": "pytorch", "image": image,
        "command": ["torchrun", "--no-python", "k4d", "train"],
        "args": train_args(run_uri, f"{CONFIG_MOUNT}/{CONFIG_FILE}", resume=True),
        "env": container_env,
        "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1},
                      "limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "spec", "mountPath": CONFIG_MOUNT, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "cache", "mountPath": "/home/k4d/.cache"},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    pod_spec = {
        "serviceAccountName": RUN_SERVICE_ACCOUNT, "automountServiceAccountToken": False,
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "spec", "configMap": {"name": name}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}},
                    {"name": "cache", "emptyDir": {"sizeLimit": "200Gi"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}],
    }
    labels = _labels(job_id)
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nprocPerNode": nproc_per_node,
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": nodes,
                              "maxRestarts": 10},
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3,
                          "ttlSecondsAfterFinished": 86400},
            "pytorchReplicaSpecs": {"Worker": {
                "replicas": nodes, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": labels}, "spec": pod_spec}}},
        },
    }


def render_run(job_id: str, plan: RunPlan, run_uri: str, *, namespace: str, image: str,
               nproc_per_node: str, env: dict[str, str], launch: int = 1) -> list[dict]:
    """[PyTorchJob, ConfigMap] of one run, in creation order: the ConfigMap is then made
    owned by the created job (`owned_by`), so the job's TTL removes both. Its pods wait
    for the ConfigMap volume the few milliseconds until it exists."""
    return [render_pytorchjob(job_id, plan, run_uri, namespace=namespace, image=image,
                              nproc_per_node=nproc_per_node, env=env, launch=launch),
            render_config_map(job_id, plan, namespace, launch)]


def owned_by(obj: dict, owner: dict) -> dict:
    """`obj` with an ownerReference to the created `owner` (its uid comes from the API):
    Kubernetes garbage-collects it with its owner."""
    meta = owner["metadata"]
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                 "uid": meta["uid"], "blockOwnerDeletion": False, "controller": False}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [reference]}}


def job_outcome(pytorchjob: dict) -> str | None:
    """"succeeded" / "failed" from the PyTorchJob's status conditions; None while running."""
    for condition in (pytorchjob.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
            return condition["type"].lower()
    return None
