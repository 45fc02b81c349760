"""Pipeline benchmarks (docs/benchmarks/pipeline.md).

  stages   kinematics + projection latency of the shipped 49-frame 480x720 Panda job,
           next to the 2 s goal and to MuJoCo OSMesa depth rendering of the same 49 frames
           measured in the same run (the anchor of docs/benchmarks/projection.md).
  embedded `run_embedded` wall time per job vs the sum of its stage compute, tiny model.
  cluster  the real pipeline (broker + S3 server + every service as a process): per-job
           overhead (broker hops, storage, serialization = end-to-end latency minus stage
           compute) as a share of stage compute with the tiny model, and jobs per minute
           with 20 concurrent jobs.

    python benchmarks/pipeline/bench_pipeline.py [--part stages|embedded|cluster|all]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "panda_pick"


def machine() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                  if line.startswith("Model name")), "unknown CPU")
    return f"{model}, {os.cpu_count()} cores"


def bench_stages(repeats: int = 3) -> None:
    from k4d.camera_proto import camera_from_proto
    from k4d_embedded.pipeline import StageCores, run_kinematics, run_projection
    from k4d_embedded.testing.localcluster import example_spec
    from k4d_projection.testing.mujoco_reference import MujocoReference

    spec = example_spec(EXAMPLE, None, frames=49, downscale=1)
    cores = StageCores()
    cold = time.perf_counter()
    kin = run_kinematics(spec, cores)
    run_projection(spec, kin, cores)
    cold = time.perf_counter() - cold
    kin_s, proj_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        kin = run_kinematics(spec, cores)
        t1 = time.perf_counter()
        run_projection(spec, kin, cores)
        kin_s.append(t1 - t0)
        proj_s.append(time.perf_counter() - t1)
    total = statistics.median(k + p for k, p in zip(kin_s, proj_s, strict=True))
    camera = camera_from_proto(spec.camera)
    reference = MujocoReference(cores.renderer(cores.robot("panda")).link_meshes, camera)
    try:
        reference.render_depth(kin.poses[:2])  # warm-up
        t0 = time.perf_counter()
        reference.render_depth(kin.poses)
        mujoco_s = time.perf_counter() - t0
    finally:
        reference.close()
    print("== stages: shipped Panda pick, 49 frames, 480x720")
    print(f"kinematics (actions -> IK -> FK), median of {repeats}: {statistics.median(kin_s):.3f} s")
    print(f"projection (depth, pointmap, mask, link id, rgb):    {statistics.median(proj_s):.3f} s")
    print(f"kinematics + projection: {total:.3f} s   goal 2.0 s   ratio {total / 2.0:.2f} of goal")
    print(f"anchor: MuJoCo OSMesa depth only, same 49 frames: {mujoco_s:.3f} s   "
          f"ours/anchor {statistics.median(proj_s) / mujoco_s:.2f}")
    print(f"first job in a fresh process (loads robot meshes, builds scenes): {cold:.3f} s")


def _tiny_model(workdir: Path) -> Path:
    out = workdir / "tiny"
    subprocess.run([sys.executable, "-m", "k4d.cli.main", "generate", "init-model", "--config",
                    "tiny", "--out", str(out)], check=True, capture_output=True)
    return out


def bench_embedded(model: Path, jobs: int = 5) -> None:
    from k4d_embedded.pipeline import StageCores, run_embedded
    from k4d_embedded.testing.localcluster import example_spec

    spec = example_spec(EXAMPLE, model)
    cores = StageCores()
    run_embedded(spec, None, cores=cores)  # warm: model loaded, renderer built
    shares = []
    for _ in range(jobs):
        t0 = time.perf_counter()
        result = run_embedded(spec, None, cores=cores)
        wall = time.perf_counter() - t0
        compute = sum(result.stage_seconds.values())
        shares.append((wall - compute) / compute)
    print("== embedded: tiny model, 5 frames at 32x48, 2 steps (warm process)")
    print(f"overhead outside the stages: {100 * statistics.median(shares):.1f} % of stage compute "
          f"(median of {jobs} jobs)")


def bench_cluster(model: Path, workdir: Path, sequential: int = 5, concurrent: int = 20) -> None:
    import grpc  # noqa: F401 - fail early if missing
    from k4d import local_servers
    from k4d.testing.pytest_plugin import S3ServerInfo
    from k4d_embedded.testing.localcluster import (
        STAGE_SERVICES,
        Cluster,
        example_spec,
        wait_terminal,
    )
    from kinema4d.v1 import simulator_pb2, simulator_pb2_grpc

    broker = local_servers.start_broker(log_dir=workdir / "broker")
    s3p = local_servers.start_s3_server(log_dir=workdir / "s3")
    s3 = S3ServerInfo(s3p.address, local_servers.LOCAL_S3_ACCESS_KEY,
                      local_servers.LOCAL_S3_SECRET_KEY, local_servers.LOCAL_S3_REGION)
    cluster = Cluster(broker.address, s3, workdir / "logs", model)
    try:
        for name in STAGE_SERVICES:
            cluster.start(name)
        cluster.start("simulator", worker=False)
        stub = simulator_pb2_grpc.SimulatorServiceStub(cluster.channel())
        spec = example_spec(EXAMPLE, model)
        submit = lambda: stub.Submit(simulator_pb2.SubmitRequest(spec=spec)).job_id  # noqa: E731
        wait_terminal(stub, [submit()], timeout_s=180)  # warm every worker
        shares, latencies, computes, seq_ids = [], [], [], []
        for _ in range(sequential):
            t0 = time.perf_counter()
            job_id = submit()
            seq_ids.append(job_id)
            for update in stub.Watch(simulator_pb2.WatchRequest(job_id=job_id), timeout=180):
                job = update.job
            latency = time.perf_counter() - t0
            assert job.state == simulator_pb2.JOB_STATE_SUCCEEDED, job
            compute = sum(job.result.stage_seconds.values())
            latencies.append(latency)
            computes.append(compute)
            shares.append((latency - compute) / compute)
        hops = _hop_latencies(cluster.broker, seq_ids)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda _: submit(), range(concurrent)))
        final = wait_terminal(stub, ids, timeout_s=600)
        elapsed = time.perf_counter() - t0
        ok = sum(j.state == simulator_pb2.JOB_STATE_SUCCEEDED for j in final.values())
        print("== cluster: tansu broker + moto S3 + 4 services as processes, tiny model "
              "(5 frames at 32x48, 2 steps)")
        print(f"end-to-end latency per job (Submit -> Watch sees SUCCEEDED), median of "
              f"{sequential}: {statistics.median(latencies):.3f} s; stage compute (sum of "
              f"stage_seconds, incl. each stage's S3 reads/writes): "
              f"{statistics.median(computes):.3f} s")
        print(f"pipeline overhead (broker hops, S3, serialization): "
              f"{100 * statistics.median(shares):.0f} % of stage compute")
        print("per hop (event time minus the previous event's time minus the stage's own "
              "seconds), median: " + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in hops.items()))
        print(f"throughput: {concurrent} concurrent jobs in {elapsed:.1f} s = "
              f"{60 * ok / elapsed:.1f} jobs/min ({ok}/{concurrent} succeeded)")
    finally:
        cluster.stop_all()
        s3p.stop()
        broker.stop()


def _hop_latencies(broker: str, job_ids: list[str]) -> dict[str, float]:
    """Median transport time of each hop, from the events' own timestamps: the time
    between two consecutive events of a job minus the compute the later stage reported."""
    from k4d.bus.kafka import KafkaBus
    from k4d_simulator import events as ev

    wanted = (ev.TOPIC_REQUESTED, ev.TOPIC_KINEMATICS, ev.TOPIC_PROJECTED, ev.TOPIC_COMPLETED)
    seen: dict[tuple[str, str], object] = {}
    with KafkaBus(broker, client_id="bench-reader", session_timeout_ms=3000,
                  max_poll_interval_ms=6000) as bus:
        consumer = bus.consumer(list(wanted), f"bench-reader-{time.monotonic_ns()}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 4 * len(job_ids):
            for message in consumer.poll(0.5, max_records=500):
                event = ev.decode(message.topic, message.value)
                if event.header.job_id in job_ids:
                    seen.setdefault((event.header.job_id, message.topic), event)
        consumer.close()

    def t(job_id, topic):
        return seen[(job_id, topic)].header.created_at.ToNanoseconds() / 1e9

    hops: dict[str, list[float]] = {"submit->kinematics": [], "kinematics->projection": [],
                                    "projection->generation": []}
    for j in job_ids:
        if len([k for k in seen if k[0] == j]) < 4:
            continue
        kin, proj = seen[(j, ev.TOPIC_KINEMATICS)], seen[(j, ev.TOPIC_PROJECTED)]
        done = seen[(j, ev.TOPIC_COMPLETED)]
        hops["submit->kinematics"].append(
            t(j, ev.TOPIC_KINEMATICS) - t(j, ev.TOPIC_REQUESTED) - kin.seconds)
        hops["kinematics->projection"].append(
            t(j, ev.TOPIC_PROJECTED) - t(j, ev.TOPIC_KINEMATICS) - proj.stage_seconds["projection"])
        hops["projection->generation"].append(
            t(j, ev.TOPIC_COMPLETED) - t(j, ev.TOPIC_PROJECTED)
            - done.result.stage_seconds["generation"])
    return {k: statistics.median(v) for k, v in hops.items() if v}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="all", choices=("stages", "embedded", "cluster", "all"))
    args = parser.parse_args()
    print(f"machine: {machine()}; date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.part in ("stages", "all"):
        bench_stages()
    if args.part in ("embedded", "cluster", "all"):
        with tempfile.TemporaryDirectory(prefix="k4d-bench-") as tmp:
            model = _tiny_model(Path(tmp))
            if args.part in ("embedded", "all"):
                bench_embedded(model)
            if args.part in ("cluster", "all"):
                bench_cluster(model, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
