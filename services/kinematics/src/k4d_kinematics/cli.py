"""`k4d robots`, `k4d fk`, `k4d ik`, `k4d kinematics solve`.

    k4d robots                                  list builtin + registered robots
    k4d robots describe NAME [--json]           joints, limits, links, EE, gripper, meshes
    k4d robots register BUNDLE [--name N]       store a zip/tar of URDF + meshes
    k4d fk --robot R --joints q.npy --out poses.npz [--clip]
    k4d ik --robot R --targets t.npy [--link L] [--seed q0.npy] [--solver ours|ikpy]
           [--mode trajectory|independent] --out sol.npz
    k4d kinematics solve --robot R --actions a.json --out traj.npz [--clip]

`--robot` takes a builtin name, a URDF/xacro path or a registered bundle name.
Bad input exits 2 with one line on stderr (mapped by `k4d.cli.main`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from k4d.actions import parse_actions
from k4d.errors import InvalidArgument
from k4d.robots import descriptions as robot_registry
from k4d.robots.fk import forward_kinematics
from k4d.robots.validation import validate_joints, validate_seed, validate_targets
from k4d.tensor_io import read_array_file, save_npz

from .ik import MODES, SOLVERS, solve_ik


def register(subparsers) -> None:
    _register_robots(subparsers)
    p = subparsers.add_parser("fk", help="forward kinematics: joints -> every link's pose",
                              description="Pose of every link (base frame) for each row of joints.")
    _robot_args(p)
    p.add_argument("--joints", required=True, help="(T, J) or (J,) .npy/.npz/.json in joint_names order")
    p.add_argument("--out", required=True, help="output .npz (link_names, joint_names, joints, poses)")
    p.add_argument("--clip", action="store_true", help="clamp out-of-limit joints instead of failing")
    p.set_defaults(handler=run_fk)

    p = subparsers.add_parser("ik", help="inverse kinematics for the arm chain",
                              description="Joint configurations reaching target poses of a link.")
    _robot_args(p)
    p.add_argument("--targets", required=True,
                   help="(T, 4, 4) poses or (T, 7) xyz + quaternion xyzw, .npy/.npz/.json, base frame")
    p.add_argument("--link", help="link to place (default: the robot's end effector)")
    p.add_argument("--seed", help="(J,) seed configuration (default: middle of the joint ranges)")
    p.add_argument("--solver", choices=SOLVERS, default="ours")
    p.add_argument("--mode", choices=MODES, default="trajectory",
                   help="trajectory: warm start from the previous frame; independent: every frame "
                        "from the seed")
    p.add_argument("--out", required=True,
                   help="output .npz (joints, success, position_error, rotation_error, ...)")
    p.set_defaults(handler=run_ik)

    p = subparsers.add_parser("kinematics", help="kinematics pipeline commands")
    sub = p.add_subparsers(dest="kinematics_command", metavar="COMMAND")
    sub.required = True
    solve = sub.add_parser("solve", help="actions JSON -> joint trajectory + link poses",
                           description="Convert an actions document (docs/kinematics.md) into a "
                                       "clip-length joint trajectory and every link's pose.")
    _robot_args(solve, required=False)
    solve.add_argument("--actions", required=True, help="actions JSON file")
    solve.add_argument("--out", required=True, help="output .npz")
    solve.add_argument("--clip", action="store_true", help="clamp joints to limits")
    solve.set_defaults(handler=run_solve)


def _register_robots(subparsers) -> None:
    p = subparsers.add_parser("robots", help="list, describe and register robots")
    p.add_argument("--store", help="object store URI for registered robots (default K4D_STORE_URI)")
    p.set_defaults(handler=run_robots_list)
    sub = p.add_subparsers(dest="robots_command", metavar="COMMAND")
    sub.add_parser("list", help="list robots").set_defaults(handler=run_robots_list)
    describe = sub.add_parser("describe", help="describe one robot")
    describe.add_argument("name", help="builtin name, URDF/xacro path or registered name")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(handler=run_robots_describe)
    reg = sub.add_parser("register", help="store a robot bundle (zip/tar of URDF + meshes)")
    reg.add_argument("bundle", help="bundle archive")
    reg.add_argument("--name", help="robot name (default: robot.json name or the URDF's name)")
    reg.set_defaults(handler=run_robots_register)


def _robot_args(p, required: bool = True) -> None:
    p.add_argument("--robot", required=required,
                   help="builtin name (panda, ur5, xarm7, so100, widowx250s), URDF/xacro path, "
                        "or registered bundle name")
    p.add_argument("--store", help="object store URI for registered robots (default K4D_STORE_URI)")


# ---------------------------------------------------------------- handlers

def run_robots_list(args) -> int:
    for name, spec in robot_registry.BUILTIN_ROBOTS.items():
        print(f"{name:<12} builtin     {spec.description}")
    try:
        from k4d.robots.registry import RobotRegistry

        registered = RobotRegistry(_store(args)).names()
    except Exception as exc:  # an unreachable store must not hide the builtin list
        print(f"k4d robots: note: registered robots unavailable: {exc}", file=sys.stderr)
        registered = []
    for name in registered:
        print(f"{name:<12} registered")
    return 0


def run_robots_describe(args) -> int:
    model = _load(args.name, args)
    info = describe(model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{model.name} ({model.source}): {len(model.link_names)} links, "
          f"{model.num_joints} actuated joints, end effector {model.ee_link}")
    for j, name in enumerate(model.joint_names):
        role = " (gripper)" if name in model.gripper_joints else ""
        print(f"  {name:<24} [{model.lower[j]: .4f}, {model.upper[j]: .4f}]{role}")
    print(f"  mesh files: {len(info['mesh_files'])}")
    return 0


def describe(model) -> dict:
    return {
        "name": model.name, "source": model.source,
        "joint_names": model.joint_names, "lower": model.lower.tolist(),
        "upper": model.upper.tolist(), "continuous": model.continuous.tolist(),
        "link_names": model.link_names, "ee_link": model.ee_link,
        "arm_joint_names": model.arm_joint_names, "gripper_joints": model.gripper_joints,
        "mesh_files": model.mesh_files,
    }


def run_robots_register(args) -> int:
    from k4d.robots.registry import RobotRegistry

    model = RobotRegistry(_store(args)).register(args.bundle, name=args.name)
    print(f"registered {model.name}: {model.num_joints} joints, {len(model.link_names)} links, "
          f"end effector {model.ee_link}")
    return 0


def run_fk(args) -> int:
    model = _load(args.robot, args)
    joints = validate_joints(model, read_array_file(args.joints, "joints"), clip=args.clip)
    poses = forward_kinematics(model, joints)
    _save(args.out, link_names=np.array(model.link_names), joint_names=np.array(model.joint_names),
          joints=joints, poses=poses)
    print(f"wrote {args.out}: {len(joints)} frames x {len(model.link_names)} links")
    return 0


def run_ik(args) -> int:
    model = _load(args.robot, args)
    targets = validate_targets(read_array_file(args.targets, "targets"))
    seed = None
    if args.seed:
        seed = validate_seed(model, read_array_file(args.seed, "seed"))
    result = solve_ik(model, targets, link=args.link, seed=seed, mode=args.mode, solver=args.solver)
    _save(args.out, link_names=np.array(model.link_names), joint_names=np.array(model.joint_names),
          joints=result.joints, success=result.success, position_error=result.position_error,
          rotation_error=result.rotation_error, iterations=result.iterations)
    _report(args.out, result.success, result.position_error, result.rotation_error)
    return 0


def run_solve(args) -> int:
    from .core import solve_trajectory

    document = _read_json(args.actions)
    spec = parse_actions(document)
    robot = args.robot or spec.robot
    if not robot:
        raise InvalidArgument.for_field("robot", "give --robot or a \"robot\" key in the actions")
    if args.clip:
        from dataclasses import replace

        spec = replace(spec, clip=True)
    model = _load(robot, args)
    out = solve_trajectory(model, spec)  # the stage's IK budget, as every mode
    arrays = dict(link_names=np.array(model.link_names), joint_names=np.array(model.joint_names),
                  joints=out.joints, poses=out.poses, times=out.times, success=out.success,
                  position_error=out.position_error, rotation_error=out.rotation_error)
    if out.targets is not None:
        arrays["targets"] = out.targets
    _save(args.out, **arrays)
    _report(args.out, out.success, out.position_error, out.rotation_error)
    return 0


# ---------------------------------------------------------------- helpers

def _store(args):
    from k4d.store import open_store

    return open_store(getattr(args, "store", None))


def _load(name: str, args):
    if name in robot_registry.BUILTIN_ROBOTS or name.endswith((".urdf", ".xacro")) or "/" in name:
        return robot_registry.load_robot(name)
    return robot_registry.load_robot(name, store=_store(args))


def _read_json(path: str):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidArgument.for_field("actions", f"no such file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument.for_field("actions", f"invalid JSON in {path}: {exc}") from None


def _save(path: str, **arrays) -> None:
    if Path(path).is_dir():
        raise InvalidArgument.for_field("out", f"{path} is a directory; give a file name")
    save_npz(path, arrays, compressed=False)  # atomic; keeps the name as given (no .npz added)


def _report(path: str, success: np.ndarray, position_error: np.ndarray,
            rotation_error: np.ndarray) -> None:
    failed = np.flatnonzero(~success)
    print(f"wrote {path}: {success.sum()}/{len(success)} frames within tolerance, "
          f"max position error {position_error.max():.2e} m, "
          f"max rotation error {rotation_error.max():.2e} rad")
    if failed.size:
        print(f"warning: {failed.size} frame(s) did not reach the target (first: {failed[:10].tolist()}); "
              "see success / position_error / rotation_error in the output", file=sys.stderr)
