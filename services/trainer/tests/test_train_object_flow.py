"""The ground truth's backward flow and forward tracks (k4d_trainer.object_flow): a block
that slides, seen by a tilted camera, flows back to where it stood and its frame-0 points go
where it went; the table does not move; the robot and pixels whose source is outside the
image have no flow; an episode without object ids is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from k4d.camera import Camera
from k4d.episodes import DatasetWriter
from k4d.errors import InvalidArgument
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import DataSection
from k4d_trainer.data import open_source
from k4d_trainer.object_flow import (
    backward_flow,
    episode_flow,
    episode_tracks,
    fit_pinhole,
    forward_tracks,
)
from k4d_trainer.synthetic import synthetic_episode, write_dataset

H, W, F = 16, 24, 20.0
CX, CY = (W - 1) / 2, (H - 1) / 2
# camera from world: a rotation about x by 30 degrees and a shift
ANGLE = np.deg2rad(30.0)
CAM = np.array([[1, 0, 0, 0.2],
                [0, np.cos(ANGLE), -np.sin(ANGLE), -0.1],
                [0, np.sin(ANGLE), np.cos(ANGLE), 0.5],
                [0, 0, 0, 1.0]])


def _scene():
    """Two frames: a table at depth 2 (id -1), a block at depth 1 (id 1) that moves 2 px
    right and 1 px down (0.1, 0.05 m in the camera's frame), a second block (id 2) at the
    left edge that moves 2 px right, and robot pixels (id 0) in one corner."""
    rows, cols = np.mgrid[0:H, 0:W]
    ids = np.full((2, H, W), -1, np.int16)
    depth = np.full((2, H, W), 2.0)
    ids[0, 4:8, 5:10], ids[1, 5:9, 7:12] = 1, 1
    ids[0, 10:13, 0:1], ids[1, 10:13, 0:3] = 2, 2  # half of it outside the image at first
    ids[:, 13:, 20:] = 0
    depth[ids > 0] = 1.0
    pointmap = np.stack([(cols - CX) / F * depth, (rows - CY) / F * depth, depth], -1)
    rotation = CAM[:3, :3]
    moves = {1: rotation.T @ np.array([0.1, 0.05, 0.0]), 2: rotation.T @ np.array([0.1, 0, 0])}
    poses = np.zeros((2, 2, 7))
    poses[..., 6] = 1.0  # identity quaternions (x, y, z, w)
    poses[0, :, :3] = [[0.3, 0.1, 0.0], [-0.2, 0.0, 0.0]]
    poses[1, :, :3] = poses[0, :, :3] + np.stack([moves[1], moves[2]])
    return pointmap.astype(np.float32), ids, poses, np.stack([CAM, CAM])


def test_fit_pinhole_recovers_the_intrinsics():
    pointmap, _, _, _ = _scene()
    fx, fy, cx, cy = fit_pinhole(pointmap, pointmap[..., 2] > 0)
    assert (fx, fy, cx, cy) == pytest.approx((F, F, CX, CY), abs=1e-4)


def test_a_sliding_block_flows_back_to_where_it_stood():
    pointmap, ids, poses, cams = _scene()
    flow, valid = backward_flow(pointmap, ids, poses, cams)
    assert flow.shape == (2, H, W, 2) and valid.shape == (2, H, W)
    block = ids[1] == 1
    assert valid[1][block].all()
    assert np.allclose(flow[1][block], [-2.0, -1.0], atol=1e-4)
    table = ids[1] == -1
    assert valid[1][table].all() and np.abs(flow[1][table]).max() < 1e-4
    assert not valid[:, 13:, 20:].any()  # the robot's pixels
    edge = ids[1] == 2  # its first two columns came from outside the image
    assert np.array_equal(valid[1][edge], np.nonzero(edge)[1] == 2)
    assert np.allclose(flow[1][edge & valid[1]], [-2.0, 0.0], atol=1e-4)
    assert np.abs(flow[0][valid[0]]).max() < 1e-4  # frame 0 comes from itself


def test_objects_pixels_keep_the_objects_flow_alone():
    pointmap, ids, poses, cams = _scene()
    flow, valid = backward_flow(pointmap, ids, poses, cams)
    on_objects, objects = backward_flow(pointmap, ids, poses, cams, pixels="objects")
    assert np.array_equal(objects, valid & (ids > 0)) and np.array_equal(on_objects, flow)
    assert objects[1][ids[1] == 1].all() and not objects[1][ids[1] == -1].any()


def test_unknown_depth_has_no_flow():
    pointmap, ids, poses, cams = _scene()
    pointmap[1, 5, 7] = 0.0
    _, valid = backward_flow(pointmap, ids, poses, cams)
    assert not valid[1, 5, 7] and valid[1, 5, 8]


def _objects_episode(tmp_path):
    """The scene written as a k4d episode (opened) and its clip spec."""
    pointmap, ids, poses, _ = _scene()
    meta, arrays = synthetic_episode(0, frames=2, height=H, width=W)
    camera = Camera(width=W, height=H, fx=F, fy=F, cx=CX, cy=CY, T_cam_from_world=CAM)
    writer = DatasetWriter(str(tmp_path / "objects"))
    writer.write_episode(dataclasses.replace(meta, camera=camera,
                                             object_names=["block", "edge block"]),
                         {**arrays, "pointmap": pointmap, "object_ids": ids,
                          "object_poses": poses})
    writer.close()
    return open_source(DataSection(uri=str(tmp_path / "objects")), None).open("ep000"), \
        ClipSpec(2, H, W)


def test_episode_flow_reads_an_episode_and_refuses_one_without_objects(tmp_path):
    pointmap, ids, poses, cams = _scene()
    episode, clip = _objects_episode(tmp_path)
    flow, valid = episode_flow(episode, clip)
    expected_flow, expected_valid = backward_flow(pointmap, ids, poses, cams)
    assert np.array_equal(valid, expected_valid) and valid[1][ids[1] == 1].all()
    assert np.allclose(flow, expected_flow, atol=1e-4)
    plain = open_source(DataSection(uri=write_dataset(tmp_path / "plain", count=1)), None)
    with pytest.raises(InvalidArgument, match=r"cascade\.warp.*object_ids"):
        episode_flow(plain.open("ep000"), clip)


def test_forward_tracks_carry_frame_0s_surfaces_to_where_they_are():
    """The same scene forwards: the block's frame-0 points move 0.1, 0.05 m in the camera's
    frame; the table's stay; the robot's frame-0 points stay (kinematics' motion, not the
    scene's); an unknown point stays zero."""
    pointmap, ids, poses, cams = _scene()
    pointmap[0, 0, 0] = 0.0
    tracks = forward_tracks(pointmap, ids, poses, cams)
    assert tracks.shape == (2, H, W, 3) and tracks.dtype == np.float32
    assert np.allclose(tracks[0][pointmap[0, ..., 2] > 0], pointmap[0][pointmap[0, ..., 2] > 0])
    block = ids[0] == 1
    assert np.allclose(tracks[1][block], pointmap[0][block] + [0.1, 0.05, 0.0], atol=1e-5)
    table = (ids[0] == -1) & (pointmap[0, ..., 2] > 0)
    assert np.allclose(tracks[1][table], pointmap[0][table], atol=1e-5)
    assert np.allclose(tracks[1][ids[0] == 0], pointmap[0][ids[0] == 0])
    assert (tracks[:, 0, 0] == 0).all()
    # forwards then backwards: a block pixel's flow at frame 1 leads back to its frame-0 pixel
    flow, valid = backward_flow(pointmap, ids, poses, cams)
    u = F * tracks[1, 4, 5, 0] / tracks[1, 4, 5, 2] + CX
    v = F * tracks[1, 4, 5, 1] / tracks[1, 4, 5, 2] + CY
    row, col = int(round(v)), int(round(u))
    assert valid[1, row, col] and np.allclose(flow[1, row, col], [5 - col, 4 - row], atol=1e-4)


def test_episode_tracks_reads_an_episode_and_refuses_one_without_objects(tmp_path):
    pointmap, ids, poses, cams = _scene()
    episode, clip = _objects_episode(tmp_path)
    assert np.allclose(episode_tracks(episode, clip), forward_tracks(pointmap, ids, poses, cams),
                       atol=1e-5)
    plain = open_source(DataSection(uri=write_dataset(tmp_path / "plain", count=1)), None)
    with pytest.raises(InvalidArgument, match=r"training\.latent_target.*object_ids"):
        episode_tracks(plain.open("ep000"), clip)
