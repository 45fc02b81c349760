"""How high the refiner's frame-0 geometry stands the objects of an RGB image (issue 21,
round 9): the push prior needs objects standing above the table, and an RGB-only rollout's
frame-0 points are this estimate.

    python benchmarks/demo_model/object_heights.py --data .k4d/demo-model/data/heldout \
        --run .k4d/abl/prev --model "shipped=models/demo-small/weights" \
        --model "object planes=.k4d/abl/geo_op10/weights" \
        --picture models/demo-small/eval/object_heights.png --episodes ep000001 ep000012

For each model, over every held-out episode's objects (ground-truth object ids of frame 0,
off the robot), heights above the table in the robot base frame (z; the table top is z = 0):
  top_true_m / top_est_m    median over objects of the 90th percentile of their points'
                            height, true and estimated
  standing                  share of object pixels estimated > 5 mm above the table (the
                            push prior's CLEARANCE_M)
  ring_standing             share of the table pixels 1-3 px around the objects estimated
                            > 5 mm above it (raised table: what the push prior takes for
                            an object)
The picture: per episode the given image, the true height map, and each model's, 0-8 cm.
Prints one JSON line per model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

CLEARANCE_M = 0.005  # k4d_model.contact.CLEARANCE_M
TOP_M = 0.08  # the picture's height scale


def heights(pipe, run: Path, dataset, episode_id: str):
    """(image, true heights, estimated heights, object pixels, table ring) of frame 0."""
    from ablate_fidelity import episode_inputs
    from k4d_eval.inputs import load_episode
    from k4d_model.fidelity import estimated_first_points
    from k4d_model.refiner import predict_change
    from scipy import ndimage

    image, _, condition = episode_inputs(run, episode_id)
    pose = dataset.open(episode_id).meta.camera_at(0).T_cam_from_base
    change = predict_change(pipe.refiner, image, condition, T_cam_from_base=pose)
    estimate = estimated_first_points(change.first_depth_m, condition)
    episode = load_episode(dataset, episode_id)
    T_base_from_cam = np.linalg.inv(pose)

    def z(points):
        return np.asarray(points, np.float64) @ T_base_from_cam[2, :3] + T_base_from_cam[2, 3]

    off_robot = ~condition.mask[0]
    objects = (episode.object_ids[0] > 0) & off_robot
    true = z(episode.pointmap[0])
    ring = (ndimage.binary_dilation(objects, iterations=3) & ~ndimage.binary_dilation(objects)
            & off_robot & (np.abs(true) < CLEARANCE_M))
    return image, true, z(estimate), episode.object_ids[0] * off_robot, ring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="held-out dataset URI")
    parser.add_argument("--run", required=True, type=Path,
                        help="a finished k4d eval run dir (its inputs/ and static-world/)")
    parser.add_argument("--model", action="append", required=True, help="LABEL=WEIGHTS_DIR")
    parser.add_argument("--picture", type=Path, help="write the height maps here (PNG)")
    parser.add_argument("--episodes", nargs="*", default=[], help="the picture's rows")
    args = parser.parse_args()

    from k4d.episodes import open_dataset
    from k4d_generator.pipeline import Kinema4DPipeline

    dataset = open_dataset(args.data)
    ids = sorted(p.name for p in (args.run / "static-world").iterdir() if p.is_dir())
    rows: dict[str, list] = {eid: [] for eid in args.episodes}
    for spec in args.model:
        label, _, weights = spec.partition("=")
        pipe = Kinema4DPipeline.from_pretrained(weights)
        tops_true, tops_est, standing, ring_standing = [], [], [], []
        for eid in ids:
            image, true, est, object_ids, ring = heights(pipe, args.run, dataset, eid)
            for k in np.unique(object_ids[object_ids > 0]):
                piece = object_ids == k
                tops_true.append(np.percentile(true[piece], 90))
                tops_est.append(np.percentile(est[piece], 90))
            standing.append(est[object_ids > 0] > CLEARANCE_M)
            ring_standing.append(est[ring] > CLEARANCE_M)
            if eid in rows:
                if not rows[eid]:
                    rows[eid] += [("given", image), ("true", true)]
                rows[eid].append((label, est))
        print(json.dumps({"model": label, "weights": weights, "episodes": len(ids),
                          "objects": len(tops_true),
                          "top_true_m": round(float(np.median(tops_true)), 4),
                          "top_est_m": round(float(np.median(tops_est)), 4),
                          "standing": round(float(np.concatenate(standing).mean()), 3),
                          "ring_standing": round(float(np.concatenate(ring_standing).mean()),
                                                 3)}), flush=True)
    if args.picture and rows:
        picture(rows, args.picture)


def picture(rows: dict[str, list], out: Path, scale: int = 3) -> None:
    import matplotlib
    from PIL import Image, ImageDraw

    tiles = []
    for panels in rows.values():
        line = []
        for label, values in panels:
            if values.ndim == 2:  # heights above the table, 0 .. TOP_M
                scaled = np.clip(values / TOP_M, 0.0, 1.0)
                values = (matplotlib.colormaps["magma"](scaled)[..., :3] * 255).astype(np.uint8)
            tile = Image.fromarray(values).resize((values.shape[1] * scale,
                                                   values.shape[0] * scale), Image.NEAREST)
            ImageDraw.Draw(tile).text((4, 4), label, fill=(255, 255, 255))
            line.append(np.asarray(tile))
        tiles.append(np.concatenate(line, axis=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(tiles, axis=0)).save(out)


if __name__ == "__main__":
    main()
