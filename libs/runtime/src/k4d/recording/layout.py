"""Names shared by the writers, `k4d view` and the tests: file name, application id, entity
paths, and the one place that imports rerun."""

from __future__ import annotations

import importlib.util

from k4d.errors import FailedPrecondition

RECORDING_FILE = "rollout.rrd"
APPLICATION_ID = "kinema4d"
INSTALL_HINT = "pip install 'k4d-runtime[viz]'"

# Entity paths (docs/viewing.md). The world is the robot base frame, z up.
WORLD = "world"
CAMERA = "camera"                 # under a clip root: T_world_from_cam per frame
IMAGE = "camera/image"            # pinhole + RGB frames
ROBOT_MASK = "camera/image/robot_mask"
POINTS = "camera/points"          # world pointmap, coloured, camera frame
ROBOT_POINTS = "camera/robot_points"
ROBOT = "world/robot"             # world/robot/<link>: T_world_from_link per frame, + /mesh
PLOTS = "plots"                   # plots/joints, plots/actions, plots/metrics/<name>
NOTES = "notes"                   # a markdown note: title, labels (static-world, model), info
FRAME_TIMELINE = "frame"
TIME_TIMELINE = "time"


def is_rerun_available() -> bool:
    return importlib.util.find_spec("rerun") is not None


def require_rerun():
    """The `rerun` module, or FailedPrecondition naming the extra to install."""
    try:
        import rerun
    except ImportError:
        raise FailedPrecondition(
            f"Rerun recordings need rerun-sdk, which is not installed: {INSTALL_HINT} "
            "(or `make setup`)") from None
    return rerun
