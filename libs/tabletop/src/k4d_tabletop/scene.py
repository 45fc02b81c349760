"""Randomised tabletop scenes: what is on the table, how it looks, where the camera is.

`sample_scene(rng, task, width, height)` draws a `SceneSpec` (plain data); `build_model`
turns it into a MuJoCo model in which the robot's links are mocap bodies carrying the
SAME visual meshes our projection renders (from the kinematics robot description), the
objects are free bodies that move under contact and gravity, and one camera equals the
OpenCV camera of the episode. World = robot base frame; the table top is z = 0.

Two framings of the camera (`FRAMINGS`):
  wide        third-person views of the whole robot and table from 1.25-1.8 m (LIBERO's
              agentview, DROID's side cameras). At 96x144 an object is 3-6 pixels across.
  workspace   the table's workspace filling the view (objects >= 12 pixels across at 96x144),
              the arm reaching into it: what a world model must see to learn how objects move.
A `SceneShift` scales the objects' sizes and the camera's distance from what it looks at:
a split drawn from a shifted distribution (`k4d datagen synthetic --scene-shift`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from k4d.camera import Camera
from k4d.errors import InvalidArgument

TABLE_TOP_Z = 0.0
FRAMINGS = ("wide", "workspace")
# The workspace framing's view: the table region the tasks use (k4d_tabletop.tasks: objects
# at x 0.38-0.62, y -0.22-0.22) is about this wide at the target, in metres.
WORKSPACE_VIEW_M = (0.44, 0.56)
WORKSPACE_TARGET = (0.50, 0.0, 0.08)
SCENE_SHIFT_RANGE = (0.5, 2.0)
SHAPES = ("box", "cylinder", "mug", "bowl")
BOWL_SEGMENTS = 12
COLOURS = {  # name -> rgb; task texts name objects by colour + shape
    "red": (0.85, 0.12, 0.10), "green": (0.15, 0.65, 0.20), "blue": (0.12, 0.30, 0.85),
    "yellow": (0.95, 0.80, 0.10), "orange": (0.95, 0.50, 0.10), "purple": (0.55, 0.20, 0.70),
    "white": (0.92, 0.92, 0.90), "black": (0.08, 0.08, 0.08), "cyan": (0.10, 0.75, 0.80),
}


@dataclass
class ObjectSpec:
    """half_size: box (x, y, z) half extents; cylinder/mug (radius, radius, half height)."""

    name: str
    shape: str
    colour: str
    half_size: tuple[float, float, float]
    xy: tuple[float, float]
    yaw: float
    mass_kg: float = 0.1

    @property
    def rgb(self) -> tuple[float, float, float]:
        return COLOURS[self.colour]

    @property
    def label(self) -> str:
        return f"{self.colour} {'cube' if self.shape == 'box' else self.shape}"

    def initial_pose(self) -> np.ndarray:
        """(7,) world xyz + quaternion xyzw, resting on the table."""
        return np.array([self.xy[0], self.xy[1], TABLE_TOP_Z + self.half_size[2],
                         0.0, 0.0, math.sin(self.yaw / 2), math.cos(self.yaw / 2)])


@dataclass
class CameraSpec:
    """An OpenCV pinhole camera (fx = fy, centred principal point) looking at `target`."""

    eye: tuple[float, float, float]
    target: tuple[float, float, float]
    fovy_deg: float
    width: int
    height: int

    def camera(self) -> Camera:
        return Camera.look_at(self.eye, self.target, width=self.width, height=self.height,
                              fovy_deg=self.fovy_deg)


@dataclass(frozen=True)
class SceneShift:
    """Scale factors of a shifted scene distribution: object sizes and camera distance."""

    objects: float = 1.0
    camera: float = 1.0

    @classmethod
    def parse(cls, text: str, field_name: str = "--scene-shift") -> SceneShift:
        """`objects=S,camera=D` (either may be left out) -> SceneShift; InvalidArgument
        naming the part that is wrong."""
        values: dict[str, float] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("objects", "camera"):
                raise InvalidArgument.for_field(field_name, f"expected objects=S,camera=D, got {part!r}")
            try:
                number = float(value)
            except ValueError:
                raise InvalidArgument.for_field(field_name, f"{key.strip()} must be a number, got {value!r}") from None
            lo, hi = SCENE_SHIFT_RANGE
            if not (math.isfinite(number) and lo <= number <= hi):
                raise InvalidArgument.for_field(field_name, f"{key.strip()} must be in [{lo}, {hi}], got {value}")
            values[key.strip()] = number
        return cls(**values)

    @property
    def is_identity(self) -> bool:
        return self.objects == 1.0 and self.camera == 1.0

    def __str__(self) -> str:
        return f"objects={self.objects:g},camera={self.camera:g}"


@dataclass
class SceneSpec:
    objects: list[ObjectSpec]
    camera: CameraSpec
    table_rgb: tuple[float, float, float]
    table_rgb2: tuple[float, float, float]
    table_texture: str  # "checker" | "flat" | "gradient"
    table_half_size: tuple[float, float]
    floor_rgb: tuple[float, float, float]
    wall_rgb: tuple[float, float, float]
    light_dir: tuple[float, float, float]
    light_diffuse: float
    ambient: float
    marker_xy: tuple[float, float] | None = None  # pick-and-place target (flat disc)
    marker_colour: str = "blue"
    extra: dict = field(default_factory=dict)


def _colour_names(rng: np.random.Generator, n: int) -> list[str]:
    names = list(COLOURS)
    return [names[i] for i in rng.choice(len(names), size=n, replace=False)]


def sample_object(rng, name: str, colour: str, xy, shape: str | None = None) -> ObjectSpec:
    shape = shape or SHAPES[int(rng.integers(len(SHAPES)))]
    if shape == "box":
        h = float(rng.uniform(0.018, 0.028))
        half = (h, h, float(rng.uniform(0.018, 0.03)))
    elif shape == "bowl":
        r = float(rng.uniform(0.035, 0.05))
        half = (r, r, float(rng.uniform(0.018, 0.025)))
    else:
        r = float(rng.uniform(0.02, 0.028))
        half = (r, r, float(rng.uniform(0.025, 0.04)))
    return ObjectSpec(name, shape, colour, half, (float(xy[0]), float(xy[1])),
                      float(rng.uniform(-math.pi / 4, math.pi / 4)), float(rng.uniform(0.05, 0.2)))


def sample_camera(rng, width: int, height: int, framing: str = "wide",
                  distance_scale: float = 1.0) -> CameraSpec:
    """A view of `framing` (FRAMINGS), its distance to the target times `distance_scale`."""
    if framing == "workspace":
        return _workspace_camera(rng, width, height, distance_scale)
    if framing != "wide":
        raise InvalidArgument.for_field("framing", f"must be one of {FRAMINGS}, got {framing!r}")
    return _wide_camera(rng, width, height, distance_scale)


def _look_from(target: np.ndarray, distance: float, azimuth: float, elevation: float) -> np.ndarray:
    return target + distance * np.array([math.cos(elevation) * math.cos(azimuth),
                                         math.cos(elevation) * math.sin(azimuth), math.sin(elevation)])


def _wide_camera(rng, width: int, height: int, distance_scale: float) -> CameraSpec:
    """Third-person views around the workspace: in front of the robot (LIBERO agentview)
    or over its shoulders (DROID's side cameras)."""
    azimuth = math.radians(rng.uniform(-110.0, 110.0))  # 0 = facing the robot from its front
    elevation = math.radians(rng.uniform(20.0, 50.0))
    distance = rng.uniform(1.25, 1.8) * distance_scale
    target = np.array([0.42, 0.0, 0.22]) + rng.normal(0, [0.05, 0.05, 0.03])
    eye = _look_from(target, distance, azimuth, elevation)
    return CameraSpec(tuple(float(v) for v in eye), tuple(float(v) for v in target),
                      float(rng.uniform(42.0, 58.0)), width, height)


def _workspace_camera(rng, width: int, height: int, distance_scale: float) -> CameraSpec:
    """The workspace filling the view: looking down at the table's task region from in front
    of the robot or beside it, at the distance where the view is WORKSPACE_VIEW_M wide
    (objects 3.6-5.6 cm across then span >= 12 of 144 pixels)."""
    azimuth = math.radians(rng.uniform(-100.0, 100.0))
    elevation = math.radians(rng.uniform(30.0, 50.0))
    fovy_deg = float(rng.uniform(38.0, 52.0))
    view_m = rng.uniform(*WORKSPACE_VIEW_M)
    half_fov_x = math.atan(math.tan(math.radians(fovy_deg) / 2) * width / height)
    distance = view_m / 2 / math.tan(half_fov_x) * distance_scale
    target = np.array(WORKSPACE_TARGET) + rng.normal(0, [0.02, 0.02, 0.01])
    eye = _look_from(target, distance, azimuth, elevation)
    return CameraSpec(tuple(float(v) for v in eye), tuple(float(v) for v in target),
                      fovy_deg, width, height)


def _grey(rng, lo, hi):
    g = rng.uniform(lo, hi)
    return tuple(float(np.clip(g + d, 0, 1)) for d in rng.normal(0, 0.05, 3))


def sample_scene(rng: np.random.Generator, task: str, width: int, height: int,
                 framing: str = "wide", shift: SceneShift | None = None) -> SceneSpec:
    """Objects for `task` (pick: 1 object + a distractor + a marker; push: 1 + a distractor;
    stack: 2 boxes + a distractor), a random look and a random camera of `framing`, with
    the object sizes and the camera distance scaled by `shift`. The draws are the same for
    every framing and shift (a shifted split is the same scenes, scaled)."""
    shift = shift or SceneShift()
    from k4d_tabletop.tasks import sample_layout

    colours = _colour_names(rng, 4)
    layout = sample_layout(rng, task)
    objects = []
    for i, (xy, shape) in enumerate(layout.objects):
        obj = sample_object(rng, f"object{i + 1}", colours[i], xy, shape)
        objects.append(replace(obj, half_size=tuple(v * shift.objects for v in obj.half_size)))
    return SceneSpec(
        objects=objects, camera=sample_camera(rng, width, height, framing, shift.camera),
        table_rgb=_grey(rng, 0.3, 0.8), table_rgb2=_grey(rng, 0.2, 0.7),
        table_texture=("checker", "flat", "gradient")[int(rng.integers(3))],
        table_half_size=(float(rng.uniform(0.55, 0.75)), float(rng.uniform(0.6, 0.9))),
        floor_rgb=_grey(rng, 0.2, 0.6), wall_rgb=_grey(rng, 0.4, 0.95),
        light_dir=tuple(float(v) for v in (rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), -1.0)),
        light_diffuse=float(rng.uniform(0.4, 0.8)), ambient=float(rng.uniform(0.2, 0.45)),
        marker_xy=layout.marker_xy, marker_colour=colours[3],
        extra={"push_direction": layout.push_direction} if layout.push_direction else {})


