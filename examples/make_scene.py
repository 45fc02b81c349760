"""Render the shipped example's initial scene (examples/panda_pick/scene.png) with MuJoCo.

The scene is a table (its top is the robot base plane, z = 0), two coloured cubes in
the Panda's workspace, a floor and two walls, lit by two lights. The robot itself is
NOT drawn: the static-world backend composites the rendered robot onto this image, and
a robot baked into the image would leave a ghost at its initial pose.

The camera is written to camera.json in the DESIGN.md form (OpenCV frame,
T_cam_from_world, pixel centres at integer coordinates) and MuJoCo renders through
exactly that camera, so robot projections line up with the scene pixels.

    MUJOCO_GL=osmesa python examples/make_scene.py [--out examples/panda_pick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
from k4d.camera import look_at_transform

WIDTH, HEIGHT = 720, 480
FOCAL_PX = 520.0
EYE = np.array([1.60, 0.80, 0.95])       # camera centre, robot base frame, metres
TARGET = np.array([0.30, 0.0, 0.32])     # point the optical axis goes through


def camera_json(T_cam_from_world: np.ndarray) -> dict:
    return {"width": WIDTH, "height": HEIGHT, "fx": FOCAL_PX, "fy": FOCAL_PX,
            "cx": (WIDTH - 1) / 2.0, "cy": (HEIGHT - 1) / 2.0,
            "T_cam_from_world": [[round(float(v), 9) for v in row] for row in T_cam_from_world]}


def scene_xml(T_cam_from_world: np.ndarray) -> str:
    """MJCF of the scene with a camera equal to the OpenCV one: MuJoCo cameras look along
    their -z with +y up, so their x/y axes are OpenCV's x and -y."""
    R_world_from_cam = T_cam_from_world[:3, :3].T
    eye = -R_world_from_cam @ T_cam_from_world[:3, 3]
    x_axis, y_axis = R_world_from_cam[:, 0], -R_world_from_cam[:, 1]
    fovy_deg = math.degrees(2 * math.atan(HEIGHT / 2 / FOCAL_PX))
    vec = lambda v: " ".join(f"{x:.9f}" for x in v)  # noqa: E731
    return f"""
<mujoco model="panda_pick_scene">
  <visual>
    <global offwidth="{WIDTH}" offheight="{HEIGHT}"/>
    <quality shadowsize="4096"/>
    <headlight ambient="0.35 0.35 0.35" diffuse="0.3 0.3 0.3" specular="0 0 0"/>
  </visual>
  <asset>
    <texture name="floor" type="2d" builtin="checker" rgb1="0.55 0.52 0.48"
             rgb2="0.45 0.43 0.40" width="512" height="512"/>
    <material name="floor" texture="floor" texrepeat="6 6" reflectance="0.05"/>
    <texture name="wood" type="2d" builtin="flat" rgb1="0.62 0.45 0.30" width="64" height="64"
             mark="random" markrgb="0.55 0.39 0.25" random="0.4"/>
    <material name="table" texture="wood" texrepeat="4 4" specular="0.2" shininess="0.3"/>
    <material name="wall" rgba="0.82 0.84 0.86 1"/>
  </asset>
  <worldbody>
    <light pos="1.0 1.0 2.5" dir="-0.4 -0.4 -1" diffuse="0.6 0.6 0.6" castshadow="true"/>
    <light pos="-0.5 -1.0 2.0" dir="0.2 0.5 -1" diffuse="0.25 0.25 0.25" castshadow="false"/>
    <geom name="floor" type="plane" pos="0 0 -0.75" size="4 4 0.1" material="floor"/>
    <geom name="back_wall" type="box" pos="-1.2 0 1.0" size="0.02 4 2.5" material="wall"/>
    <geom name="side_wall" type="box" pos="0 -1.8 1.0" size="4 0.02 2.5" material="wall"/>
    <geom name="table_top" type="box" pos="0.35 0 -0.02" size="0.65 0.75 0.02" material="table"/>
    <geom name="leg1" type="box" pos="0.90 0.65 -0.39" size="0.03 0.03 0.35" rgba="0.3 0.3 0.32 1"/>
    <geom name="leg2" type="box" pos="0.90 -0.65 -0.39" size="0.03 0.03 0.35" rgba="0.3 0.3 0.32 1"/>
    <geom name="leg3" type="box" pos="-0.20 0.65 -0.39" size="0.03 0.03 0.35" rgba="0.3 0.3 0.32 1"/>
    <geom name="leg4" type="box" pos="-0.20 -0.65 -0.39" size="0.03 0.03 0.35" rgba="0.3 0.3 0.32 1"/>
    <geom name="red_cube" type="box" pos="0.55 0.10 0.025" size="0.025 0.025 0.025"
          euler="0 0 0.3" rgba="0.85 0.12 0.10 1"/>
    <geom name="blue_cube" type="box" pos="0.45 -0.20 0.03" size="0.03 0.03 0.03"
          euler="0 0 -0.5" rgba="0.12 0.30 0.85 1"/>
    <geom name="green_plate" type="cylinder" pos="0.40 0.30 0.005" size="0.08 0.005"
          rgba="0.20 0.65 0.30 1"/>
    <camera name="view" pos="{vec(eye)}" xyaxes="{vec(x_axis)} {vec(y_axis)}" fovy="{fovy_deg:.9f}"/>
  </worldbody>
</mujoco>
"""


def render(xml: str) -> np.ndarray:
    """(H, W, 3) uint8 image through the scene's `view` camera."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    import mujoco

    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    renderer = mujoco.Renderer(model, HEIGHT, WIDTH)
    try:
        renderer.update_scene(data, camera="view")
        return renderer.render().copy()
    finally:
        renderer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "panda_pick"))
    args = parser.parse_args(argv)
    from PIL import Image

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    T_cam_from_world = look_at_transform(EYE, TARGET)  # OpenCV axes, world +z up
    image = render(scene_xml(T_cam_from_world))
    Image.fromarray(image).save(out / "scene.png")
    (out / "camera.json").write_text(json.dumps(camera_json(T_cam_from_world), indent=2) + "\n")
    print(f"wrote {out / 'scene.png'} ({WIDTH}x{HEIGHT}) and {out / 'camera.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
