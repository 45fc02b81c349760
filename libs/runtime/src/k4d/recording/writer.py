"""Write a Rerun recording of one clip (a rollout or an episode) or of two clips side by side
(an evaluation: ground truth and prediction).

What a recording holds (entity paths in docs/viewing.md; `<clip>` is `world` for one clip,
`world/ground_truth` and `world/prediction` for a comparison):

    world                       view coordinates: robot base frame, z up
    <clip>/camera               T_world_from_cam per frame (or once, for a fixed camera)
    <clip>/camera/image         pinhole (intrinsics) + the RGB frames
    <clip>/camera/image/robot_mask   segmentation: class 1 = robot
    <clip>/camera/points        the world pointmap, every valid pixel, coloured by its RGB
    <clip>/camera/robot_points  the robot pointmap, highlighted
    world/robot/<link>          T_world_from_link per frame (FK), axes; /mesh the link mesh
    plots/joints, plots/actions, plots/metrics/<name>   time series
    notes                       title, labels (static-world, model) and info as markdown

Two timelines: `frame` (index) and `time` (frame / fps seconds).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d.pointmap_codec import invert_rigid
from k4d.recording import layout
from k4d.recording.actions import actions_per_frame
from k4d.recording.blueprint import build_blueprint

ROBOT_HIGHLIGHT = (255, 140, 0)
CLIP_ARRAYS = ("rgb", "pointmap", "mask", "robot_pointmap", "robot_mask")
GROUND_TRUTH, PREDICTION = "world/ground_truth", "world/prediction"


@dataclass(frozen=True)
class LinkMesh:
    """One link's visual mesh in the link frame: vertices (N, 3) float32, faces (F, 3)
    integer indices, rgb: the link's colour, 3 values in [0, 1] or 0..255."""

    link: str
    vertices: np.ndarray
    faces: np.ndarray
    rgb: Sequence[float] = (0.8, 0.8, 0.8)


def write_episode_recording(
        path, *, rgb: np.ndarray, camera: Camera | Sequence[Camera],
        pointmap: np.ndarray | None = None, mask: np.ndarray | None = None,
        robot_pointmap: np.ndarray | None = None, robot_mask: np.ndarray | None = None,
        joints: np.ndarray | None = None, joint_names: Sequence[str] | None = None,
        actions: np.ndarray | Mapping | None = None, action_names: Sequence[str] | None = None,
        link_poses: np.ndarray | None = None, link_names: Sequence[str] | None = None,
        link_meshes: Sequence[LinkMesh] = (), metrics: Mapping[str, np.ndarray] | None = None,
        fps: float = 24.0, title: str = "Kinema4D rollout", notice: str = "",
        info: Mapping[str, object] | None = None, recording_id: str | None = None) -> Path:
    """Write one clip's recording to `path` (.rrd); returns the path.

    rgb (T, H, W, 3) uint8. camera: a `k4d.camera.Camera` of the frames' size (its
    T_world_from_base, when set, places the robot), or a list of T of them (moving camera).
    pointmap (T, H, W, 3) float32 metres in the frame's camera frame, zeros where invalid;
    mask (T, H, W) bool valid points (default: finite with z > 0). robot_pointmap and
    robot_mask: the same for the robot alone. joints (T, J) with joint_names (J).
    actions: (T, D) per frame with action_names, or a `k4d simulate` actions document
    (placed on the frames by `actions_per_frame`). link_poses (T, L, 4, 4) T_base_from_link
    with link_names (L); link_meshes posed by them. metrics: name -> (T,) per-frame values.
    notice: a label shown first (e.g. the static-world notice); info: key -> value lines.
    """
    clip = _check_clip("", dict(rgb=rgb, pointmap=pointmap, mask=mask,
                                robot_pointmap=robot_pointmap, robot_mask=robot_mask))
    return _write(path, {layout.WORLD: clip}, camera=camera, joints=joints,
                  joint_names=joint_names, actions=actions, action_names=action_names,
                  link_poses=link_poses, link_names=link_names, link_meshes=link_meshes,
                  metrics=metrics, fps=fps, title=title, notice=notice, info=info,
                  recording_id=recording_id)


