"""`k4d policy-eval`: every (policy, task, scene) in both worlds, judged in each.

One episode = one (policy, task, scene index): the same scene, the same policy seed, run in
MuJoCo physics and in the world model. Its record (`episodes/<policy>__<task>__<index>.json`
under the output URI, a local folder or s3://bucket/prefix) is written when both worlds
are done, with the frames of both (`clips/...npz`); a rerun skips recorded episodes of the
same settings, so a run is resumable per episode and the pods of an Indexed Job (scenes
sharded by index) share one output. The report (`report.py`) is computed from the records.

Workers are processes (spawn), each loading the world model once; the parent only hands out
episode keys and counts them on a progress bar.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import io
import json
import multiprocessing
import os
import re
import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np
from k4d_tabletop.tasks import DURATION_S

from k4d_policy.remote import DEFAULT_TIMEOUT_S

WORLDS = ("physics", "world_model")
DEFAULT_CHUNK = 6


@dataclass
class EvalConfig:
    policies: list[str]
    tasks: list[str]
    scenes: int
    seed: int
    out: str
    model: str = ""
    mode: str = "closed"
    chunk: int = DEFAULT_CHUNK
    workers: int = 1
    progress: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    shard_index: int | None = None
    shard_count: int | None = None
    robot: str = "panda"
    framing: str = "wide"  # the scenes' camera (k4d_tabletop.scene.FRAMINGS): the model's data's
    clip: tuple[int, int, int] = (13, 96, 144)  # (T, H, W): the model's; set by `plan_clip`
    model_name: str = ""
    model_digest: str = ""  # sha256 of the model's k4d_model.json: its output options change results
    extra: dict = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return self.clip[0] - 1

    @property
    def dt_s(self) -> float:
        return DURATION_S / self.horizon

    def fingerprint(self) -> str:
        """What an episode record depends on (a rerun with other settings recomputes it)."""
        key = {k: getattr(self, k) for k in ("seed", "mode", "chunk", "robot", "model_name", "model_digest")}
        key["clip"] = list(self.clip)
        if self.framing != "wide":  # records made before framings existed keep their key
            key["framing"] = self.framing
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def episode_name(policy: str, task: str, index: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", policy).strip("_")
    return f"{safe}__{task}__{index:04d}"


def episode_keys(cfg: EvalConfig) -> list[tuple[str, str, int]]:
    indices = range(cfg.scenes) if cfg.shard_index is None else range(cfg.shard_index, cfg.scenes, cfg.shard_count)
    return [(p, t, i) for i in indices for t in cfg.tasks for p in cfg.policies]


def open_output(uri: str):
    """The output folder or bucket prefix as an object store."""
    from pathlib import Path

    from k4d.store import open_store

    if "://" not in uri:
        Path(uri).mkdir(parents=True, exist_ok=True)
        uri = Path(uri).resolve().as_uri()
    return open_store(uri)


def read_record(store, name: str) -> dict | None:
    key = f"episodes/{name}.json"
    if not store.exists(key):
        return None
    try:
        return json.loads(store.get_bytes(key))
    except (ValueError, OSError):
        return None  # a damaged record is recomputed


# --- one episode (in a worker process) -------------------------------------------------

_WORKER: dict = {}


def _world_model(cfg: EvalConfig):
    from k4d_policy.worlds import WorldModel

    if "model" not in _WORKER:
        _WORKER["model"] = WorldModel(cfg.model or None)
    return _WORKER["model"]


def _init_worker(threads: int) -> None:
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


def run_world(cfg: EvalConfig, world_name: str, policy_spec: str, scenario, episode_seed: int) -> tuple[dict, dict | None]:
    """One world's episode -> (its record, its clip or None). Never raises."""
    from k4d.camera import Camera

    from k4d_policy.policies import EpisodeContext
    from k4d_policy.remote import open_policy
    from k4d_policy.runner import run_episode
    from k4d_policy.scenes import robot_bundle
    from k4d_policy.worlds import PhysicsWorld, WorldModelWorld

    started = time.perf_counter()
    policy = None
    try:
        bundle = robot_bundle(cfg.robot)
        if world_name == "physics":
            world = PhysicsWorld(scenario, bundle, cfg.dt_s)
        else:
            world = WorldModelWorld(scenario, bundle, _world_model(cfg), cfg.dt_s, seed=episode_seed)
        policy = open_policy(policy_spec, cfg.timeout_s)
        context = EpisodeContext(f"{episode_name(policy_spec, scenario.task, scenario.index)}/{world_name}",
                                 scenario.plan.text, scenario.task, cfg.robot, list(bundle.robot.joint_names),
                                 Camera.from_dict(scenario.camera_json), cfg.dt_s, cfg.chunk, cfg.horizon,
                                 None, seed=episode_seed)
        outcome = run_episode(policy, world, context, mode=cfg.mode, keep_clip=True)
        record = {"status": outcome.status, "success": outcome.success, "judge": outcome.judge,
                  "error": outcome.error, "acts": outcome.acts, "seconds": round(outcome.seconds, 3)}
        return record, outcome.clip
    except Exception as exc:  # a broken world or policy object: this episode only
        return ({"status": "error", "success": None, "judge": {}, "acts": 0,
                 "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=4)[-2000:],
                 "seconds": round(time.perf_counter() - started, 3)}, None)
    finally:
        if policy is not None:
            policy.close()


