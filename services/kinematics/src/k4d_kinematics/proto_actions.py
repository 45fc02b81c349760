"""Proto messages -> core inputs (RobotRef -> RobotModel, ActionSequence -> ActionSpec,
an IK request -> IKOptions), shared by the gRPC servicer and the stage worker.

The proto carries no dataset units for the gripper: it is already an opening in [0, 1].
A preset fills type/frame/rotation/dt when the message leaves them unspecified, and its
position/rotation scales apply to the values."""

from __future__ import annotations

import numpy as np
from k4d.errors import InvalidArgument

from .core import job_ik_options
from .ik import IKOptions


def ik_options(request, frames: int) -> IKOptions:
    """IK settings for one request of `frames` frames: the job budget of the kinematics
    core (`job_ik_options`); `request` (an InverseKinematicsRequest, or None) may tighten
    or loosen the tolerances."""
    options = job_ik_options(frames)
    if request is None:
        return options
    for name, value in (("position_tolerance_m", request.position_tolerance_m),
                        ("rotation_tolerance_rad", request.rotation_tolerance_rad)):
        if value < 0 or not np.isfinite(value):
            raise InvalidArgument.for_field(name, "must be a finite value >= 0 (0 = default)")
    return IKOptions(position_tolerance=request.position_tolerance_m or options.position_tolerance,
                     rotation_tolerance=request.rotation_tolerance_rad or options.rotation_tolerance,
                     timeout_s=options.timeout_s, trajectory_timeout_s=options.trajectory_timeout_s)