def write_comparison_recording(
        path, *, ground_truth: Mapping[str, np.ndarray], prediction: Mapping[str, np.ndarray],
        camera: Camera | Sequence[Camera], metrics: Mapping[str, np.ndarray] | None = None,
        joints: np.ndarray | None = None, joint_names: Sequence[str] | None = None,
        actions: np.ndarray | Mapping | None = None, action_names: Sequence[str] | None = None,
        link_poses: np.ndarray | None = None, link_names: Sequence[str] | None = None,
        link_meshes: Sequence[LinkMesh] = (), fps: float = 24.0,
        title: str = "Kinema4D evaluation", notice: str = "",
        info: Mapping[str, object] | None = None, recording_id: str | None = None) -> Path:
    """An evaluation's recording: ground truth and prediction side by side (same camera,
    same robot), with the per-frame metrics as plots. ground_truth / prediction: dicts
    with `rgb` and optionally `pointmap`, `mask`, `robot_pointmap`, `robot_mask` (shapes as
    in write_episode_recording; both clips the same T, H, W). Other arguments as there."""
    clips = {GROUND_TRUTH: _check_clip("ground_truth.", ground_truth),
             PREDICTION: _check_clip("prediction.", prediction)}
    if clips[GROUND_TRUTH]["rgb"].shape != clips[PREDICTION]["rgb"].shape:
        raise InvalidArgument.for_field(
            "prediction.rgb", f"shape {clips[PREDICTION]['rgb'].shape} differs from the ground "
                              f"truth's {clips[GROUND_TRUTH]['rgb'].shape}")
    return _write(path, clips, camera=camera, joints=joints, joint_names=joint_names,
                  actions=actions, action_names=action_names, link_poses=link_poses,
                  link_names=link_names, link_meshes=link_meshes, metrics=metrics, fps=fps,
                  title=title, notice=notice, info=info, recording_id=recording_id)


# 1. check inputs ----------------------------------------------------------------------

def _check_clip(prefix: str, arrays: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    unknown = sorted(set(arrays) - set(CLIP_ARRAYS))
    if unknown:
        raise InvalidArgument.for_field(prefix.rstrip(".") or "arrays",
                                        f"unknown arrays {unknown}; known: {list(CLIP_ARRAYS)}")
    rgb = arrays.get("rgb")
    if rgb is None:
        raise InvalidArgument.for_field(f"{prefix}rgb", "is required")
    rgb = np.asarray(rgb)
    if rgb.ndim != 4 or rgb.shape[-1] != 3 or rgb.dtype != np.uint8 or rgb.shape[0] < 1:
        raise InvalidArgument.for_field(f"{prefix}rgb", f"must be (T, H, W, 3) uint8, got "
                                                        f"{rgb.shape} {rgb.dtype}")
    out = {"rgb": rgb}
    for name, tail in (("pointmap", (3,)), ("robot_pointmap", (3,)), ("mask", ()),
                       ("robot_mask", ())):
        value = arrays.get(name)
        if value is None:
            continue
        value = np.asarray(value)
        if value.shape != rgb.shape[:3] + tail:
            raise InvalidArgument.for_field(f"{prefix}{name}", f"must have shape "
                                                               f"{rgb.shape[:3] + tail}, got {value.shape}")
        out[name] = value.astype(bool, copy=False) if not tail else value
    return out


def _check_series(name: str, values, frames: int, names=None,
                  names_field: str = "") -> np.ndarray:
    values = np.asarray(values, np.float64)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] != frames:
        raise InvalidArgument.for_field(name, f"must have {frames} rows (one per frame), got "
                                              f"shape {values.shape}")
    if names is not None and len(names) != values.shape[1]:
        raise InvalidArgument.for_field(names_field or name,
                                        f"{len(names)} names for {values.shape[1]} columns")
    return values


def _cameras(camera, frames: int, height: int, width: int) -> list[Camera]:
    """One Camera (a fixed camera: a list of one) or one per frame, each of the frames' size.
    The camera itself was validated when it was built (`Camera`): only the fit is checked."""
    cameras = [camera] if isinstance(camera, Camera) else list(camera) \
        if isinstance(camera, Sequence) and not isinstance(camera, str | Mapping) else None
    if cameras is None or not all(isinstance(c, Camera) for c in cameras):
        raise InvalidArgument.for_field("camera", "must be a k4d.camera.Camera or one per frame "
                                                  "(Camera.from_dict parses the JSON form)")
    if not isinstance(camera, Camera) and len(cameras) != frames:
        raise InvalidArgument.for_field("camera", f"a per-frame camera list needs {frames} "
                                                  f"entries, got {len(cameras)}")
    for cam in cameras:
        if (cam.width, cam.height) != (width, height):
            raise InvalidArgument.for_field(
                "camera.width", f"camera is {cam.width}x{cam.height}, the frames {width}x{height}")
    return cameras


# 2. write -----------------------------------------------------------------------------