@functools.lru_cache(maxsize=32)
def _scenario(seed: int, index: int, task: str, height: int, width: int, robot: str,
              framing: str):
    """Every policy meets the same scene: drawn once per process (IK feasibility checks)."""
    from k4d_policy.scenes import scenario

    return scenario(seed, index, task, height, width, robot, framing=framing)


def run_one(cfg: EvalConfig, policy: str, task: str, index: int) -> dict:
    """Both worlds of one (policy, task, scene); writes and returns the record."""
    store = open_output(cfg.out)
    name = episode_name(policy, task, index)
    record = {"policy": policy, "task": task, "index": index, "seed": cfg.seed, "episode": name,
              "fingerprint": cfg.fingerprint()}
    try:
        sc = _scenario(cfg.seed, index, task, cfg.clip[1], cfg.clip[2], cfg.robot, cfg.framing)
    except Exception as exc:
        for w in WORLDS:
            record[w] = {"status": "error", "success": None, "error": f"scene: {type(exc).__name__}: {exc}"}
        store.put_bytes(f"episodes/{name}.json", json.dumps(record, indent=1).encode(), "application/json")
        return record
    record["text"] = sc.plan.text
    episode_seed = int(cfg.seed) * 100_000 + index
    clips = {}
    for w in WORLDS:
        record[w], clip = run_world(cfg, w, policy, sc, episode_seed)
        if clip is not None:
            clips[f"{w}_rgb"] = clip["rgb"]
            clips[f"{w}_joints"] = clip["joints"]
    if clips:
        buf = io.BytesIO()
        np.savez_compressed(buf, **clips)
        store.put_bytes(f"clips/{name}.npz", buf.getvalue())
    # The record last: its presence means the episode is complete.
    store.put_bytes(f"episodes/{name}.json", json.dumps(record, indent=1).encode(), "application/json")
    return record


def _run_one_in_worker(cfg_dict: dict, policy: str, task: str, index: int) -> dict:
    cfg = EvalConfig(**cfg_dict)
    return run_one(cfg, policy, task, index)


# --- the whole run ---------------------------------------------------------------------


def plan_clip(cfg: EvalConfig) -> EvalConfig:
    """Fix the clip (T, H, W) and model name from the model's config without loading it
    where possible (a local model directory), else by loading it here."""
    from pathlib import Path

    from k4d_policy.worlds import default_model_ref, resolve_model_ref

    ref = resolve_model_ref(cfg.model or default_model_ref())
    conf = Path(ref) / "k4d_model.json" if ref else None
    if conf is not None and conf.is_file():
        data = json.loads(conf.read_text())
        cfg.model_digest = hashlib.sha256(conf.read_bytes()).hexdigest()[:16]
        cfg.clip = (int(data["num_frames"]), int(data["height"]), int(data["width"]))
        cfg.model_name = f"{data.get('name', '')}/{data.get('version', '')}"
    else:
        model = _world_model(cfg)
        cfg.clip, cfg.model_name = model.clip_shape, model.name
    cfg.model = ref
    return cfg


def evaluate(cfg: EvalConfig) -> dict:
    """Run every missing episode; returns {"ran": n, "skipped": n, "seconds": s}."""
    from tqdm import tqdm

    started = time.perf_counter()
    store = open_output(cfg.out)
    keys = episode_keys(cfg)
    fingerprint = cfg.fingerprint()
    todo = []
    for key in keys:
        rec = read_record(store, episode_name(*key))
        if rec is None or rec.get("fingerprint") != fingerprint:
            todo.append(key)
    bar = tqdm(total=len(keys), initial=len(keys) - len(todo), desc="episodes", unit="ep",
               disable=not cfg.progress, dynamic_ncols=True)
    try:
        if cfg.workers <= 1 or len(todo) <= 1:
            _init_worker(1)
            for key in todo:
                run_one(cfg, *key)
                bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            # One thread per worker: on a shared 2-core machine two threads per process
            # ran the demo model's transformer 11x slower (docs/benchmarks.md).
            threads = 1
            with cf.ProcessPoolExecutor(max_workers=cfg.workers, mp_context=ctx, initializer=_init_worker,
                                        initargs=(threads,)) as pool:
                futures = [pool.submit(_run_one_in_worker, asdict(cfg), *key) for key in todo]
                try:
                    for future in cf.as_completed(futures):
                        future.result()
                        bar.update(1)
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        bar.close()
    return {"ran": len(todo), "skipped": len(keys) - len(todo), "seconds": round(time.perf_counter() - started, 1)}