def _vec(v) -> str:
    return " ".join(f"{float(x):.9g}" for x in v)


def scene_xml(scene: SceneSpec) -> str:
    """MJCF of everything but the robot (added by build_model from the robot's meshes)."""
    cam = scene.camera
    tx, ty = scene.table_half_size
    objects = []
    for obj in scene.objects:
        hx, hy, hz = obj.half_size
        pose = obj.initial_pose()
        quat_wxyz = (pose[6], pose[3], pose[4], pose[5])
        rgba = _vec((*obj.rgb, 1.0))
        common = f'rgba="{rgba}" friction="1.2 0.01 0.001" condim="4" group="2"'
        if obj.shape == "box":
            geoms = f'<geom name="{obj.name}" type="box" size="{_vec((hx, hy, hz))}" {common}/>'
        elif obj.shape == "cylinder":
            geoms = f'<geom name="{obj.name}" type="cylinder" size="{_vec((hx, hz))}" {common}/>'
        elif obj.shape == "bowl":  # a floor disc and a ring of wall segments
            wall = hx * math.sin(math.pi / BOWL_SEGMENTS) + 0.002
            parts = [f'<geom name="{obj.name}" type="cylinder" size="{_vec((hx * 0.8, 0.003))}" '
                     f'pos="{_vec((0, 0, -hz + 0.003))}" {common}/>']
            for i in range(BOWL_SEGMENTS):
                a = 2 * math.pi * i / BOWL_SEGMENTS
                parts.append(f'<geom name="{obj.name}_wall{i}" type="box" size="{_vec((0.003, wall, hz))}" '
                             f'pos="{_vec((hx * math.cos(a), hx * math.sin(a), 0))}" '
                             f'euler="0 0 {a:.9g}" {common}/>')
            geoms = "".join(parts)
        else:  # mug: a body with a handle on its side
            geoms = (f'<geom name="{obj.name}" type="cylinder" size="{_vec((hx, hz))}" {common}/>'
                     f'<geom name="{obj.name}_handle" type="box" pos="{_vec((hx + 0.008, 0, 0))}" '
                     f'size="{_vec((0.008, 0.004, hz * 0.6))}" {common}/>')
        objects.append(f'<body name="{obj.name}" pos="{_vec(pose[:3])}" quat="{_vec(quat_wxyz)}">'
                       f'<freejoint name="{obj.name}_free"/>'
                       f'<inertial pos="0 0 0" mass="{obj.mass_kg:.6g}" '
                       f'diaginertia="{_vec([obj.mass_kg * (hx * hx + hz * hz) / 3] * 3)}"/>'
                       f'{geoms}</body>')
    marker = ""
    if scene.marker_xy is not None:
        marker = (f'<geom name="marker" type="cylinder" size="0.045 0.0005" contype="0" conaffinity="0" '
                  f'pos="{_vec((*scene.marker_xy, TABLE_TOP_Z + 0.0005))}" '
                  f'rgba="{_vec((*COLOURS[scene.marker_colour], 1))}" group="3"/>')
    builtin = scene.table_texture
    return f"""
<mujoco model="k4d_datagen_scene">
  <option timestep="0.002" gravity="0 0 -9.81" cone="elliptic" impratio="5"/>
  <visual>
    <global offwidth="{cam.width}" offheight="{cam.height}" fovy="{cam.fovy_deg:.9g}"/>
    <quality offsamples="0" shadowsize="1024"/>
    <map znear="0.01" zfar="50"/>
    <headlight ambient="{_vec([scene.ambient] * 3)}" diffuse="0.25 0.25 0.25" specular="0 0 0"/>
  </visual>
  <statistic extent="1" center="0.4 0 0.2"/>
  <asset>
    <texture name="table" type="2d" builtin="{builtin}" rgb1="{_vec(scene.table_rgb)}"
             rgb2="{_vec(scene.table_rgb2)}" width="256" height="256"/>
    <material name="table" texture="table" texrepeat="3 3" specular="0.2" shininess="0.2"/>
    <material name="floor" rgba="{_vec((*scene.floor_rgb, 1))}"/>
    <material name="wall" rgba="{_vec((*scene.wall_rgb, 1))}"/>
  </asset>
  <worldbody>
    <light name="key" directional="true" dir="{_vec(scene.light_dir)}"
           diffuse="{_vec([scene.light_diffuse] * 3)}" castshadow="true"/>
    <geom name="table" type="box" size="{_vec((tx, ty, 0.02))}"
          pos="{_vec((0.35, 0.0, TABLE_TOP_Z - 0.02))}" material="table" friction="1.0 0.01 0.001" group="3"/>
    <geom name="floor" type="plane" size="6 6 0.1" pos="0 0 -0.75" material="floor" group="3"/>
    <geom name="wall_back" type="box" size="0.05 6 3" pos="-2.5 0 1" material="wall" contype="0" conaffinity="0" group="3"/>
    <geom name="wall_front" type="box" size="0.05 6 3" pos="3.5 0 1" material="wall" contype="0" conaffinity="0" group="3"/>
    <geom name="wall_left" type="box" size="6 0.05 3" pos="0 3 1" material="wall" contype="0" conaffinity="0" group="3"/>
    <geom name="wall_right" type="box" size="6 0.05 3" pos="0 -3 1" material="wall" contype="0" conaffinity="0" group="3"/>
    {marker}
    {''.join(objects)}
  </worldbody>
</mujoco>
"""


