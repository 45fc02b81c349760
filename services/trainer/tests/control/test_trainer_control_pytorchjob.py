"""The Kubernetes launcher's objects, offline (no cluster here, so nothing is applied): the
rendered PyTorchJob validates against the vendored Kubeflow CRD and the ConfigMap against the
Kubernetes schema (infra/tools/manifests.py, as the manifest tests do), its pod template is
the one of infra/k8s/jobs/train, and its conditions read as the launcher expects."""

import copy
import json
from pathlib import Path

import pytest
from k4d.settings import TrainerSettings
from k4d.testing.modules import load_path_module
from k4d_trainer.config import config_from_dict
from k4d_trainer.control import pytorchjob
from k4d_trainer.control.launcher import KubernetesLauncher, run_env
from k4d_trainer.control.settings import load_settings
from k4d_trainer.control.spec import validate_spec
from kinema4d.v1 import common_pb2, trainer_pb2

REPO = Path(__file__).resolve().parents[4]
JOB_ID = "train-18a2b3c4d5e-0123456789ab"
RUN_URI = f"s3://k4d/trainer/runs/{JOB_ID}"


@pytest.fixture(scope="module")
def tool():
    return load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")


def plan(world_size=4, sharding="fsdp2"):
    return validate_spec(trainer_pb2.TrainingJobSpec(
        base_model=common_pb2.ModelRef(name="wan2.1-i2v-14b"), dataset_uri="s3://k4d/datasets/x",
        output_model_name="kinema4d-panda", variant="pmcond", num_steps=100,
        world_size=world_size, sharding=sharding))


def render(world_size=4, sharding="fsdp2"):
    from k4d.config import load_config

    env = run_env(load_config(env={"K4D_STORE_URI": "s3://k4d", "K4D_S3_ENDPOINT": "minio:80",
                                   "K4D_KAFKA_BOOTSTRAP": "k4d-kafka-bootstrap:9092"}))
    return pytorchjob.render_run(JOB_ID, plan(world_size, sharding), RUN_URI, namespace="k4d",
                                 image="k4d/trainer:gpu", nproc_per_node="gpu", env=env)


def test_rendered_objects_validate_against_the_crd_and_the_kubernetes_schema(tool):
    job, config_map = render()
    assert tool.validate(config_map) == []
    assert tool.validate(job) == []
    created = {**job, "metadata": {**job["metadata"], "uid": "4b1f7c2e-0d7a-4c55-9a43-5c1f0e9b2a11"}}
    owned = pytorchjob.owned_by(config_map, created)
    assert tool.validate(owned) == []
    assert owned["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert "ownerReferences" not in config_map["metadata"]
    broken = copy.deepcopy(job)
    broken["spec"]["elasticPolicy"]["rdzvBakend"] = "c10d"  # the validator does bite
    assert tool.validate(broken)


def test_the_job_runs_the_config_it_ships(tool):
    job, config_map = render()
    config = json.loads(config_map["data"][pytorchjob.CONFIG_FILE])
    checked = config_from_dict(config)  # the training program's own schema accepts it
    assert checked.training.steps == 100 and checked.publish.name == "kinema4d-panda"
    assert (checked.parallelism.dp_replicate, checked.parallelism.dp_shard) == (1, -1)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun", "--no-python", "k4d", "train"]
    assert container["args"] == ["--config", "/etc/k4d/train/config.json", "--out", RUN_URI,
                                 "--resume"]
    volumes = {v["name"]: v for v in worker["template"]["spec"]["volumes"]}
    assert volumes["spec"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert worker["replicas"] == 4 and job["spec"]["elasticPolicy"]["maxReplicas"] == 4
    env = {e["name"]: e for e in container["env"]}
    assert env["K4D_STORE_URI"]["value"] == "s3://k4d"
    assert env["K4D_S3_SECRET_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "k4d-s3-credentials"
    assert "value" not in env["K4D_S3_SECRET_KEY"]  # credentials never inline
    assert env["K4D_TRAIN_JOB_ID"]["value"] == JOB_ID


def test_pod_template_is_the_one_of_jobs_train(tool):
    """Two places describe a training pod: the hand-applied jobs/train and the launcher's
    render. Everything but the config's name, the run URI and the env source must agree."""
    (shipped,) = [d for d in tool.render_spec("jobs/train") if d["kind"] == "PyTorchJob"]
    rendered, _ = render()

    def comparable(job):
        job = copy.deepcopy(job)
        pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        container = pod["containers"][0]
        for key in ("args", "env", "envFrom"):
            container.pop(key, None)
        for volume in pod["volumes"]:
            volume.get("configMap", {}).pop("name", None)
        return {"pod": pod, "nprocPerNode": job["spec"]["nprocPerNode"],
                "runPolicy": job["spec"]["runPolicy"],
                "rdzv": job["spec"]["elasticPolicy"]["rdzvBackend"],
                "restartPolicy": job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"]}

    assert comparable(rendered) == comparable(shipped)


def test_a_relaunch_gets_its_own_names(tool):
    from k4d.config import Config

    job, config_map = pytorchjob.render_run(JOB_ID, plan(), RUN_URI, namespace="k4d",
                                            image="k4d/trainer:gpu", nproc_per_node="gpu",
                                            env=run_env(Config()), launch=3)
    assert job["metadata"]["name"] == config_map["metadata"]["name"] == f"k4d-{JOB_ID}-r3"
    volumes = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]
    assert {"name": "spec", "configMap": {"name": f"k4d-{JOB_ID}-r3"}} in volumes
    assert tool.validate(job) == [] and len(job["metadata"]["name"]) <= 63


def test_elastic_bounds_follow_the_world_size():
    one, _ = render(world_size=1, sharding="ddp")
    assert one["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert one["spec"]["elasticPolicy"]["minReplicas"] == 1


def test_outcome_from_conditions():
    assert pytorchjob.job_outcome({}) is None
    running = {"status": {"conditions": [{"type": "Created", "status": "True"},
                                         {"type": "Running", "status": "True"}]}}
    assert pytorchjob.job_outcome(running) is None
    failed = {"status": {"conditions": [{"type": "Running", "status": "False"},
                                        {"type": "Failed", "status": "True"}]}}
    assert pytorchjob.job_outcome(failed) == "failed"
    assert pytorchjob.job_outcome({"status": {"conditions": [
        {"type": "Succeeded", "status": "True"}]}}) == "succeeded"


def test_settings_from_env():
    s = load_settings({"K4D_TRAINER_LAUNCHER": "kubernetes", "K4D_TRAINER_NAMESPACE": "ml",
                       "K4D_TRAINER_IMAGE": "reg/k4d/trainer:1.2-gpu", "K4D_TRAINER_POLL_S": "0.5"})
    assert (s.launcher, s.namespace, s.image, s.poll_s) == (
        "kubernetes", "ml", "reg/k4d/trainer:1.2-gpu", 0.5)
    from k4d.errors import InvalidArgument

    for env in ({"K4D_TRAINER_LAUNCHER": "slurm"}, {"K4D_TRAINER_POLL_S": "nan"},
                {"K4D_TRAINER_MAX_RESTARTS": "-1"}, {"K4D_TRAINER_NPROC_PER_NODE": "many"}):
        with pytest.raises(InvalidArgument) as err:
            load_settings(env)
        assert err.value.violations[0].field == next(iter(env))


def test_kubernetes_launcher_refuses_to_start_outside_a_cluster(monkeypatch):
    from k4d.config import Config
    from k4d.errors import FailedPrecondition

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(FailedPrecondition, match="service-account token"):
        KubernetesLauncher(Config(), TrainerSettings(launcher="kubernetes"))
