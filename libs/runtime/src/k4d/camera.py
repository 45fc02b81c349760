"""Pinhole camera (OpenCV axes: x right, y down, z forward) with optional distortion.

Pixel convention (DESIGN.md): integer pixel (u, v) is the CENTRE of that pixel,
so a principal point at the image centre is cx = (width - 1) / 2. A ray through
pixel (u, v) therefore passes through normalised coordinates
((u - cx) / fx, (v - cy) / fy) (after undistortion when distortion is set).

Extrinsics: `T_cam_from_world` (4, 4). "World" is the robot base frame unless
`T_world_from_base` is given; link poses from FK are `T_base_from_link`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from k4d.errors import FieldViolation, InvalidArgument
from k4d.pointmap_codec import invert_rigid
from k4d.rotations import euler_xyz_to_matrix

MAX_IMAGE_SIDE = 8192
_ROTATION_TOL = 1e-4


@dataclass(frozen=True)
class Camera:
    """Intrinsics + extrinsics of one camera; immutable, validated on construction."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    T_cam_from_world: np.ndarray = field(default_factory=lambda: np.eye(4))
    distortion: tuple[float, ...] | None = None  # OpenCV (k1, k2, p1, p2, k3)
    T_world_from_base: np.ndarray | None = None

    def __post_init__(self):
        violations = _violations(self)
        if violations:
            raise InvalidArgument(
                "invalid camera: " + "; ".join(f"{v.field}: {v.description}" for v in violations),
                violations)
        object.__setattr__(self, "T_cam_from_world", np.asarray(self.T_cam_from_world, np.float64))
        if self.T_world_from_base is not None:
            object.__setattr__(self, "T_world_from_base",
                               np.asarray(self.T_world_from_base, np.float64))
        if self.distortion is not None:
            object.__setattr__(self, "distortion", tuple(float(k) for k in self.distortion))

    def __eq__(self, other) -> bool:
        # The generated __eq__ compares the 4x4 arrays with `==` (ambiguous truth value);
        # two cameras are equal when their JSON forms are (EpisodeMeta round trips compare).
        if not isinstance(other, Camera):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    # ---- derived quantities -------------------------------------------------
    @property
    def K(self) -> np.ndarray:
        """(3, 3) intrinsic matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def T_cam_from_base(self) -> np.ndarray:
        """(4, 4): where link poses (T_base_from_link) are mapped into the camera."""
        if self.T_world_from_base is None:
            return self.T_cam_from_world.copy()
        return self.T_cam_from_world @ self.T_world_from_base

    @property
    def has_distortion(self) -> bool:
        return self.distortion is not None and any(k != 0.0 for k in self.distortion)

    @property
    def fovy_deg(self) -> float:
        """Vertical field of view of a centred pinhole with this fy (degrees)."""
        return math.degrees(2.0 * math.atan(self.height / (2.0 * self.fy)))

    def ray_directions(self) -> np.ndarray:
        """(H, W, 3) float64 camera-frame ray directions with z == 1 through pixel centres.

        Because z == 1, the hit distance along a ray equals the depth along the optical axis.
        """
        u = np.arange(self.width, dtype=np.float64)
        v = np.arange(self.height, dtype=np.float64)
        x_d = np.broadcast_to((u - self.cx) / self.fx, (self.height, self.width))
        y_d = np.broadcast_to(((v - self.cy) / self.fy)[:, None], (self.height, self.width))
        if self.has_distortion:
            x_n, y_n = undistort_normalized(x_d, y_d, self.distortion)
        else:
            x_n, y_n = x_d, y_d
        return np.stack([x_n, y_n, np.ones_like(x_n)], axis=-1)

    def points_from_depth(self, depth: np.ndarray) -> np.ndarray:
        """(H, W) depth along the optical axis, metres (0 = unknown) -> (H, W, 3) float32
        camera-frame points (zeros where the depth is unknown), lens distortion included."""
        depth = np.asarray(depth, np.float64)
        if depth.shape != (self.height, self.width):
            raise ValueError(f"depth is {depth.shape}, the camera is {(self.height, self.width)}")
        return (self.ray_directions() * depth[..., None]).astype(np.float32)

    def project(self, p_cam: np.ndarray) -> np.ndarray:
        """Camera-frame points (..., 3) -> pixel coordinates (..., 2) (distortion applied)."""
        p = np.asarray(p_cam, np.float64)
        x, y = p[..., 0] / p[..., 2], p[..., 1] / p[..., 2]
        if self.has_distortion:
            x, y = distort_normalized(x, y, self.distortion)
        return np.stack([self.fx * x + self.cx, self.fy * y + self.cy], axis=-1)

    # ---- constructors ---------------------------------------------------------
    @classmethod
    def from_fovy(cls, fovy_deg: float, width: int, height: int,
                  T_cam_from_world=None, **kwargs) -> Camera:
        """MuJoCo/LIBERO-style camera: vertical FOV, square pixels, centred principal point."""
        if not (0.0 < fovy_deg < 180.0):
            raise InvalidArgument.for_field("fovy", "must be in (0, 180) degrees")
        fy = (height / 2.0) / math.tan(math.radians(fovy_deg) / 2.0)
        return cls(width=width, height=height, fx=fy, fy=fy, cx=(width - 1) / 2.0,
                   cy=(height - 1) / 2.0,
                   T_cam_from_world=np.eye(4) if T_cam_from_world is None else T_cam_from_world,
                   **kwargs)

    @classmethod
    def look_at(cls, eye, target, up=(0.0, 0.0, 1.0), *, width: int, height: int,
                fovy_deg: float | None = None, fx: float | None = None, fy: float | None = None,
                cx: float | None = None, cy: float | None = None, **kwargs) -> Camera:
        """Camera at `eye` (world frame) looking at `target`, image "up" towards `up`."""
        T = look_at_transform(eye, target, up)
        if fovy_deg is not None:
            return cls.from_fovy(fovy_deg, width, height, T_cam_from_world=T, **kwargs)
        if fx is None:
            raise InvalidArgument.for_field("fx", "give fovy_deg or fx")
        return cls(width=width, height=height, fx=fx, fy=fx if fy is None else fy,
                   cx=(width - 1) / 2.0 if cx is None else cx,
                   cy=(height - 1) / 2.0 if cy is None else cy, T_cam_from_world=T, **kwargs)

    @classmethod
    def from_mujoco(cls, cam_pos, cam_xmat, fovy_deg: float, width: int, height: int,
                    **kwargs) -> Camera:
        """From a MuJoCo camera pose (world `cam_xpos`, `cam_xmat`; MuJoCo cameras look
        along -z with y up, so OpenCV axes are (x, -y, -z) of the MuJoCo frame)."""
        R_world_from_mjcam = np.asarray(cam_xmat, np.float64).reshape(3, 3)
        R_world_from_cam = R_world_from_mjcam @ np.diag([1.0, -1.0, -1.0])
        T_world_from_cam = np.eye(4)
        T_world_from_cam[:3, :3] = R_world_from_cam
        T_world_from_cam[:3, 3] = np.asarray(cam_pos, np.float64)
        return cls.from_fovy(fovy_deg, width, height,
                             T_cam_from_world=invert_rigid(T_world_from_cam), **kwargs)

    @classmethod
    def from_droid(cls, extrinsics, *, width: int, height: int, fx: float, fy: float,
                   cx: float, cy: float, **kwargs) -> Camera:
        """DROID calibration: `extrinsics` = [x, y, z, rx, ry, rz], the camera pose in the
        robot base frame, Euler angles extrinsic "xyz" (scipy lowercase convention,
        R = Rz @ Ry @ Rx), camera axes OpenCV."""
        e = np.asarray(extrinsics, np.float64).reshape(-1)
        if e.shape != (6,) or not np.all(np.isfinite(e)):
            raise InvalidArgument.for_field("extrinsics", "must be 6 finite numbers")
        T_base_from_cam = np.eye(4)
        T_base_from_cam[:3, :3] = euler_xyz_to_matrix(e[3:])
        T_base_from_cam[:3, 3] = e[:3]
        return cls(width=width, height=height, fx=fx, fy=fy, cx=cx, cy=cy,
                   T_cam_from_world=invert_rigid(T_base_from_cam), **kwargs)

    # ---- JSON ---------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"width": self.width, "height": self.height, "fx": self.fx, "fy": self.fy,
             "cx": self.cx, "cy": self.cy, "T_cam_from_world": self.T_cam_from_world.tolist()}
        if self.distortion is not None:
            d["distortion"] = list(self.distortion)
        if self.T_world_from_base is not None:
            d["T_world_from_base"] = self.T_world_from_base.tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict, field_prefix: str = "") -> Camera:
        """Parse the camera JSON object; errors name the offending field (`camera.fx`)."""
        pre = f"{field_prefix}." if field_prefix else ""
        if not isinstance(d, dict):
            raise InvalidArgument.for_field(field_prefix or "camera", "must be a JSON object")
        known = {"width", "height", "fx", "fy", "cx", "cy", "T_cam_from_world", "distortion",
                 "T_world_from_base"}
        violations = [FieldViolation(pre + k, "unknown field") for k in d if k not in known]
        violations += [FieldViolation(pre + k, "required") for k in
                       ("width", "height", "fx", "fy", "cx", "cy", "T_cam_from_world")
                       if k not in d]
        if violations:
            raise InvalidArgument("invalid camera: " + "; ".join(
                f"{v.field}: {v.description}" for v in violations), violations)
        kwargs = {}
        for k in ("width", "height"):
            kwargs[k] = _as_int(d[k], pre + k)
        for k in ("fx", "fy", "cx", "cy"):
            kwargs[k] = _as_float(d[k], pre + k)
        kwargs["T_cam_from_world"] = _as_matrix4(d["T_cam_from_world"], pre + "T_cam_from_world")
        if d.get("T_world_from_base") is not None:
            kwargs["T_world_from_base"] = _as_matrix4(d["T_world_from_base"],
                                                      pre + "T_world_from_base")
        if d.get("distortion") is not None:
            dist = d["distortion"]
            if not isinstance(dist, list | tuple) or len(dist) != 5:
                raise InvalidArgument.for_field(pre + "distortion",
                                                "must be a list [k1, k2, p1, p2, k3]")
            kwargs["distortion"] = tuple(_as_float(k, f"{pre}distortion[{i}]")
                                         for i, k in enumerate(dist))
        try:
            return cls(**kwargs)
        except InvalidArgument as exc:
            if not pre:
                raise
            vs = [FieldViolation(pre + v.field, v.description) for v in exc.violations]
            raise InvalidArgument("invalid camera: " + "; ".join(
                f"{v.field}: {v.description}" for v in vs), vs) from None

    @classmethod
    def load(cls, path: str | Path, field_prefix: str = "camera") -> Camera:
        """Read a camera JSON file; errors name fields as `camera.fx` etc."""
        try:
            d = json.loads(Path(path).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidArgument.for_field(field_prefix, f"{path} is not valid JSON: "
                                            f"{exc}") from None
        return cls.from_dict(d, field_prefix=field_prefix)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


MIN_FIT_PIXELS = 16


def fit_pinhole(p_cam: np.ndarray, mask: np.ndarray, min_pixels: int = MIN_FIT_PIXELS
                ) -> Camera | None:
    """The undistorted pinhole camera that projects these camera-frame points to their own
    pixels (u = fx x / z + cx and v = fy y / z + cy, least squares over every pixel of
    `mask`), or None with fewer than `min_pixels` points in front of the camera or points
    that do not spread over both axes.

    Made for points ray-cast through the camera (the projection stage's robot pointmap), for
    which the fit is exact: the camera of a rollout whose camera the caller did not pass.
    p_cam: (..., H, W, 3) metres; mask: (..., H, W) bool."""
    p_cam = np.asarray(p_cam, np.float64)
    height, width = p_cam.shape[-3:-1]
    mask = np.asarray(mask, bool) & (p_cam[..., 2] > 0)
    if int(mask.sum()) < min_pixels:
        return None
    grid_v, grid_u = np.meshgrid(np.arange(height, dtype=np.float64),
                                 np.arange(width, dtype=np.float64), indexing="ij")
    u = np.broadcast_to(grid_u, mask.shape)[mask]
    v = np.broadcast_to(grid_v, mask.shape)[mask]
    points = p_cam[mask]
    fitted = []
    for pixel, ratio in ((u, points[:, 0] / points[:, 2]), (v, points[:, 1] / points[:, 2])):
        if np.ptp(ratio) <= 1e-9:
            return None
        focal, centre = np.linalg.lstsq(np.stack([ratio, np.ones_like(ratio)], axis=1), pixel,
                                        rcond=None)[0]
        fitted.append((float(focal), float(centre)))
    (fx, cx), (fy, cy) = fitted
    if fx <= 0 or fy <= 0:
        return None
    return Camera(width=int(width), height=int(height), fx=fx, fy=fy, cx=cx, cy=cy)


def cameras_from_json(doc, field: str = "camera") -> Camera | list[Camera]:
    """The DESIGN.md camera JSON, or a non-empty list of it (one per frame, a moving camera)
    -> a Camera or a list of them; Cameras given are kept. Errors name the field
    (`camera.fx`, `camera[3].width`)."""
    if isinstance(doc, list):
        if not doc:
            raise InvalidArgument.for_field(field, "must be a camera object or a list of them")
        return [_camera_from_json(d, f"{field}[{i}]") for i, d in enumerate(doc)]
    return _camera_from_json(doc, field)


def _camera_from_json(doc, field: str) -> Camera:
    if isinstance(doc, Camera):
        return doc
    if isinstance(doc, dict):
        return Camera.from_dict(doc, field_prefix=field)
    raise InvalidArgument.for_field(field, "must be a camera object or a list of them")


# ---- validation ---------------------------------------------------------------
def _violations(cam: Camera) -> list[FieldViolation]:
    out: list[FieldViolation] = []
    for k in ("width", "height"):
        v = getattr(cam, k)
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            out.append(FieldViolation(k, "must be an integer"))
        elif not 1 <= v <= MAX_IMAGE_SIDE:
            out.append(FieldViolation(k, f"must be in [1, {MAX_IMAGE_SIDE}]"))
    for k in ("fx", "fy", "cx", "cy"):
        v = getattr(cam, k)
        if not isinstance(v, int | float | np.floating | np.integer) or not math.isfinite(v):
            out.append(FieldViolation(k, "must be a finite number"))
        elif k in ("fx", "fy") and v <= 0:
            out.append(FieldViolation(k, "focal length must be positive"))
    out += _rigid_violations(cam.T_cam_from_world, "T_cam_from_world")
    if cam.T_world_from_base is not None:
        out += _rigid_violations(cam.T_world_from_base, "T_world_from_base")
    if cam.distortion is not None:
        dist = np.asarray(cam.distortion, dtype=np.float64)
        if dist.shape != (5,) or not np.all(np.isfinite(dist)):
            out.append(FieldViolation("distortion", "must be 5 finite numbers k1,k2,p1,p2,k3"))
    return out


def check_rigid(T, name: str) -> np.ndarray:
    """T as a (4, 4) float64 array; InvalidArgument naming `name` unless it is a finite rigid
    transform (orthonormal rotation with determinant +1, last row 0 0 0 1)."""
    violations = _rigid_violations(T, name)
    if violations:
        raise InvalidArgument("; ".join(f"{v.field}: {v.description}" for v in violations),
                              violations)
    return np.asarray(T, np.float64)


def _rigid_violations(T, name: str) -> list[FieldViolation]:
    T = np.asarray(T, dtype=np.float64)
    if T.shape != (4, 4):
        return [FieldViolation(name, f"must be 4x4, got shape {T.shape}")]
    if not np.all(np.isfinite(T)):
        return [FieldViolation(name, "must be finite")]
    if not np.allclose(T[3], [0, 0, 0, 1], atol=1e-9):
        return [FieldViolation(name, "last row must be [0, 0, 0, 1]")]
    R = T[:3, :3]
    if not np.allclose(R.T @ R, np.eye(3), atol=_ROTATION_TOL):
        return [FieldViolation(name, "rotation part is not orthonormal (non-rigid transform)")]
    if np.linalg.det(R) < 0:
        return [FieldViolation(name, "rotation part has determinant -1 (a reflection)")]
    return []


def _as_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or float(v) != int(v):
        raise InvalidArgument.for_field(name, "must be an integer")
    return int(v)


def _as_float(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InvalidArgument.for_field(name, "must be a finite number")
    return float(v)


def _as_matrix4(v, name: str) -> np.ndarray:
    try:
        T = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidArgument.for_field(name, "must be a 4x4 list of numbers") from None
    if T.shape != (4, 4):
        raise InvalidArgument.for_field(name, f"must be 4x4, got shape {T.shape}")
    return T


# ---- geometry helpers -----------------------------------------------------------


def look_at_transform(eye, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """T_cam_from_world (4, 4) of an OpenCV camera at `eye` looking at `target`."""
    eye, target, up = (np.asarray(a, np.float64) for a in (eye, target, up))
    z = target - eye
    if not np.all(np.isfinite(z)) or np.linalg.norm(z) < 1e-9:
        raise InvalidArgument.for_field("target", "must differ from eye")
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    if np.linalg.norm(x) < 1e-9:
        raise InvalidArgument.for_field("up", "must not be parallel to the viewing direction")
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    T_world_from_cam = np.eye(4)
    T_world_from_cam[:3, :3] = np.stack([x, y, z], axis=1)
    T_world_from_cam[:3, 3] = eye
    return invert_rigid(T_world_from_cam)


def distort_normalized(x, y, dist):
    """OpenCV radial-tangential model on normalised coordinates."""
    k1, k2, p1, p2, k3 = dist
    r2 = x * x + y * y
    radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 * r2 * r2
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return xd, yd


def undistort_normalized(xd, yd, dist, iterations: int = 20):
    """Invert `distort_normalized` by fixed-point iteration (what cv2.undistortPoints does)."""
    k1, k2, p1, p2, k3 = dist
    x, y = np.array(xd, np.float64), np.array(yd, np.float64)
    for _ in range(iterations):
        r2 = x * x + y * y
        radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 * r2 * r2
        dx = 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
        dy = p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
        x = (xd - dx) / radial
        y = (yd - dy) / radial
    return x, y