ROBOT_GROUP = 1


def _write_binary_stl(path, vertices: np.ndarray, faces: np.ndarray) -> None:
    import os

    tri = vertices[faces].astype("<f4")
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]).astype("<f4")
    records = np.zeros(len(faces), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    records["n"], records["v"] = normals, tri
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(b"k4d-datagen link mesh".ljust(80, b" "))
        f.write(np.uint32(len(faces)).tobytes())
        f.write(records.tobytes())
    os.replace(tmp, path)


MUJOCO_MAX_TRIANGLES_PER_LINK = 6000


def _decimated(vertices: np.ndarray, faces: np.ndarray, max_triangles: int) -> tuple[np.ndarray, np.ndarray]:
    """Quadric decimation (open3d) to at most `max_triangles`; on the Panda this keeps every
    original vertex within 1.4 mm of the surface (p99 < 1 mm), below a pixel of our clips."""
    if len(faces) <= max_triangles:
        return vertices, faces
    import open3d as o3d

    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(vertices.astype(np.float64)),
                                     o3d.utility.Vector3iVector(faces.astype(np.int32)))
    mesh = mesh.merge_close_vertices(1e-6).simplify_quadric_decimation(target_number_of_triangles=max_triangles)
    return np.asarray(mesh.vertices), np.asarray(mesh.triangles)


