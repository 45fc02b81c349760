"""The demo model's publishing steps (issue 13), used by examples/train/demo-model.sh:

    demo_model.py export  --config CFG --run RUN --out models/demo-small [--label early]
    demo_model.py resume-pack --run RUN --dest models/demo-small/resume
    demo_model.py resume-unpack --src models/demo-small/resume --run RUN
    demo_model.py golden --model models/demo-small [--example examples/demo_heldout]
    demo_model.py motion-decoder --model DIR --data CASCADE_DATA --pairs RUN/motion_pairs

`export` turns the newest COMMITTED checkpoint of a from-scratch run (finished or not) into
a shipped model: the trainer's own builders (`k4d_trainer.model.load_components`, the run's
committed VAE, `k4d_trainer.publish.write_model_dir`, i.e. the layout `k4d train` publishes)
under OUT/weights/, then OUT/manifest.json with every file's sha256 (the registry's
`build_manifest`) plus where the weights came from (run, step, wall time, loss), and
OUT/loss.png from the run's metrics. `k4d simulate --model OUT` verifies the sha256 of
every file before loading (k4d_embedded.shipped).

`resume-pack` copies what `k4d train --resume` needs to continue the run from another
clone (the committed VAE, the newest committed checkpoint and its pointer, metrics.jsonl)
into DEST; `resume-unpack` puts it back into a run directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

MANIFEST = "manifest.json"
WEIGHTS = "weights"


def _newest_checkpoint(run: Path) -> tuple[int, Path]:
    pointer = json.loads((run / "checkpoints" / "latest.json").read_text())
    folder = run / "checkpoints" / pointer["path"]
    if not (folder / "COMMITTED").exists():
        sys.exit(f"demo_model: error: {folder} is not committed")
    return int(pointer["step"]), folder


def _metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    from k4d_trainer.runs import step_lines  # the steps' lines, not the sample lines

    return step_lines([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def export(config_path: str, run: Path, out: Path, label: str, name: str,
           default: bool = False, weights: str = "auto") -> dict:
    from k4d_model.registry import build_manifest
    from k4d_trainer.config import load_config_file
    from k4d_trainer.observe import write_loss_curves
    from k4d_trainer.publish import write_model_dir

    config = load_config_file(config_path)
    if config.recipe != "from-scratch":
        sys.exit("demo_model: error: export handles from-scratch runs only")
    step, folder = _newest_checkpoint(run)
    averaged = bool(config.training.ema_decay)
    weights = ("ema" if averaged else "raw") if weights == "auto" else weights
    if weights == "ema" and not averaged:
        sys.exit(f"demo_model: error: --weights ema: {config_path} trains no weight average "
                 "(training.ema_decay is 0)")
    raw_of_average = averaged and weights == "raw"  # not the weights the run publishes
    components = _run_components(config, run)
    fidelity, cascade, cascade_step = _attach_cascade(components, config, run, step,
                                                      raw_of_average)
    full = _checkpoint_transformer(components, config, folder, weights)
    # A second stage names the steps of both: step-3794-then-2000.
    started_from = components.info.version if config.model.init else None
    version = f"{started_from}-then-{step}" if started_from else f"step-{step}"
    if raw_of_average:
        version += "-raw"
    if out.exists():
        shutil.rmtree(out / WEIGHTS, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    write_model_dir(components, full, out / WEIGHTS, lora_rank=None, lora_alpha=None,
                    official_layout=False, base_is_plain_wan=False, name=name, version=version)
    metrics = [m for m in _metrics(run) if m["step"] <= step]
    manifest = build_manifest(out / WEIGHTS, name, version)
    info = components.info
    manifest.update({
        "weights_dir": WEIGHTS,
        "label": label,
        "default": default,
        "description": "small Kinema4D model trained from scratch on synthetic k4d datagen "
                       "episodes (not the 14B model)",
        "clip": {"num_frames": info.num_frames, "height": info.height, "width": info.width},
        "training": _training_record(config, config_path, step, weights, started_from,
                                     cascade, cascade_step, metrics),
        "fidelity": fidelity,
    })
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if metrics:
        write_loss_curves(metrics, out)
        (out / "lr.png").unlink(missing_ok=True)
    return manifest


def _run_components(config, run: Path):
    """The recipe's model with the run's own VAE and change refiner in it (a second stage
    keeps its init model's VAE)."""
    from k4d_trainer import model as model_lib
    from k4d_trainer.refiner_stage import load_run_refiner
    from k4d_trainer.runs import RunDir
    from k4d_trainer.vae import load_saved_vae

    components = model_lib.load_components(config.recipe, config.model, config.seed)
    run_dir = RunDir(str(run.resolve()))
    vae = load_saved_vae(run_dir)
    if vae is not None:
        components.vae = vae
    elif not config.model.init:
        sys.exit(f"demo_model: error: {run} has no committed VAE")
    model_lib.record_recipe(components, config)
    refiner = load_run_refiner(run_dir)
    if refiner is not None:
        components.refiner = refiner
    elif config.refiner.steps:
        sys.exit(f"demo_model: error: {run} has no committed refiner")
    return components


def _attach_cascade(components, config, run: Path, step: int, raw_of_average: bool):
    """Put the run's sample refiner into `components` where it learned these weights'
    rollouts. Returns the output options to write, the refiner (or None) and the transformer
    step its rollouts came from."""
    from k4d_model.options import CASCADE_KEY
    from k4d_trainer.cascade_stage import cascade_source_step, load_run_cascade
    from k4d_trainer.runs import RunDir

    run_dir = RunDir(str(run.resolve()))
    cascade = load_run_cascade(run_dir)
    cascade_step = cascade_source_step(run_dir)
    fidelity = dict(config.model.fidelity)
    if cascade is not None and not fidelity.get(CASCADE_KEY):
        # a recipe without the output option exports the sample only, whatever the run holds
        cascade = None
    if cascade is not None and raw_of_average:
        # its rollouts were the average's samples, not these weights'
        print(f"demo_model: warning: --weights raw: {run}'s sample refiner learned the "
              "weight average's rollouts; exported without it (the sample only)",
              file=sys.stderr)
        cascade = None
        components.info.extra.pop(CASCADE_KEY, None)
        fidelity.pop(CASCADE_KEY, None)
    if cascade is not None:
        if cascade_step is None:
            print(f"demo_model: warning: {run} does not record which transformer step its "
                  "sample refiner's rollouts came from", file=sys.stderr)
        elif cascade_step != step:
            sys.exit(f"demo_model: error: {run}'s sample refiner learned transformer step "
                     f"{cascade_step}'s rollouts, the newest checkpoint is step {step}: "
                     "resume the run (k4d train --resume) to sample and train it again")
        components.cascade = cascade
    elif config.cascade.steps and not raw_of_average:
        sys.exit(f"demo_model: error: {run} has no committed sample refiner (cascade/)")
    return fidelity, cascade, cascade_step


def _checkpoint_transformer(components, config, folder: Path, weights: str) -> dict:
    """The transformer's full state dict with the checkpoint's trained parameters: the last
    step's (`raw`) or their moving average (`ema`, k4d_trainer.ema), which the run publishes.
    A run that turned the average on when it resumed holds it from then on."""
    import torch.distributed.checkpoint as dcp
    from k4d_trainer import model as model_lib

    transformer = components.transformer
    model_lib.set_trainable(transformer, config.recipe)
    # The checkpoint holds the trainable parameters (ignore_frozen_params); the frozen ones
    # (the unused text embedder) are rebuilt from the seed, exactly as the trainer does.
    trained = {n: p.detach().clone() for n, p in transformer.named_parameters()
               if p.requires_grad}
    state = {"ema": {"weights": trained}} if weights == "ema" else \
        {"model_optim": {"model": trained}}
    reader = dcp.FileSystemReader(str(folder))
    if weights == "ema" and not any(key.startswith("ema.")
                                    for key in reader.read_metadata().state_dict_metadata):
        sys.exit(f"demo_model: error: {folder} holds no weight average (a checkpoint "
                 "written before training.ema_decay was set); export --weights raw")
    dcp.load(state, storage_reader=reader)
    full = {n: t.detach().float().clone() for n, t in transformer.state_dict().items()}
    full.update({n: t.float() for n, t in trained.items()})
    return full


def _training_record(config, config_path: str, step: int, weights: str,
                     started_from: str | None, cascade, cascade_step: int | None,
                     metrics: list[dict]) -> dict:
    """The manifest's `training` entry: where the weights came from and how."""
    return {"recipe_file": config_path, "recipe": config.recipe,
            "size": config.model.size, "seed": config.seed, "step": step,
            "planned_steps": config.training.steps,
            "global_batch_size": config.training.global_batch_size,
            "weights": weights, "ema_decay": config.training.ema_decay,
            "vae_steps": 0 if config.model.init else config.vae.steps,
            "refiner_steps": config.refiner.steps,
            **{f"{section}_refiner_steps": getattr(config.refiner, section).steps
               for section in ("geometry", "objects")
               if getattr(config.refiner, section) is not None},
            "cascade_steps": config.cascade.steps,
            "cascade_data": config.cascade.data_uri or None,
            "cascade_transformer_step": cascade_step if cascade is not None else None,
            "cascade_samples": cascade.config.samples if cascade is not None else None,
            "init": config.model.init, "init_version": started_from,
            "changed_loss_weight": config.training.changed_loss_weight,
            "latent_target": config.training.latent_target,
            "motion_scale": config.training.motion_scale,
            "robot_loss_weight": config.training.robot_loss_weight,
            "condition_dropout": config.training.condition_dropout,
            "train_seconds": round(sum(m.get("step_time_s", 0.0) for m in metrics), 1),
            "last_loss": metrics[-1]["loss"] if metrics else None}


def set_options(config_path: str, model: Path, training: dict | None = None) -> dict:
    """Apply the recipe's `model.fidelity` output options (k4d_model.json `extra`) and its
    `model.guidance_scale` and `model.guidance_halves`, when set, to an exported model and
    refresh the manifest's file hashes: the weights stay, the way they are sampled changes.
    `export` applies them too; this re-applies them to a model exported before a recipe's
    options changed. `training`: fields merged into the manifest's training record."""
    from k4d_model.options import FIDELITY_KEYS, GUIDANCE_HALVES_KEY
    from k4d_trainer.config import load_config_file

    config = load_config_file(config_path)
    info_path = model / WEIGHTS / "k4d_model.json"
    info = json.loads(info_path.read_text())
    extra = {k: v for k, v in info.get("extra", {}).items()
             if k not in FIDELITY_KEYS}
    info["extra"] = {**extra, **config.model.fidelity}
    if config.model.guidance_scale is not None:
        info["guidance_scale"] = float(config.model.guidance_scale)
    if config.model.guidance_halves is not None:
        info["extra"][GUIDANCE_HALVES_KEY] = config.model.guidance_halves
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    _refresh_manifest(model, training, fidelity=config.model.fidelity)
    return {"model": str(model), "extra": info["extra"]}


def _refresh_manifest(model: Path, training: dict | None = None, **fields) -> None:
    """MODEL/manifest.json after its weights changed: every file's sha256 again, `fields`
    set and `training` merged into its training record."""
    from k4d_model.registry import build_manifest

    manifest = json.loads((model / MANIFEST).read_text())
    fresh = build_manifest(model / WEIGHTS, manifest["name"], manifest["version"])
    manifest.update(files=fresh["files"], **fields)
    if training:
        manifest.setdefault("training", {}).update(training)
    (model / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def add_refiner(config_path: str, run: Path, model: Path, processes: int = 2) -> dict:
    """Train the recipe's change refiner in RUN (the trainer's own refiner stage, resumable
    there; one process with the batch of `processes` data-parallel ones) and add it to an
    exported model (MODEL/weights/refiner/, manifest refreshed): a model exported before
    its recipe had a refiner section gets the refiner the recipe now trains in its run. A
    RUN whose committed refiner lacks the object network the recipe now has (the model's
    own refiner, committed there) gets that network alone (issue 21, round 18)."""
    import dataclasses

    from k4d.episodes import open_dataset
    from k4d_model.refiner import save_refiner
    from k4d_trainer.clips import ClipSpec
    from k4d_trainer.config import load_config_file
    from k4d_trainer.data import select_episodes
    from k4d_trainer.parallel import DistInfo, stage_dtype
    from k4d_trainer.refiner_stage import refiner_stage
    from k4d_trainer.runs import RunDir

    config = load_config_file(config_path)
    if not config.refiner.steps:
        sys.exit(f"demo_model: error: {config_path} has no refiner section (refiner.steps 0)")
    info = json.loads((model / WEIGHTS / "k4d_model.json").read_text())
    clip = ClipSpec(info["num_frames"], info["height"], info["width"])
    dataset = open_dataset(config.data.uri)
    def one_process(section):  # the batch of `processes` data-parallel ones
        if section is None:
            return None
        return dataclasses.replace(section, batch_size=section.batch_size * processes,
                                   geometry=one_process(section.geometry),
                                   objects=one_process(section.objects))

    section = one_process(config.refiner)

    class Components:
        refiner = None

    components = Components()
    refiner_stage(components, dataset, select_episodes(dataset, config.data, clip), clip,
                  section, DistInfo(), RunDir(str(run.resolve())), config.seed,
                  log=lambda line: print(line, flush=True),
                  compute_dtype=stage_dtype(config.model.precision))
    save_refiner(components.refiner, model / WEIGHTS)
    training = {"refiner_steps": config.refiner.steps}
    if config.refiner.max_episodes is not None:
        training["refiner_episodes"] = config.refiner.max_episodes
    if config.refiner.objects is not None:
        training["objects_refiner_steps"] = config.refiner.objects.steps
    _refresh_manifest(model, training)
    return {"model": str(model), "refiner": str(model / WEIGHTS / "refiner")}


def add_cascade(config_path: str, run: Path, model: Path, processes: int = 2) -> dict:
    """Train the recipe's sample refiner (its `cascade` section: the trainer's own stage,
    resumable in RUN) on rollouts of an exported model's own transformer, and put it in the
    model (MODEL/weights/cascade/ replaced, the recipe's output options applied, manifest
    refreshed): a new sample refiner for a model without training its transformer again.
    One process with the batch of `processes` data-parallel ones."""
    import dataclasses

    from k4d_model import checkpoints
    from k4d_model.cascade import save_cascade
    from k4d_trainer.cascade_stage import cascade_stage
    from k4d_trainer.clips import ClipSpec
    from k4d_trainer.config import load_config_file
    from k4d_trainer.parallel import DistInfo, stage_dtype
    from k4d_trainer.runs import RunDir

    config = load_config_file(config_path)
    if not config.cascade.steps:
        sys.exit(f"demo_model: error: {config_path} has no cascade section (cascade.steps 0)")
    manifest = json.loads((model / MANIFEST).read_text())
    step = int(manifest["training"]["step"])
    components = checkpoints.load_model(model / WEIGHTS)
    info = components.info
    section = dataclasses.replace(config.cascade,
                                  batch_size=config.cascade.batch_size * processes)
    cascade_stage(components, components.transformer, step,
                  ClipSpec(info.num_frames, info.height, info.width), section, DistInfo(),
                  RunDir(str(run.resolve())), config.seed,
                  stage_dtype(config.model.precision),
                  log=lambda line: print(line, flush=True))
    shutil.rmtree(model / WEIGHTS / "cascade", ignore_errors=True)
    save_cascade(components.cascade, model / WEIGHTS)
    # the output option that reads it, as the recipe sets it; the manifest hashed once
    set_options(config_path, model, {"cascade_steps": config.cascade.steps,
                                     "cascade_data": config.cascade.data_uri,
                                     "cascade_recipe_file": config_path})
    return {"model": str(model), "cascade": str(model / WEIGHTS / "cascade"),
            "transformer_step": step}


def add_motion_decoder(model: Path, data: str, pairs: Path, episodes: int, steps: int,
                       seed: int, moving_weight: float = 10.0, colour: bool = False) -> dict:
    """Train a motion decoder (k4d_model.motion_decoder) on an exported tracks model's own
    samples of `episodes` episodes of DATA (not its training episodes; the pairs stored in
    PAIRS, resumable) and add it to the model: MODEL/weights/motion_decoder/, its
    `motion_decoder: learned` option, the manifest refreshed."""
    import torch
    from k4d_model.checkpoints import load_model
    from k4d_model.latent_target import samples_tracks
    from k4d_model.motion_decoder import MotionDecoderConfig, save_motion_decoder
    from k4d_model.options import MOTION_DECODER_KEY, MOTION_DECODER_LEARNED
    from k4d_model.pipeline import Kinema4DPipeline
    from k4d_trainer.clips import ClipSpec
    from k4d_trainer.config import DataSection
    from k4d_trainer.data import open_source
    from k4d_trainer.model import sampling_components
    from k4d_trainer.motion_decoder_stage import sample_pairs, train_motion_decoder
    from k4d_trainer.progress import TrainedDenoiser

    components = load_model(str(model / WEIGHTS))
    if not samples_tracks(components.info.extra):
        sys.exit(f"demo_model: error: {model} does not sample tracks (latent_target), so it "
                 "has no motion to decode")
    info = components.info
    clip = ClipSpec(info.num_frames, info.height, info.width)
    pipe = Kinema4DPipeline(sampling_components(components),
                            TrainedDenoiser(components.transformer, None, torch.device("cpu")),
                            device="cpu", model_id="motion-decoder-pairs")
    source = open_source(DataSection(uri=data), None)
    ids = list(source.episode_ids)[:episodes]
    log = lambda line: print(line, flush=True)  # noqa: E731
    stored = sample_pairs(pipe, source, ids, clip, pairs, seed, log=log)
    network, history = train_motion_decoder(stored, steps, MotionDecoderConfig(colour=colour),
                                            moving_weight=moving_weight, seed=seed, log=log)
    save_motion_decoder(network, model / WEIGHTS)
    info_path = model / WEIGHTS / "k4d_model.json"
    meta = json.loads(info_path.read_text())
    meta["extra"][MOTION_DECODER_KEY] = MOTION_DECODER_LEARNED
    info_path.write_text(json.dumps(meta, indent=2) + "\n")
    last = history[-min(100, len(history)):]
    record = {"data": data, "episodes": len(ids), "steps": steps, "seed": seed,
              "moving_weight": moving_weight, "colour": colour,
              "loss": sum(h["loss"] for h in last) / len(last),
              "decoded_loss": sum(h["decoded_loss"] for h in last) / len(last)}
    _refresh_manifest(model, {"motion_decoder": record})
    return {"model": str(model), "motion_decoder": str(model / WEIGHTS / "motion_decoder"),
            **record}


# The manifest's `heldout` figures (what `make demo` prints), in this order.
HELDOUT_KEYS = ("episodes", "frames", "given", "frame0_psnr_min", "static_psnr",
                "static_psnr_floor", "changed_mse", "changed_mse_floor", "changed_cd_l1_m",
                "changed_cd_l1_m_floor", "robot_psnr", "robot_psnr_floor", "depth_absrel",
                "depth_absrel_floor", "objects_depth_absrel", "objects_depth_absrel_floor",
                "success_agreement", "judge_abstained")


def heldout_figures(report: dict) -> dict:
    """The model card's held-out figures of a `k4d eval run` report (issue 21's goals),
    the floor's beside each."""
    from k4d_eval.report import goal_figures

    figures = goal_figures(report)
    return {key: figures[key] for key in HELDOUT_KEYS}


def headline(model: Path, report_path: Path) -> dict:
    """Store the held-out figures in the model's manifest (`heldout`): what `make demo`
    prints in one line."""
    figures = heldout_figures(json.loads(report_path.read_text()))
    manifest = json.loads((model / MANIFEST).read_text())
    manifest["heldout"] = figures
    (model / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return figures


HEIGHT_SHOWN_M = 0.08  # compare --show height: white at this height above the base


def _height_image(points, T_base_from_cam):
    """(T, H, W, 3) uint8 grey: the height of each point (T, H, W, 3), first camera, in the
    base frame, 0 to HEIGHT_SHOWN_M; black where there is no point."""
    import numpy as np

    points = np.asarray(points, np.float64)
    height = points @ T_base_from_cam[2, :3] + T_base_from_cam[2, 3]
    level = np.clip(height / HEIGHT_SHOWN_M, 0.0, 1.0) * 255.0
    level = np.where(points[..., 2] > 0, level, 0.0)
    return np.repeat(np.round(level).astype(np.uint8)[..., None], 3, axis=-1)


def compare_strip(data: str, episodes: list[str], rows: list[str], out: Path,
                  frames: int = 5, scale: int = 2, at: list[int] | None = None,
                  crop: int = 0, show: str = "rgb") -> dict:
    """One picture a person can judge at a glance: per episode, a row each for the ground
    truth and every NAME=DIR of `k4d simulate` outputs (DIR/<episode>/pointmap.npz), at
    `frames` evenly spaced frames (or the frames `at`); the first column is frame 0, the
    image every method was given. Labels on the left. crop > 0: a square of 2 x crop pixels
    around the task's objects (1 and 2 of frame 0's object ids), so a small object's motion
    can be seen. show "height": each pixel's point's height above the robot's base,
    0 (black) to HEIGHT_SHOWN_M (white), instead of its colour (no point: black), so what
    stands up and what lies flat can be told apart."""
    import numpy as np
    from k4d.episodes import open_dataset
    from PIL import Image, ImageDraw

    dataset = open_dataset(data)
    named = [r.partition("=")[::2] for r in rows]
    tiles = []
    for episode_id in episodes:
        episode = dataset.open(episode_id)
        key = "pointmap" if show == "height" else "rgb"
        truth = episode.read(key)
        pick = (np.asarray(at, int) if at else
                np.linspace(0, truth.shape[0] - 1, frames).round().astype(int))
        box = _object_box(episode.read("object_ids")[0], crop) if crop else np.s_[:, :]
        clips = [("ground truth", truth)]
        for name, folder in named:
            with np.load(Path(folder) / episode_id / "pointmap.npz") as npz:
                clips.append((name, npz[key]))
        if show == "height":
            T_base_from_cam = np.linalg.inv(episode.meta.camera_at(0).T_cam_from_base)
            clips = [(name, _height_image(clip, T_base_from_cam)) for name, clip in clips]
        for name, clip in clips:
            row = np.concatenate([clip[t][box] for t in pick], axis=1)
            tiles.append((f"{episode_id} {name}", row))
    label_w = 150
    h, w = tiles[0][1].shape[:2]
    canvas = Image.new("RGB", (label_w + w * scale, h * scale * len(tiles)), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (label, row) in enumerate(tiles):
        image = Image.fromarray(row).resize((w * scale, h * scale), Image.Resampling.NEAREST)
        canvas.paste(image, (label_w, i * h * scale))
        draw.text((4, i * h * scale + h * scale // 2 - 6), label, fill="black")
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)
    return {"picture": str(out), "rows": len(tiles), "frames": [int(t) for t in pick]}


def _object_box(object_ids, half: int) -> tuple[slice, slice]:
    """(rows, columns) of a square of 2 x half pixels around objects 1 and 2 of one frame's
    object ids (H, W), inside the image (its centre when neither is seen)."""
    import numpy as np

    H, W = object_ids.shape
    vv, uu = np.nonzero((object_ids == 1) | (object_ids == 2))
    if len(vv) == 0:
        vv, uu = np.array([H // 2]), np.array([W // 2])
    side = min(2 * half, H, W)
    v0 = int(np.clip(round((vv.min() + vv.max()) / 2) - side // 2, 0, H - side))
    u0 = int(np.clip(round((uu.min() + uu.max()) / 2) - side // 2, 0, W - side))
    return np.s_[v0:v0 + side, u0:u0 + side]


ARCHIVE = "checkpoint.tar.xz"


def resume_pack(run: Path, dest: Path) -> dict:
    """DEST: vae/ (the committed VAE), checkpoint.tar.xz (the newest committed checkpoint
    folder and checkpoints/latest.json; xz: stdlib, ~9 % smaller than the raw fp32
    parameters and AdamW moments), metrics.jsonl."""
    import tarfile

    step, folder = _newest_checkpoint(run)
    if not (run / "vae" / "COMMITTED").exists():
        sys.exit(f"demo_model: error: {run} has no committed VAE")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copytree(run / "vae", dest / "vae")
    with tarfile.open(dest / ARCHIVE, "w:xz", preset=6) as tar:
        tar.add(folder, arcname=f"checkpoints/{folder.name}")
        tar.add(run / "checkpoints" / "latest.json", arcname="checkpoints/latest.json")
    if (run / "metrics.jsonl").exists():
        shutil.copy2(run / "metrics.jsonl", dest / "metrics.jsonl")
    (dest / "step.json").write_text(json.dumps({"step": step}) + "\n")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return {"step": step, "dest": str(dest), "bytes": size}


def resume_unpack(src: Path, run: Path) -> dict:
    """Put a resume-pack back into a run directory, unless the run is already further."""
    import tarfile

    step = int(json.loads((src / "step.json").read_text())["step"])
    if (run / "checkpoints" / "latest.json").exists():
        have, _ = _newest_checkpoint(run)
        if have >= step:
            return {"step": have, "run": str(run), "unpacked": False}
    run.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "vae", run / "vae", dirs_exist_ok=True)
    with tarfile.open(src / ARCHIVE, "r:xz") as tar:
        tar.extractall(run, filter="data")
    if (src / "metrics.jsonl").exists():
        shutil.copy2(src / "metrics.jsonl", run / "metrics.jsonl")
    _newest_checkpoint(run)  # the pointer and the COMMITTED marker came back
    return {"step": step, "run": str(run), "unpacked": True}


GOLDEN_INDEX = {"frames": [0, 6, 12], "rows": [20, 40, 60, 80], "cols": [30, 60, 90, 120]}


def golden(model: Path, example: Path, steps: int | None, seed: int) -> dict:
    """A sampling run of the shipped model on the held-out example scene, with its own
    settings (its sampler steps unless `steps` is given); writes MODEL/golden.json (the
    slice the golden test compares)."""
    import tempfile

    import numpy as np
    from k4d.cli.main import main as k4d_main

    frames = json.loads((example / "actions.json").read_text())["num_frames"]
    args = ["--robot", "panda", "--actions", str(example / "actions.json"),
            "--image", str(example / "scene.png"), "--camera", str(example / "camera.json"),
            "--frames", str(frames), *(["--steps", str(steps)] if steps else []),
            "--seed", str(seed)]
    with tempfile.TemporaryDirectory(prefix="k4d-golden-") as tmp:
        if k4d_main(["simulate", *args, "--model", str(model), "--out", tmp, "--no-progress",
                     "--no-recording"]) != 0:
            sys.exit("demo_model: error: the sampling run failed")
        with np.load(Path(tmp) / "pointmap.npz") as data:
            rgb, points = data["rgb"], data["pointmap"]
    index = np.ix_(*(np.array(GOLDEN_INDEX[k]) for k in ("frames", "rows", "cols")))
    rel = [str(Path(a).resolve().relative_to(Path.cwd().resolve())) if a.startswith("/") else a
           for a in args]
    record = {"args": rel, "index": GOLDEN_INDEX, "rgb": rgb[index].astype(int).tolist(),
              "pointmap": np.round(points[index].astype(np.float64), 6).tolist()}
    (model / "golden.json").write_text(json.dumps(record) + "\n")
    return {"golden": str(model / "golden.json")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--config", required=True)
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--label", default="early", help="early | trained (shown in every output)")
    p.add_argument("--name", default="k4d-demo-small")
    p.add_argument("--weights", choices=("auto", "raw", "ema"), default="auto",
                   help="the last step's weights (raw) or their moving average (ema); auto: "
                        "the average when the recipe trains one (training.ema_decay)")
    p.add_argument("--default", action="store_true",
                   help="make it the model `k4d simulate` uses without --model")
    p = sub.add_parser("resume-pack")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--dest", required=True, type=Path)
    p = sub.add_parser("resume-unpack")
    p.add_argument("--src", required=True, type=Path)
    p.add_argument("--run", required=True, type=Path)
    p = sub.add_parser("options", help="apply the recipe's model.fidelity (and "
                                       "model.guidance_scale, model.guidance_halves) to an "
                                       "exported model and "
                                       "refresh its manifest")
    p.add_argument("--config", required=True)
    p.add_argument("--model", required=True, type=Path)
    p = sub.add_parser("refiner", help="train the recipe's change refiner in RUN and add it "
                                       "to an exported model")
    p.add_argument("--config", required=True)
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--model", required=True, type=Path)
    p = sub.add_parser("cascade", help="train the recipe's sample refiner on an exported "
                                        "model's own rollouts (in RUN) and put it in the model")
    p.add_argument("--config", required=True)
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--model", required=True, type=Path)
    p = sub.add_parser("motion-decoder", help="train a motion decoder on an exported tracks "
                                              "model's own samples and add it to the model")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--data", required=True,
                   help="episodes the transformer did not train on (the recipe's cascade data)")
    p.add_argument("--pairs", required=True, type=Path,
                   help="where the sampled pairs are stored (a rerun samples only the missing)")
    p.add_argument("--episodes", type=int, default=192)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seed", type=int, default=5077)
    p.add_argument("--moving-weight", type=float, default=10.0,
                   help="the loss's extra weight where the sample or the truth moves")
    p.add_argument("--colour", action="store_true",
                   help="the decoder reads the sample's RGB half too")
    p = sub.add_parser("headline", help="store a k4d eval run's held-out figures in the "
                                        "model's manifest (make demo prints them)")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--report", required=True, type=Path)
    p = sub.add_parser("compare", help="a strip picture: ground truth and each method's "
                                       "rollouts of some episodes, frame 0 first")
    p.add_argument("--data", required=True)
    p.add_argument("--episodes", nargs="+", required=True)
    p.add_argument("--row", action="append", required=True, help="NAME=DIR (k4d simulate outputs)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--at", nargs="+", type=int, help="these frames (default: 5 evenly spaced)")
    p.add_argument("--crop", type=int, default=0,
                   help="half-size in pixels of a square around the task's objects (0: all)")
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("--show", choices=("rgb", "height"), default="rgb",
                   help="what a tile shows: colour, or height above the base (0-8 cm)")
    p = sub.add_parser("golden")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--example", type=Path, default=Path("examples/demo_heldout"))
    p.add_argument("--steps", type=int, default=None,
                   help="sampler steps (default: the model's own, as shipped)")
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "export":
        manifest = export(args.config, args.run, args.out, args.label, args.name, args.default,
                          args.weights)
        print(json.dumps({"out": str(args.out), "version": manifest["version"],
                          "files": len(manifest["files"]),
                          "bytes": sum(f["size_bytes"] for f in manifest["files"])}))
    elif args.command == "compare":
        print(json.dumps(compare_strip(args.data, args.episodes, args.row, args.out,
                                       scale=args.scale, at=args.at, crop=args.crop,
                                       show=args.show)))
    elif args.command == "headline":
        print(json.dumps(headline(args.model, args.report)))
    elif args.command == "motion-decoder":
        print(json.dumps(add_motion_decoder(args.model, args.data, args.pairs, args.episodes,
                                            args.steps, args.seed, args.moving_weight,
                                            args.colour)))
    elif args.command == "cascade":
        print(json.dumps(add_cascade(args.config, args.run, args.model)))
    elif args.command == "refiner":
        print(json.dumps(add_refiner(args.config, args.run, args.model)))
    elif args.command == "options":
        print(json.dumps(set_options(args.config, args.model)))
    elif args.command == "resume-pack":
        print(json.dumps(resume_pack(args.run, args.dest)))
    elif args.command == "resume-unpack":
        print(json.dumps(resume_unpack(args.src, args.run)))
    else:
        print(json.dumps(golden(args.model, args.example, args.steps, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
