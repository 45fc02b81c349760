"""`k4d simulate`: files in -> embedded pipeline with progress bars -> files out."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import time
from pathlib import Path

from google.protobuf import json_format
from k4d.camera_proto import camera_from_proto
from k4d.errors import InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d_simulator import STATIC_WORLD_WARNING, warnings_of

from k4d_embedded.inputs import SimulationInputs, load_simulation
from k4d_embedded.outputs import robot_link_meshes, write_rollout
from k4d_embedded.pipeline import (
    EmbeddedResult,
    StageCores,
    _robot_name,
    run_embedded,
)
from k4d_embedded.shipped import shipped_notice
from k4d_embedded.viewer import STATIC_WORLD_NOTICE

log = logging.getLogger("k4d.simulate")


class StageBars:
    """One tqdm bar per stage, opened when the stage reports its start."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._bars: dict[str, object] = {}

    def __call__(self, progress) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self._bars.get(progress.stage)
        total = progress.total or None
        if bar is None:
            bar = self._bars[progress.stage] = tqdm(total=total, desc=f"{progress.stage:10s}",
                                                    unit="step", leave=True, dynamic_ncols=True)
        if progress.stage == "generation" and progress.message == "sampling":
            if bar.total != total:
                bar.reset(total=total)
            bar.n = progress.step
            bar.refresh()
        elif progress.message == "done":
            if bar.total in (None, 1) or bar.n < bar.total:
                bar.n = bar.total or 1
            bar.close()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_summary(inputs: SimulationInputs, spec, result: EmbeddedResult,
                  total_s: float) -> dict:
    gen, kin = result.generation, result.kinematics
    T, H, W = gen.rgb.shape[:3]
    if gen.static_world:
        model = {"id": STATIC_WORLD, "name": STATIC_WORLD, "version": "", "variant": STATIC_WORLD}
    else:
        model = {"id": gen.model.get("model_id") or gen.model.get("name", ""),
                 "name": gen.model.get("name", ""), "version": str(gen.model.get("version", "")),
                 "variant": gen.model.get("variant", ""), "source": inputs.model}
        shipped = shipped_notice(inputs.model)
        if shipped:  # e.g. "small model trained from scratch on synthetic ... episodes"
            model.update(shipped)
    summary = {
        "generator": STATIC_WORLD if gen.static_world else "kinema4d",
        "static_world": gen.static_world,
        "inputs": {
            "robot": inputs.robot,
            "actions": str(inputs.actions), "actions_sha256": _sha256(inputs.actions),
            "image": str(inputs.image), "image_sha256": _sha256(inputs.image),
            "camera": str(inputs.camera), "camera_sha256": _sha256(inputs.camera),
            "depth": str(inputs.depth) if inputs.depth else None,
            "depth_sha256": _sha256(inputs.depth) if inputs.depth else None,
            "downscale": inputs.downscale, "clip_to_limits": inputs.clip_to_limits,
        },
        "clip": {"num_frames": T, "height": H, "width": W},
        "model": model,
        "seed": gen.seed,
        "sampling": {k: v for k, v in gen.metadata.items()
                     if k in ("num_steps", "scheduler", "shift", "guidance", "backend",
                              "cached_steps", "options", "attention_backend", "timings_s")},
        "pointmap_units": "metres" if gen.metric else "normalised",
        "kinematics": {"joint_names": kin.joint_names, "ik_failed_frames": kin.failed_frames},
        "stage_seconds": {k: round(v, 4) for k, v in result.stage_seconds.items()},
        # SimulationResult.stages of the same run in cluster mode (k4d jobs shows those).
        "stages": [json_format.MessageToDict(o, preserving_proto_field_name=True)
                   for o in result.outcomes()],
        "warnings": warnings_of(result.outcomes()),
        "total_seconds": round(total_s, 4),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if gen.static_world:
        summary["notice"] = STATIC_WORLD_NOTICE
    return summary


def simulate_to_directory(inputs: SimulationInputs, out_dir: Path, *, fps: float = 24.0,
                          viewer_points: int | None = None, show_progress: bool = True,
                          cores: StageCores | None = None,
                          record: bool = True) -> dict[str, Path]:
    """Run one embedded simulation and write every output file; returns name -> path."""
    # Checked before the run: they are used only when the outputs are written.
    if not (math.isfinite(fps) and fps > 0):
        raise InvalidArgument.for_field("--fps", f"must be a finite number > 0, got {fps}")
    if viewer_points is not None and viewer_points < 1:
        raise InvalidArgument.for_field("--viewer-points", f"must be >= 1, got {viewer_points}")
    started = time.perf_counter()
    spec, scene = load_simulation(inputs)
    static = not (spec.model.name or spec.model.uri) or spec.sampling.backend == STATIC_WORLD
    if static:
        log.warning("no model given: using the STATIC-WORLD backend. %s", STATIC_WORLD_NOTICE)
    store = None
    if spec.model.name and not spec.model.uri:  # registry models live in the object store
        from k4d.config import load_config
        from k4d.store import open_store

        store = open_store(config=load_config())
    cores = cores or StageCores()
    bars = StageBars(show_progress)
    try:
        result = run_embedded(spec, store, bars, cores=cores, scene=scene)
    finally:
        bars.close()
    summary = build_summary(inputs, spec, result, time.perf_counter() - started)
    for outcome in result.outcomes():  # the static-world notice is logged on its own
        for warning in outcome.warnings:
            if warning != STATIC_WORLD_WARNING:
                log.warning("%s: %s", outcome.stage, warning)
    write_start = time.perf_counter()
    # The recording poses the renderer's link meshes (cached by the projection stage).
    meshes = robot_link_meshes(cores.renderer(cores.robot(_robot_name(spec), store)))
    paths = write_rollout(out_dir, result, summary, fps=fps, viewer_points=viewer_points,
                          focal_px=spec.camera.intrinsics.fx, record=record,
                          camera=camera_from_proto(spec.camera), link_meshes=meshes)
    log.info("wrote outputs in %.2f s", time.perf_counter() - write_start)
    if static:
        log.warning("outputs in %s come from the STATIC-WORLD backend (not generated dynamics)",
                    out_dir)
    return paths
