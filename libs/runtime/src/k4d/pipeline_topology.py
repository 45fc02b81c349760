"""The pipeline topology, written once as data: every Kafka topic with its event type, and
every stage with the topics it consumes and produces, its consumer group and the
`SimulationResult` fields it contributes.

Everything else is derived from this table or checked against it by
`tests/contract/test_pipeline_topology.py`: the topic names of `k4d.bus.topics` and the
header of `proto/kinema4d/v1/events.proto`, the KafkaTopics of `infra/k8s/base/kafka`
(partitions, retention, a `.dlq` each), the KEDA triggers (topic and consumer group of the
scaled service's stage), the Tiltfile's `TOPICS`, the stage workers' input topics and
groups (`k4d.workers` entry points), and the fields of `SimulationResult`.

Adding a stage (an evaluation stage, a new trainer event) means: its topics and a `Stage`
row here, the service package, and whatever the contract test then names as missing
(docs/adding-a-service.md). Import-light on purpose: no protobuf import until
`event_type` is called.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from k4d.bus import topics as t

DAY_MS = 24 * 3600 * 1000
RETAIN_FOREVER = -1
DLQ_PARTITIONS_MAX = 3
DLQ_RETENTION_MS = 30 * DAY_MS
PIPELINES = ("simulation", "training", "models", "evaluation")


@dataclass(frozen=True)
class Topic:
    name: str
    event: str            # message name in package kinema4d.v1 (events.proto)
    partitions: int       # bounds the parallelism of each consumer group on it
    retention_ms: int     # RETAIN_FOREVER = never deleted
    description: str


@dataclass(frozen=True)
class Stage:
    """One consumer of the bus (or producer, for the front doors)."""

    name: str                    # EventHeader.stage of the events it emits
    service: str                 # services/<service>: the package and deployment running it
    consumes: tuple[str, ...]    # input topics (empty: it only produces, e.g. from an RPC)
    produces: tuple[str, ...]    # every topic it publishes to
    group_id: str                # consumer group; "" = one group per process (broadcast)
    pipeline: str                # one of PIPELINES
    result_fields: tuple[str, ...] = ()  # SimulationResult fields it fills in
    description: str = ""


TOPICS: tuple[Topic, ...] = (
    Topic(t.SIM_REQUESTED, "SimulationRequested", 12, 7 * DAY_MS, "a simulation job was submitted"),
    Topic(t.SIM_KINEMATICS, "KinematicsCompleted", 12, 7 * DAY_MS,
          "kinematics done: joints and link poses stored"),
    Topic(t.SIM_PROJECTED, "ProjectionCompleted", 12, 7 * DAY_MS,
          "projection done: the robot condition stored"),
    Topic(t.SIM_COMPLETED, "SimulationCompleted", 12, 7 * DAY_MS, "the job's result is stored"),
    Topic(t.SIM_FAILED, "SimulationFailed", 12, 7 * DAY_MS, "the job failed or was cancelled"),
    Topic(t.SIM_PROGRESS, "SimulationProgress", 12, 1 * DAY_MS, "progress of a running stage"),
    Topic(t.TRAIN_REQUESTED, "TrainingRequested", 3, 30 * DAY_MS, "a training job was submitted"),
    Topic(t.TRAIN_EVENTS, "TrainingEvent", 3, 30 * DAY_MS, "training progress and state changes"),
    Topic(t.MODEL_PUBLISHED, "ModelPublished", 1, RETAIN_FOREVER,
          "a model version is in the registry; generators may hot-reload it"),
)

# The simulation stages in pipeline order (the embedded runner runs them in this order),
# then the other consumers and producers of the bus.
STAGES: tuple[Stage, ...] = (
    Stage("submit", "simulator", consumes=(), produces=(t.SIM_REQUESTED,), group_id="",
          pipeline="simulation", result_fields=("presigned_urls", "stages"),
          description="SimulatorService.Submit; presigns result URLs on Get; folds every "
                      "stage's outcome (time, failed frames, warnings) into the result"),
    Stage("kinematics", "kinematics", consumes=(t.SIM_REQUESTED,),
          produces=(t.SIM_KINEMATICS, t.SIM_FAILED), group_id="k4d-kinematics",
          pipeline="simulation", result_fields=("joints", "poses"),
          description="actions -> IK / joint mapping -> full-tree FK"),
    Stage("projection", "projection", consumes=(t.SIM_KINEMATICS,),
          produces=(t.SIM_PROJECTED, t.SIM_FAILED), group_id="k4d-projection",
          pipeline="simulation", result_fields=("robot_pointmap", "robot_mask", "robot_rgb"),
          description="ray-cast every link mesh into the camera"),
    Stage("generation", "generator", consumes=(t.SIM_PROJECTED,),
          produces=(t.SIM_COMPLETED, t.SIM_FAILED, t.SIM_PROGRESS), group_id="k4d-generator",
          pipeline="simulation",
          result_fields=("rgb", "pointmap", "rgb_video_uri", "model", "stage_seconds"),
          description="Kinema4D DiT sampling (or the static world without a model)"),
    Stage("reload", "generator", consumes=(t.MODEL_PUBLISHED,), produces=(), group_id="",
          pipeline="models", description="every generator process hot-reloads its model"),
    Stage("registry", "generator", consumes=(), produces=(t.MODEL_PUBLISHED,), group_id="",
          pipeline="models", description="`k4d generate publish` / the registry's publish API"),
    Stage("train-submit", "trainer", consumes=(), produces=(t.TRAIN_REQUESTED,), group_id="",
          pipeline="training", description="TrainerService / `k4d train --submit` queue a job"),
    Stage("trainer", "trainer", consumes=(t.TRAIN_REQUESTED,),
          produces=(t.TRAIN_EVENTS, t.MODEL_PUBLISHED), group_id="k4d-trainer",
          pipeline="training", description="fine-tuning jobs; publishes the trained model"),
)

# Who may call which RPC (issue 47), beside the stages whose services serve them: one row
# per gRPC service, one entry per RPC naming the roles allowed to call it. `user`s reach
# only the front door, and there only their own jobs (the servicer checks ownership);
# `service` is what the stages and composers (policy evaluation, datagen) call on each
# other; `operator`s may call everything. Health checks are open; reflection needs a
# token of any role. `k4d.auth` enforces this table; tests/contract checks that it names
# every RPC of proto/ and that the NetworkPolicies of infra/k8s follow from it.
USER, OPERATOR, SERVICE = "user", "operator", "service"
ROLES = (USER, OPERATOR, SERVICE)
_ANYONE = (USER, OPERATOR, SERVICE)
_PLATFORM = (OPERATOR, SERVICE)
_OPERATORS = (OPERATOR,)
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = ("grpc.reflection.v1alpha.ServerReflection",
                       "grpc.reflection.v1.ServerReflection")


@dataclass(frozen=True)
class RpcAccess:
    """The roles allowed on each RPC of one gRPC service, served by `service`."""

    grpc_service: str                            # full name, e.g. kinema4d.v1.SimulatorService
    service: str                                 # services/<service> serving it
    methods: tuple[tuple[str, tuple[str, ...]], ...]  # (RPC name, allowed roles)


RPC_ACCESS: tuple[RpcAccess, ...] = (
    RpcAccess("kinema4d.v1.SimulatorService", "simulator", (
        ("Submit", _ANYONE), ("Get", _ANYONE), ("Watch", _ANYONE), ("Cancel", _ANYONE),
        ("ListJobs", _ANYONE))),
    RpcAccess("kinema4d.v1.KinematicsService", "kinematics", (
        ("ListRobots", _PLATFORM), ("DescribeRobot", _PLATFORM),
        ("RegisterRobot", _OPERATORS), ("ForwardKinematics", _PLATFORM),
        ("InverseKinematics", _PLATFORM), ("SolveTrajectory", _PLATFORM))),
    RpcAccess("kinema4d.v1.ProjectionService", "projection", (
        ("RenderRobot", _PLATFORM), ("EncodePointmap", _PLATFORM),
        ("DecodePointmap", _PLATFORM))),
    RpcAccess("kinema4d.v1.GeneratorService", "generator", (
        ("Generate", _PLATFORM), ("LoadModel", _OPERATORS), ("ListModels", _PLATFORM),
        ("GetModelInfo", _PLATFORM))),
    RpcAccess("kinema4d.v1.TrainerService", "trainer", (
        ("SubmitTrainingJob", _OPERATORS), ("GetTrainingJob", _OPERATORS),
        ("CancelTrainingJob", _OPERATORS), ("ListTrainingJobs", _OPERATORS),
        ("WatchTrainingJob", _OPERATORS))),
    RpcAccess("kinema4d.v1.PolicyService", "policy", (
        ("Reset", _PLATFORM), ("Act", _PLATFORM))),
)


@functools.cache
def rpc_roles() -> dict[str, tuple[str, ...]]:
    """Full method path (`/package.Service/Method`) -> the roles allowed to call it."""
    return {f"/{access.grpc_service}/{method}": roles
            for access in RPC_ACCESS for method, roles in access.methods}


def roles_for(method: str) -> tuple[str, ...] | None:
    """The roles allowed on `method` (a full path); None for the open health service.
    Reflection: any role. A method missing from the table: operators only."""
    service = method.lstrip("/").rpartition("/")[0]
    if service == HEALTH_SERVICE:
        return None
    if service in REFLECTION_SERVICES:
        return ROLES
    return rpc_roles().get(method, _OPERATORS)


def user_facing_services() -> tuple[str, ...]:
    """Services with an RPC that users may call: reachable from outside the platform."""
    return tuple(a.service for a in RPC_ACCESS if any(USER in r for _, r in a.methods))


def service_called_services() -> tuple[str, ...]:
    """Services with an RPC other platform services may call (each other, composers)."""
    return tuple(a.service for a in RPC_ACCESS if any(SERVICE in r for _, r in a.methods))


# The simulator front door folds every simulation topic (and their dead letters) into
# its job records.
JOB_STATE_TOPICS: tuple[str, ...] = tuple(
    topic.name for topic in TOPICS if topic.name.startswith("k4d.sim."))


def topic_names() -> tuple[str, ...]:
    return tuple(topic.name for topic in TOPICS)


def topic(name: str) -> Topic:
    for candidate in TOPICS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"not a pipeline topic: {name!r}")


def stage(name: str) -> Stage:
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"not a pipeline stage: {name!r}")


def simulation_stages() -> tuple[Stage, ...]:
    """The Kafka stages of a simulation job, in pipeline order."""
    return tuple(s for s in STAGES if s.pipeline == "simulation" and s.consumes)


def stages_of(service: str) -> tuple[Stage, ...]:
    return tuple(s for s in STAGES if s.service == service)


def result_field_owner() -> dict[str, str]:
    """SimulationResult field -> the stage that fills it in."""
    return {field: s.name for s in STAGES for field in s.result_fields}


def event_type(topic_name: str):
    """The kinema4d.v1 message class of `topic_name`'s payloads."""
    from kinema4d.v1 import events_pb2

    return getattr(events_pb2, topic(topic_name).event)


def _cell(items: tuple[str, ...]) -> str:
    return ", ".join(f"`{item}`" for item in items) or "-"


def markdown_table() -> str:
    """The stages as a markdown table (docs/architecture.md embeds it; a test keeps the
    two equal): `python -m k4d.pipeline_topology`."""
    rows = ["| stage | service | consumes | produces | consumer group | result fields |",
            "|---|---|---|---|---|---|"]
    for s in STAGES:
        group = f"`{s.group_id}`" if s.group_id else "per process" if s.consumes else "-"
        rows.append(f"| {s.name} | {s.service} | {_cell(s.consumes)} | {_cell(s.produces)} | "
                    f"{group} | {_cell(s.result_fields)} |")
    rows += ["", "| topic | event | partitions | retention |", "|---|---|---|---|"]
    for topic in TOPICS:
        retention = "forever" if topic.retention_ms == RETAIN_FOREVER else \
            f"{topic.retention_ms // DAY_MS} d"
        rows.append(f"| `{topic.name}` | {topic.event} | {topic.partitions} | {retention} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
