"""An independent renderer for the projection accuracy test and the benchmark anchors
(test-only code: services/projection/tests, benchmarks/): MuJoCo's OpenGL rasteriser
(headless through OSMesa) draws the same link meshes at the same poses from the same
camera, and its depth buffer is linearised to metres along the optical axis.

Optional dependency: `pip install mujoco` (extra `k4d-projection[bench]`) plus Debian
`libosmesa6`; `k4d.mujoco_gl.import_mujoco` picks the headless backend.
"""

from __future__ import annotations

import numpy as np
from k4d.camera import Camera
from k4d.errors import InvalidArgument
from k4d.mujoco_gl import OffscreenContext, import_mujoco
from k4d.pointmap_codec import invert_rigid

from k4d_projection.meshes import LinkMesh

_EXTENT_M = 1.0  # MuJoCo clip planes are relative to the model extent; we fix it


class MujocoReference:
    """Mocap bodies carrying each link's mesh; one fixed camera; depth read back per frame."""

    def __init__(self, link_meshes: list[LinkMesh], camera: Camera,
                 znear_m: float = 0.02, zfar_m: float = 20.0):
        if abs(camera.fx - camera.fy) > 1e-6 * camera.fy or \
                abs(camera.cx - (camera.width - 1) / 2) > 1e-6 or \
                abs(camera.cy - (camera.height - 1) / 2) > 1e-6 or camera.has_distortion:
            raise InvalidArgument.for_field(
                "camera", "MuJoCo cameras need fx == fy, a centred principal point and no "
                "distortion")
        self.mujoco = mujoco = import_mujoco()
        self.camera = camera
        self.znear, self.zfar = znear_m, zfar_m
        self.link_indices = [m.link_index for m in link_meshes]
        spec = mujoco.MjSpec()
        spec.stat.extent = _EXTENT_M
        spec.visual.map.znear = znear_m / _EXTENT_M
        spec.visual.map.zfar = zfar_m / _EXTENT_M
        spec.visual.quality.offsamples = 0  # no MSAA: one depth sample at each pixel centre
        spec.visual.global_.offwidth = camera.width
        spec.visual.global_.offheight = camera.height
        spec.visual.global_.fovy = camera.fovy_deg
        for mesh in link_meshes:
            name = f"link{mesh.link_index}"
            asset = spec.add_mesh(name=name)
            asset.uservert = mesh.vertices.astype(np.float64).ravel().tolist()
            asset.userface = mesh.faces.astype(np.int64).ravel().tolist()
            asset.inertia = mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL
            body = spec.worldbody.add_body(name=name, mocap=True)
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=name, contype=0,
                          conaffinity=0, mass=1.0)
        T_base_from_cam = invert_rigid(camera.T_cam_from_base)
        R_mj = T_base_from_cam[:3, :3] @ np.diag([1.0, -1.0, -1.0])  # MuJoCo: y up, looks -z
        cam_quat = np.empty(4)
        mujoco.mju_mat2Quat(cam_quat, np.ascontiguousarray(R_mj).ravel())
        spec.worldbody.add_camera(name="cam", pos=T_base_from_cam[:3, 3].tolist(),
                                  quat=cam_quat.tolist(), fovy=camera.fovy_deg)
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        self._gl = OffscreenContext(mujoco, self.model, camera.width, camera.height)
        self._scene = mujoco.MjvScene(self.model, maxgeom=len(link_meshes) + 16)
        self._option = mujoco.MjvOption()
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._cam.fixedcamid = 0
        self._window_depth = np.empty((camera.height, camera.width), np.float32)

    def render_depth(self, poses: np.ndarray) -> np.ndarray:
        """poses (T, L, 4, 4) T_base_from_link -> depth (T, H, W) float32 metres, 0 = miss."""
        mujoco = self.mujoco
        out = np.zeros((poses.shape[0], self.camera.height, self.camera.width), np.float32)
        quat = np.empty(4)
        for t in range(poses.shape[0]):
            for body, link in enumerate(self.link_indices):
                self.data.mocap_pos[body] = poses[t, link, :3, 3]
                mujoco.mju_mat2Quat(quat, poses[t, link, :3, :3].ravel())
                self.data.mocap_quat[body] = quat
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_camlight(self.model, self.data)  # camera poses (not in mj_kinematics)
            mujoco.mjv_updateScene(self.model, self.data, self._option, None, self._cam,
                                   mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            self._gl.render(self._scene)
            self._gl.read(None, self._window_depth)
            # OpenGL rows start at the bottom of the image.
            window = self._window_depth[::-1]
            depth, hit = self._gl.metres(window, self.znear, self.zfar)
            out[t] = np.where(hit, depth, 0.0)
        return out

    def close(self) -> None:
        self._gl.close()
