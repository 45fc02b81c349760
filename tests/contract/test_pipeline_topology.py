"""Everything that names a topic, a stage or a consumer group agrees with the one table,
`k4d.pipeline_topology`: the runtime's topic constants, events.proto's header and message
types, the Kafka manifests (topics, partitions, retention, DLQs), the KEDA triggers, the
Tiltfile, the stage workers' wiring and the SimulationResult fields."""

from __future__ import annotations

import re
import threading
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import starlark_go
from k4d import pipeline_topology as topology
from k4d.bus import StageWorker, topics
from k4d.bus.memory import InProcessBus
from k4d.config import Config
from k4d.store import LocalStore
from k4d.testing.modules import load_path_module
from kinema4d.v1 import events_pb2, simulator_pb2

REPO = Path(__file__).resolve().parents[2]
EVENTS_PROTO = REPO / "proto/kinema4d/v1/events.proto"


def _manifests_tool():
    return load_path_module(REPO / "infra/tools/manifests.py", "k4d_infra_manifests")


def _render(path: str) -> list[dict]:
    tool = _manifests_tool()
    try:
        return tool.render(REPO / "infra/k8s" / path)
    except tool.KubectlMissing as error:
        pytest.fail(str(error), pytrace=False)


def test_the_table_is_consistent():
    names = topology.topic_names()
    assert len(names) == len(set(names))
    stage_names = [s.name for s in topology.STAGES]
    assert len(stage_names) == len(set(stage_names))
    for stage in topology.STAGES:
        assert stage.consumes or stage.produces, stage.name
        for name in stage.consumes + stage.produces:
            assert name in names, f"stage {stage.name} names unknown topic {name}"
        assert stage.pipeline in topology.PIPELINES, stage.name
        assert (REPO / "services" / stage.service / "pyproject.toml").is_file(), stage.service
    # Every topic has a producer.
    produced = {name for s in topology.STAGES for name in s.produces}
    assert produced == set(names)
    chain = topology.simulation_stages()
    assert [s.name for s in chain] == ["kinematics", "projection", "generation"]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert set(downstream.consumes) <= set(upstream.produces), (upstream.name, downstream.name)
    assert topology.stage("submit").produces == (chain[0].consumes[0],)
    for name in (topics.TRAIN_REQUESTED, topics.TRAIN_EVENTS, topics.MODEL_PUBLISHED):
        assert name in names


def test_runtime_topic_constants_are_the_tables():
    assert set(topics.ALL_TOPICS) == set(topology.topic_names())
    assert topology.JOB_STATE_TOPICS == (topics.SIM_REQUESTED, topics.SIM_KINEMATICS,
                                         topics.SIM_PROJECTED, topics.SIM_COMPLETED,
                                         topics.SIM_FAILED, topics.SIM_PROGRESS)


def test_events_proto_header_and_messages_match():
    header = dict(re.findall(r"^//\s+(k4d\.[a-z.]+)\s+(\w+)$", EVENTS_PROTO.read_text(), re.M))
    assert header == {topic.name: topic.event for topic in topology.TOPICS}
    for topic in topology.TOPICS:
        message = topology.event_type(topic.name)
        assert message is getattr(events_pb2, topic.event)
        # Every payload carries the common header (job id, stage, attempt, traceparent).
        assert message.DESCRIPTOR.fields_by_name["header"].message_type.name == "EventHeader"


def test_event_header_documents_every_stage_name():
    documented = re.search(r'Stage that emitted the event: ([^;]*?)\.\n', EVENTS_PROTO.read_text().replace(
        "\n  //", "")).group(1)
    for stage in topology.STAGES:
        if stage.pipeline == "simulation":
            assert f'"{stage.name}"' in documented, stage.name


@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/prod"])
def test_kafka_topics_in_the_manifests(overlay):
    docs = _render(overlay)
    rendered = {d["spec"]["topicName"]: d["spec"] for d in docs if d["kind"] == "KafkaTopic"}
    expected = set(topology.topic_names()) | {topics.dlq(n) for n in topology.topic_names()}
    assert set(rendered) == expected
    if overlay == "overlays/dev":
        return  # the dev overlay shrinks partitions and retention on purpose
    for topic in topology.TOPICS:
        spec = rendered[topic.name]
        assert spec["partitions"] == topic.partitions, topic.name
        assert int(spec["config"]["retention.ms"]) == topic.retention_ms, topic.name
        dead = rendered[topics.dlq(topic.name)]
        assert dead["partitions"] <= min(topic.partitions, topology.DLQ_PARTITIONS_MAX)
        assert int(dead["config"]["retention.ms"]) == topology.DLQ_RETENTION_MS