def link_mesh_files(link_meshes, robot_name: str) -> dict[int, str]:
    """The robot's link meshes for MuJoCo as binary STL files in a cache directory
    (content-addressed), so MuJoCo's asset cache compiles each mesh and its convex hull once
    per process. MuJoCo draws decimated copies (<= 6000 triangles per link): its software
    rasteriser spends most of an episode on the robot's ~150k triangles otherwise. The
    robot condition (mask, render, pointmap) always comes from our projection of the full
    meshes; tests hold the two to IoU >= 0.99."""
    import hashlib
    import os
    from pathlib import Path

    digest = hashlib.sha256(f"stl-v2-decimate-{MUJOCO_MAX_TRIANGLES_PER_LINK}".encode())
    for mesh in link_meshes:
        digest.update(np.ascontiguousarray(mesh.vertices).tobytes())
        digest.update(np.ascontiguousarray(mesh.faces).tobytes())
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "k4d" / "datagen-meshes"
    folder = root / f"{robot_name}-{digest.hexdigest()[:16]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable cache (read-only home): a per-user temp folder instead
        import tempfile

        folder = Path(tempfile.gettempdir()) / f"k4d-datagen-meshes-{os.getuid()}" / folder.name
        folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for mesh in link_meshes:
        path = folder / f"link{mesh.link_index}.stl"
        if not path.is_file():
            vertices, faces = _decimated(mesh.vertices, mesh.faces, MUJOCO_MAX_TRIANGLES_PER_LINK)
            _write_binary_stl(path, vertices, faces)
        files[mesh.link_index] = str(path)
    return files


