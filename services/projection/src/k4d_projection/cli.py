"""`k4d project`: robot + joint trajectory (or link poses) + camera -> per-frame robot
depth, pointmap, mask, link ids, normals and shaded RGB in one NPZ."""

from __future__ import annotations

import sys

import numpy as np
from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d.tensor_io import read_array_file, save_npz

from k4d_projection.renderer import DEFAULT_MEMORY_BUDGET_BYTES, DEFAULT_OUTPUTS, RobotRenderer


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "project", help="ray-cast a robot trajectory into a camera (depth, pointmap, mask, ...)",
        description="Render exact robot depth/pointmap/mask/link-id/normals/RGB per frame. "
                    "Example: k4d project --robot panda --joints q.npy --camera cam.json "
                    "--out robot.npz --video robot.mp4")
    p.add_argument("--robot", required=True, help="builtin robot name or URDF/xacro path")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--joints", help="(T, J) or (J,) .npy (or .npz key 'joints') in the "
                     "robot's joint_names order")
    src.add_argument("--poses", help=".npz with 'poses' (T, L, 4, 4) T_base_from_link "
                     "(+ optional 'link_names'), e.g. from `k4d fk`")
    p.add_argument("--camera", required=True, help="camera JSON (docs/projection.md)")
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--video", help="also write a quick-look mp4: shaded robot | 8-bit pointmap")
    p.add_argument("--collision", action="store_true", help="use collision meshes")
    p.add_argument("--world-pointmap", action="store_true",
                   help="also write 'pointmap_world' (world frame of the camera extrinsics)")
    p.add_argument("--clip", action="store_true", help="clamp joints to limits instead of failing")
    p.add_argument("--engine", choices=("open3d", "embree"), default="open3d",
                   help="ray-casting engine (default open3d)")
    p.add_argument("--memory-budget-mb", type=int, default=DEFAULT_MEMORY_BUDGET_BYTES >> 20,
                   help="refuse renders needing more memory than this (default %(default)s)")
    p.set_defaults(handler=run_project)


def run_project(args) -> int:
    from k4d.robots.descriptions import load_robot
    from k4d.robots.fk import forward_kinematics
    from k4d.robots.validation import validate_joints

    model = load_robot(args.robot)
    camera = Camera.load(args.camera)
    extra = {"link_names": np.array(model.link_names), "joint_names": np.array(model.joint_names)}
    if args.joints:
        joints = validate_joints(model, read_array_file(args.joints, "joints"), clip=args.clip)
        poses = forward_kinematics(model, joints)
        extra["joints"] = joints
    else:
        poses = _read_poses(args.poses, model.link_names)
    extra["poses"] = poses
    outputs = list(DEFAULT_OUTPUTS) + (["pointmap_world"] if args.world_pointmap else [])
    renderer = RobotRenderer.from_robot(model, collision=args.collision, engine=args.engine)
    result = renderer.render(poses, camera, outputs=outputs,
                             memory_budget_bytes=args.memory_budget_mb << 20)
    save_npz(args.out, {**result.arrays(), **extra}, compressed=False)
    if args.video:
        from k4d import pointmap_codec

        from k4d_projection import codecs

        encoded = pointmap_codec.encode_8bit(result.pointmap, result.mask)
        codecs.write_video(args.video, np.concatenate([result.rgb, encoded.values], axis=2))
    T, H, W = result.depth.shape
    print(f"{model.name}: {T} frames {W}x{H}, robot covers {result.mask.mean():.1%} of pixels "
          f"-> {args.out}", file=sys.stderr)
    return 0


def _read_poses(path: str, link_names: list[str]) -> np.ndarray:
    poses = np.asarray(read_array_file(path, "poses"))
    if poses.dtype.kind not in "iuf":
        raise InvalidArgument.for_field("poses", f"expected numbers, got {poses.dtype}")
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as data:
            if "link_names" in data.files and list(data["link_names"]) != list(link_names):
                raise InvalidArgument.for_field(
                    "poses.link_names", "the file's links do not match the robot's "
                    f"({len(data['link_names'])} vs {len(link_names)} links)")
    if poses.ndim == 3:
        poses = poses[None]
    return poses.astype(np.float64)