def test_keda_triggers_follow_the_scaled_services_stage():
    docs = _render("overlays/prod")
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    assert scaled
    for obj in scaled:
        service = obj["spec"]["scaleTargetRef"]["name"]
        consuming = [s for s in topology.stages_of(service) if s.consumes and s.group_id]
        assert len(consuming) == 1, f"{service}: scale on which stage?"
        (stage,) = consuming
        for trigger in obj["spec"]["triggers"]:
            assert trigger["type"] == "kafka"
            assert trigger["metadata"]["topic"] in stage.consumes, service
            assert trigger["metadata"]["consumerGroup"] == stage.group_id, service
            partitions = topology.topic(trigger["metadata"]["topic"]).partitions
            assert obj["spec"]["maxReplicaCount"] <= partitions, service


def test_tiltfile_topics_are_the_tables():
    text = (REPO / "Tiltfile").read_text()
    block = re.search(r"^TOPICS = \[.*?^\]", text, re.S | re.M)
    assert block, "the Tiltfile lost its TOPICS list"
    interpreter = starlark_go.Starlark()
    interpreter.exec(block.group(0))
    assert list(interpreter.get("TOPICS")) == list(topology.topic_names())


def _build_worker(name: str, config, bus, store):
    """The stage worker `k4d serve <name> --worker` would run."""
    try:
        from k4d.service import load_service
    except ImportError:  # the plug-in protocol before k4d.service: a k4d.workers function
        (entry,) = [e for e in entry_points(group="k4d.workers") if e.name == name]
        return entry.load()(config, bus, store)
    return load_service(name, config, with_worker=True).build_worker(bus, store)


def _wiring(name: str, tmp_path, monkeypatch) -> set[tuple[tuple[str, ...], str]]:
    """(input topics, group id) of every StageWorker the service's worker creates, while
    built and while run with its stop event already set (some create theirs in run)."""
    created = []
    original = StageWorker.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(StageWorker, "__init__", recording)
    worker = _build_worker(name, Config(service_name=name), InProcessBus(), LocalStore(tmp_path))
    stop = threading.Event()
    stop.set()
    runner = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive(), f"{name}: worker.run did not return on a set stop event"
    return {(tuple(w.topics), w.group_id) for w in created}


def _topic_constants(module) -> set[str]:
    names = set(topology.topic_names())
    return {value for value in vars(module).values() if isinstance(value, str) and value in names}


@pytest.mark.parametrize("entry", sorted(entry_points(group="k4d.workers"), key=lambda e: e.name),
                         ids=lambda e: e.name)
def test_stage_workers_are_wired_as_the_table_says(entry, tmp_path, monkeypatch):
    for key in ("K4D_GENERATOR_MODEL", "K4D_GENERATOR_DEVICE"):
        monkeypatch.delenv(key, raising=False)
    wired = _wiring(entry.name, tmp_path, monkeypatch)
    assert wired, f"{entry.name}: its worker creates no StageWorker"
    stages = [s for s in topology.stages_of(entry.name) if s.consumes]
    for stage in stages:
        matching = [g for tps, g in wired if tps == stage.consumes]
        assert matching, f"{entry.name}: no worker consumes {stage.consumes} (stage {stage.name})"
        if stage.group_id:
            assert matching == [stage.group_id], (stage.name, matching)
        else:  # one group per process: every replica sees every message
            assert all(g not in {s.group_id for s in topology.STAGES} for g in matching)
    assert len(wired) == len(stages), f"{entry.name} runs workers the table does not list"
    # The worker module publishes only to the topics its stages declare.
    module = __import__(entry.value.split(":")[0], fromlist=["_"])
    declared = {n for s in topology.stages_of(entry.name) for n in s.consumes + s.produces}
    assert _topic_constants(module) <= declared, entry.name


def test_every_stage_with_input_has_a_worker_entry_point():
    workers = {e.name for e in entry_points(group="k4d.workers")}
    for stage in topology.STAGES:
        if not stage.consumes:
            continue
        project = tomllib.loads((REPO / "services" / stage.service / "pyproject.toml").read_text())
        declared = project["project"].get("entry-points", {}).get("k4d.workers", {})
        if stage.service in workers or declared:
            assert stage.service in declared, stage.service
        else:  # not built yet (the trainer before its control plane): not deployed either
            assert stage.service not in {e.name for e in entry_points(group="k4d.services")}


def test_every_result_field_has_one_owning_stage():
    owners = topology.result_field_owner()
    fields = [f.name for f in simulator_pb2.SimulationResult.DESCRIPTOR.fields]
    assert sum(len(s.result_fields) for s in topology.STAGES) == len(owners), "a field owned twice"
    missing = [f for f in fields if f not in owners]
    assert not missing, (f"SimulationResult fields {missing} have no stage in "
                         "k4d.pipeline_topology.STAGES (result_fields)")
    assert set(owners) <= set(fields), set(owners) - set(fields)


def test_architecture_doc_shows_the_table():
    text = (REPO / "docs/architecture.md").read_text()
    block = re.search(r"<!-- pipeline-topology:begin -->\n(.*?)\n<!-- pipeline-topology:end -->",
                      text, re.S)
    assert block, "docs/architecture.md lost its pipeline-topology block"
    assert block.group(1) == topology.markdown_table(), (
        "docs/architecture.md's pipeline table is stale: paste `python -m k4d.pipeline_topology`")