def _write(path, clips: dict[str, dict[str, np.ndarray]], *, camera, joints, joint_names,
           actions, action_names, link_poses, link_names, link_meshes, metrics, fps, title,
           notice, info, recording_id) -> Path:
    rr = layout.require_rerun()
    first = next(iter(clips.values()))["rgb"]
    T, H, W = first.shape[:3]
    if not (np.isfinite(fps) and fps > 0):
        raise InvalidArgument.for_field("fps", f"must be a finite number > 0, got {fps}")
    cameras = _cameras(camera, T, H, W)
    series = {}
    if joints is not None:
        series["joints"] = (_check_series("joints", joints, T, joint_names,
                                                         "joint_names"), joint_names)
    if actions is not None:
        if isinstance(actions, Mapping):
            values, names = actions_per_frame(actions, T, list(joint_names or []) or None)
        else:
            values, names = _check_series("actions", actions, T, action_names,
                                           "action_names"), action_names
        series["actions"] = (values, names)
    metric_series = {str(k): _check_series(f"metrics.{k}", v, T) for k, v in (metrics or {}).items()}
    if link_poses is not None:
        link_poses = np.asarray(link_poses, np.float64)
        if link_poses.ndim != 4 or link_poses.shape[0] != T or link_poses.shape[2:] != (4, 4):
            raise InvalidArgument.for_field("link_poses", f"must be ({T}, L, 4, 4), got "
                                                          f"{link_poses.shape}")
        if link_names is None or len(link_names) != link_poses.shape[1]:
            raise InvalidArgument.for_field("link_names", "one name per link of link_poses")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    rec = rr.RecordingStream(layout.APPLICATION_ID, recording_id=recording_id or uuid.uuid4(),
                             send_properties=False)
    blueprint = build_blueprint(list(clips), [*series, *(f"metrics/{k}" for k in metric_series)])
    rec.save(tmp, default_blueprint=blueprint)
    try:
        rec.send_recording_name(title)
        frame_index = [rr.TimeColumn(layout.FRAME_TIMELINE, sequence=np.arange(T)),
                       rr.TimeColumn(layout.TIME_TIMELINE, duration=np.arange(T) / fps)]
        rec.log(layout.WORLD, rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
        rec.log(layout.NOTES, rr.TextDocument(_notes(title, notice, info, T, H, W, fps),
                                              media_type=rr.MediaType.MARKDOWN), static=True)
        first_camera = cameras[0]
        T_world_from_base = np.eye(4) if first_camera.T_world_from_base is None \
            else first_camera.T_world_from_base
        for root in clips:
            _log_camera(rr, rec, root, cameras, W, H, frame_index)
        if link_poses is not None:
            _log_robot(rr, rec, T_world_from_base @ link_poses, link_names, link_meshes,
                       frame_index)
        for name, (values, names) in series.items():
            _log_series(rr, rec, f"{layout.PLOTS}/{name}", values, names, frame_index)
        for name, values in metric_series.items():
            _log_series(rr, rec, f"{layout.PLOTS}/metrics/{name}", values, [name], frame_index)
        for t in range(T):
            rec.set_time(layout.FRAME_TIMELINE, sequence=t)
            rec.set_time(layout.TIME_TIMELINE, duration=t / fps)
            for root, clip in clips.items():
                _log_frame(rr, rec, root, clip, t)
        rec.flush()
    except BaseException:
        rec.disconnect()
        tmp.unlink(missing_ok=True)
        raise
    rec.disconnect()
    tmp.replace(path)
    return path


def _notes(title, notice, info, T, H, W, fps) -> str:
    lines = [f"# {title}", ""]
    if notice:
        lines += [f"**{notice}**", ""]
    lines += [f"- frames: {T} at {W}x{H}, {fps:g} fps"]
    lines += [f"- {k}: {v}" for k, v in (info or {}).items()]
    return "\n".join(lines) + "\n"


def _log_camera(rr, rec, root: str, cameras: list[Camera], W: int, H: int,
                frame_index) -> None:
    """The camera pose (T_world_from_cam) and its pinhole: once when fixed (a list of one),
    else per frame."""
    T_world_from_cam = invert_rigid(np.stack([c.T_cam_from_world for c in cameras]))
    K = np.stack([c.K for c in cameras]).astype(np.float32)
    cam, image = f"{root}/{layout.CAMERA}", f"{root}/{layout.IMAGE}"
    if len(cameras) == 1:
        rec.log(cam, rr.Transform3D(translation=T_world_from_cam[0, :3, 3],
                                    mat3x3=T_world_from_cam[0, :3, :3]), static=True)
        rec.log(image, rr.Pinhole(image_from_camera=K[0], resolution=[W, H],
                                  camera_xyz=rr.ViewCoordinates.RDF), static=True)
    else:
        rec.send_columns(cam, indexes=frame_index, columns=rr.Transform3D.columns(
            translation=T_world_from_cam[:, :3, 3], mat3x3=T_world_from_cam[:, :3, :3]))
        rec.log(image, rr.Pinhole.from_fields(resolution=[W, H],
                                              camera_xyz=rr.ViewCoordinates.RDF), static=True)
        rec.send_columns(image, indexes=frame_index,
                         columns=rr.Pinhole.columns(image_from_camera=K))
    rec.log(f"{root}/{layout.ROBOT_MASK}",
            rr.AnnotationContext([(0, "background", (0, 0, 0, 0)),  # else a default tint
                                  (1, "robot", (*ROBOT_HIGHLIGHT, 160))]), static=True)


def _log_robot(rr, rec, T_world_from_link: np.ndarray, link_names, link_meshes,
               frame_index) -> None:
    """Link frames from FK, posed per frame, with their meshes (static, in the link frame)."""
    for i, link in enumerate(link_names):
        entity = f"{layout.ROBOT}/{link}"
        rec.log(entity, rr.TransformAxes3D(axis_length=0.05), static=True)
        rec.send_columns(entity, indexes=frame_index, columns=rr.Transform3D.columns(
            translation=T_world_from_link[:, i, :3, 3], mat3x3=T_world_from_link[:, i, :3, :3]))
    known = set(link_names)
    for mesh in link_meshes:
        if mesh.link not in known:
            raise InvalidArgument.for_field("link_meshes", f"mesh of unknown link {mesh.link!r}")
        vertices = np.asarray(mesh.vertices, np.float32)
        faces = np.asarray(mesh.faces, np.uint32)
        rgb = np.asarray(mesh.rgb, np.float64)
        rgb = np.clip(rgb * 255 if rgb.max() <= 1.0 else rgb, 0, 255).astype(np.uint8)
        rec.log(f"{layout.ROBOT}/{mesh.link}/mesh",
                rr.Mesh3D(vertex_positions=vertices, triangle_indices=faces,
                          vertex_normals=_vertex_normals(vertices, faces), albedo_factor=rgb),
                static=True)


def _vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Area-weighted vertex normals (N, 3) float32, so meshes are lit smoothly."""
    v = vertices[faces]
    face_normals = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    index = faces.reshape(-1).astype(np.intp)
    normals = np.stack([np.bincount(index, np.repeat(face_normals[:, c], 3),
                                    minlength=len(vertices)) for c in range(3)], axis=1)
    length = np.linalg.norm(normals, axis=1, keepdims=True)
    return (normals / np.where(length > 0, length, 1)).astype(np.float32)


def _log_series(rr, rec, entity: str, values: np.ndarray, names, frame_index) -> None:
    if names is not None:
        rec.log(entity, rr.SeriesLines(names=[str(n) for n in names]), static=True)
    rec.send_columns(entity, indexes=frame_index, columns=rr.Scalars.columns(scalars=values))


def _log_frame(rr, rec, root: str, clip: dict[str, np.ndarray], t: int) -> None:
    rgb = clip["rgb"][t]
    rec.log(f"{root}/{layout.IMAGE}", rr.Image(rgb))
    if "pointmap" in clip:
        p_cam = clip["pointmap"][t]
        valid = clip["mask"][t] if "mask" in clip else _valid_points(p_cam)
        rec.log(f"{root}/{layout.POINTS}",
                rr.Points3D(_select(p_cam, valid).astype(np.float32, copy=False),
                            colors=_rgba32(_select(rgb, valid))))
    if "robot_mask" in clip:
        rec.log(f"{root}/{layout.ROBOT_MASK}",
                rr.SegmentationImage(clip["robot_mask"][t].astype(np.uint8)))
    if "robot_pointmap" in clip:
        p_cam = clip["robot_pointmap"][t]
        valid = clip["robot_mask"][t] if "robot_mask" in clip else _valid_points(p_cam)
        rec.log(f"{root}/{layout.ROBOT_POINTS}",
                rr.Points3D(_select(p_cam, valid).astype(np.float32, copy=False),
                            colors=ROBOT_HIGHLIGHT))


def _valid_points(p_cam: np.ndarray) -> np.ndarray:
    """(H, W) bool: finite points in front of the camera (zeros mark no point)."""
    return np.all(np.isfinite(p_cam), axis=-1) & (p_cam[..., 2] > 0)


def _select(image: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(n, C) values of the valid pixels of an (H, W, C) image; a view when every pixel is
    valid (a generated pointmap usually is), which saves a copy per frame."""
    if valid.all():
        return np.ascontiguousarray(image).reshape(-1, image.shape[-1])
    return image[valid]


def _rgba32(rgb: np.ndarray) -> np.ndarray:
    """(n, 3) uint8 -> (n,) uint32 0xRRGGBBAA, opaque: rerun's packed colour, built here in
    one pass (rerun's own conversion of uint8 triples costs a third of the write)."""
    packed = np.empty((len(rgb), 4), np.uint8)
    packed[:, 0] = 255
    packed[:, 1:] = rgb[:, ::-1]  # little endian: bytes a, b, g, r
    return packed.view("<u4").reshape(-1)
