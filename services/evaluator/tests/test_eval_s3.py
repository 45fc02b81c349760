"""`k4d eval --pred s3://... --gt s3://...` against the real S3 server (moto) gives the
same report as the same files on local disk."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from k4d.cli.main import main

pytest.importorskip("zarr")
T, H, W = 3, 24, 32
CAMERA = {"width": W, "height": H, "fx": 30.0, "fy": 30.0, "cx": (W - 1) / 2, "cy": (H - 1) / 2,
          "T_cam_from_world": np.eye(4).tolist()}


def _episode(rng):
    from k4d.episodes import EpisodeMeta

    v, u = np.mgrid[0:H, 0:W]
    depth = np.broadcast_to(1.2 + 0.05 * np.cos(u / 4.0), (T, H, W)).astype(np.float32)
    pm = np.stack([(u - CAMERA["cx"]) / 30 * depth, (v - CAMERA["cy"]) / 30 * depth, depth], -1)
    robot = np.zeros((T, H, W), bool)
    robot[:, 3:9, 4:14] = True
    arrays = {"rgb": rng.integers(0, 256, (T, H, W, 3), dtype=np.uint8), "depth": depth,
              "pointmap": pm.astype(np.float32), "robot_mask": robot,
              "robot_rgb": np.zeros((T, H, W, 3), np.uint8),
              "robot_pointmap": np.where(robot[..., None], pm, 0).astype(np.float32),
              "joints": np.zeros((T, 2))}
    meta = EpisodeMeta(episode_id="ep0", frames=T, height=H, width=W, fps=10.0, task="t",
                       task_kind="import", success=None, success_judge="", robot="panda",
                       joint_names=["a", "b"], actions={}, camera=CAMERA, arrays=sorted(arrays))
    return meta, arrays


def _prediction(arrays, rng) -> dict[str, bytes]:
    """The files of a `k4d simulate` output directory that the evaluator reads."""
    def npz(**a):
        buf = io.BytesIO()
        np.savez(buf, **a)
        return buf.getvalue()

    pm = arrays["pointmap"] + rng.normal(0, 0.003, arrays["pointmap"].shape).astype(np.float32)
    rgb = np.clip(arrays["rgb"].astype(int) + 5, 0, 255).astype(np.uint8)
    return {"pointmap.npz": npz(pointmap=pm, mask=np.ones((T, H, W), bool), rgb=rgb),
            "robot.npz": npz(mask=arrays["robot_mask"])}


@pytest.mark.integration
def test_eval_reads_dataset_and_predictions_from_s3(s3_server, tmp_path, monkeypatch, rng):
    from k4d.episodes import DatasetWriter
    from k4d.episodes.location import open_location

    for key, value in {"K4D_S3_ENDPOINT": s3_server.endpoint, "K4D_S3_ACCESS_KEY": s3_server.access_key,
                       "K4D_S3_SECRET_KEY": s3_server.secret_key, "K4D_S3_REGION": s3_server.region,
                       "K4D_S3_SECURE": "false"}.items():
        monkeypatch.setenv(key, value)
    meta, arrays = _episode(rng)
    files = _prediction(arrays, rng)
    gt_s3, pred_s3 = "s3://k4d-eval-test/data/v1", "s3://k4d-eval-test/runs/r1"
    DatasetWriter(gt_s3).write_episode(meta, arrays)
    DatasetWriter(tmp_path / "data").write_episode(meta, arrays)
    loc = open_location(pred_s3)
    for name, data in files.items():
        loc.write_atomic(f"ep0/{name}", data)
        (tmp_path / "pred" / "ep0").mkdir(parents=True, exist_ok=True)
        (tmp_path / "pred" / "ep0" / name).write_bytes(data)

    common = ["--no-baseline", "--no-progress", "--geometry-pixels", "0"]
    assert main(["eval", "--pred", pred_s3, "--gt", gt_s3, "--out", str(tmp_path / "s3"), *common]) == 0
    assert main(["eval", "--pred", str(tmp_path / "pred"), "--gt", str(tmp_path / "data"),
                 "--out", str(tmp_path / "local"), *common]) == 0
    remote = json.loads((tmp_path / "s3" / "report.json").read_text())
    local = json.loads((tmp_path / "local" / "report.json").read_text())
    assert remote["metrics"] == local["metrics"] and remote["regions"] == local["regions"]
    assert remote["metrics"]["chamfer_l1"] > 0 and remote["regions"]["robot"]["psnr"] < 100