def build_model(scene: SceneSpec, link_meshes, link_names: list[str], mesh_files: dict[int, str]):
    """-> (mujoco, MjModel, robot_body_ids: {link index: body id}). Robot links are mocap
    bodies in geom group 1 (their meshes' convex hulls collide with the objects)."""
    from k4d.mujoco_gl import import_mujoco
    from k4d.pointmap_codec import invert_rigid

    mujoco = import_mujoco()
    spec = mujoco.MjSpec.from_string(scene_xml(scene))
    for mesh in link_meshes:
        name = link_names[mesh.link_index]
        asset = spec.add_mesh(name=f"mesh_{name}", file=mesh_files[mesh.link_index])
        asset.inertia = mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL
        body = spec.worldbody.add_body(name=name, mocap=True)
        rgb = np.clip(mesh.face_rgb.mean(axis=0), 0, 1) if len(mesh.face_rgb) else np.full(3, 0.8)
        body.add_geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=f"mesh_{name}", mass=1.0,
                      group=ROBOT_GROUP, rgba=[*rgb.tolist(), 1.0], friction=[1.5, 0.01, 0.001],
                      condim=4)
    camera = scene.camera.camera()
    T_world_from_cam = invert_rigid(camera.T_cam_from_world)
    R_mj = T_world_from_cam[:3, :3] @ np.diag([1.0, -1.0, -1.0])  # MuJoCo cameras look along -z, y up
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(R_mj).ravel())
    spec.worldbody.add_camera(name="cam", pos=T_world_from_cam[:3, 3].tolist(), quat=quat.tolist(),
                              fovy=scene.camera.fovy_deg)
    model = spec.compile()
    bodies = {mesh.link_index: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY,
                                                  link_names[mesh.link_index])
              for mesh in link_meshes}
    return mujoco, model, bodies
