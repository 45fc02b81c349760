"""Stage events as the pipeline's workers publish them, for the tests of the next stage."""

from __future__ import annotations

import numpy as np


def projection_event(store, job_id: str, make_robot, spec):
    """A ProjectionCompleted as the projection worker publishes it: the robot
    condition of `make_robot`, and a panda's joints and link poses (the tool track), for
    `spec` (its robot is set to the panda)."""
    from kinema4d.v1 import events_pb2

    from k4d.robots.descriptions import load_robot
    from k4d.robots.fk import forward_kinematics
    from k4d.store import put_array

    image, robot = make_robot()
    frames = robot["robot_mask"].shape[0]
    panda = load_robot("panda")
    joints = np.repeat(panda.mid_configuration[None], frames, axis=0)
    joints[:, panda.joint_indices(["panda_finger_joint1"])[0]] = np.linspace(0.04, 0.0, frames)
    arrays = {**{name: robot[f"robot_{name}"] for name in ("rgb", "pointmap", "mask")},
              "joints": joints, "poses": forward_kinematics(panda, joints)}
    refs = {name: put_array(store, f"jobs/{job_id}/projection/{name}", array).to_proto()
            for name, array in arrays.items()}
    spec.robot.name = "panda"
    event = events_pb2.ProjectionCompleted(header=events_pb2.EventHeader(job_id=job_id),
                                           spec=spec, **refs)
    event.stage_seconds["projection"] = 0.5
    return event
