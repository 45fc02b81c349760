"""Stage outcomes of a finished job (`SimulationResult.stages`): the one function that
builds them, called by the job table in cluster mode (from the stage events) and by the
embedded runner (from its in-process run), so a user sees the same in both modes."""

from __future__ import annotations

from collections.abc import Mapping

from k4d import pipeline_topology
from kinema4d.v1 import simulator_pb2

STATIC_WORLD_WARNING = ("no model: the static-world backend composited the robot onto the "
                        "unchanged scene; the world does not react to the robot")


def stage_names() -> tuple[str, ...]:
    """The simulation stages in pipeline order (from the pipeline topology)."""
    return tuple(s.name for s in pipeline_topology.simulation_stages())


def ik_warning(failed_frames: int, num_frames: int) -> str:
    return (f"IK missed its tolerances on {failed_frames} of {num_frames} frames; those "
            "frames show the closest pose it found")


def stage_outcomes(stage_seconds: Mapping[str, float], *, failed_frames: int = 0,
                   num_frames: int = 0, static_world: bool = False,
                   ) -> list[simulator_pb2.StageOutcome]:
    """One StageOutcome per simulation stage that reported a time, in pipeline order.
    failed_frames: kinematics frames where IK missed; num_frames: the clip length."""
    outcomes = []
    for name in stage_names():
        if name not in stage_seconds:
            continue
        outcome = simulator_pb2.StageOutcome(stage=name, seconds=float(stage_seconds[name]))
        if name == "kinematics" and failed_frames:
            outcome.failed_frames = int(failed_frames)
            outcome.warnings.append(ik_warning(failed_frames, num_frames))
        if name == "generation" and static_world:
            outcome.warnings.append(STATIC_WORLD_WARNING)
        outcomes.append(outcome)
    return outcomes


def warnings_of(outcomes) -> list[str]:
    """Every warning of the outcomes, prefixed with its stage."""
    return [f"{o.stage}: {w}" for o in outcomes for w in o.warnings]
