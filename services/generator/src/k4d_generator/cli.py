"""`k4d generate` and its helper subcommands.

    k4d generate --model M --image first.png --robot robot.npz --camera cam.json --out DIR
                 [--steps N --seed S --backend torch|onnx|tensorrt --guidance G ...]
    k4d generate init-model --config tiny --out DIR [--layout k4d|official] [--variant act|pmcond]
    k4d generate publish --model DIR --name NAME --version V [--store URI]
    k4d generate models [--store URI]

Without --model the static-world generator is used (labelled as such in the outputs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from k4d.errors import InvalidArgument
from k4d.sampling import add_sampling_flags, sampling_layer_from_flags

LAYOUTS = ("k4d", "official")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="sample a 4D rollout (RGB + pointmap) with a Kinema4D model",
        description="Generate the world's reaction to a robot condition from the initial image. "
                    "Without --model, the static-world generator composites the robot onto the "
                    "unchanged scene (no dynamics; labelled in the outputs).")
    p.add_argument("--model", help="model: k4d model dir, official dir (with --base), dir with "
                                   "base/ + kinema4d/, or registry:NAME[/VERSION]")
    p.add_argument("--base", help="Wan2.1-I2V diffusers base dir for an official Kinema4D dir")
    p.add_argument("--image", help="initial image (PNG/JPEG) at the model's resolution")
    p.add_argument("--robot", help="robot condition NPZ with rgb (T,H,W,3) uint8, pointmap "
                                   "(T,H,W,3) float32 metres, mask (T,H,W) bool")
    p.add_argument("--camera", help="camera JSON (fx, fy, cx, cy, width, height, ...)")
    p.add_argument("--out", help="output directory")
    p.add_argument("--steps", type=int, help="sampling steps (default: the model's)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--guidance", type=float, help="guidance scale (default: the model's)")
    p.add_argument("--guidance-mode", default="auto", choices=("auto", "two-pass", "official"))
    p.add_argument("--scheduler", choices=("unipc", "euler"),
                   help="default: the model's scheduler (UniPC flow)")
    p.add_argument("--shift", type=float, help="flow shift (default: the model's, 3.0)")
    add_sampling_flags(p)  # --profile, --solver, --cache, --cache-threshold, --quant, --compile
    p.add_argument("--backend", default="torch", choices=("torch", "onnx", "tensorrt"))
    p.add_argument("--precision", help="torch fp32|bf16|fp16 (default fp32), onnx fp32, "
                                        "tensorrt fp16|fp32 (default fp16)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--cache-dir", help="where exported ONNX graphs / TensorRT engines and registry "
                                       "downloads are kept (default ~/.cache/k4d/generator)")
    p.add_argument("--store", help="object store URI for registry: models (default K4D_STORE_URI)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_generate)
    sub = p.add_subparsers(dest="generate_command", metavar="SUBCOMMAND")

    init = sub.add_parser("init-model", help="write a random model of a named size (tests, demos)")
    init.add_argument("--config", default="tiny", help="tiny | small | wan14b (wan14b: ~120 GiB RAM)")
    init.add_argument("--out", required=True)
    init.add_argument("--layout", default="k4d", choices=LAYOUTS,
                      help="k4d: our layout; official: OUT/base (Wan diffusers) + OUT/kinema4d")
    init.add_argument("--variant", default="act", choices=("act", "pmcond"))
    init.add_argument("--seed", type=int, default=0)
    init.set_defaults(handler=run_init_model)

    pub = sub.add_parser("publish", help="publish a k4d model dir to the registry in the store "
                                         "and announce it on k4d.model.published",
                         description="Upload the model directory as models/NAME/VERSION/ "
                                     "(manifest last), then, when K4D_KAFKA_BOOTSTRAP names a "
                                     "broker, announce it on k4d.model.published so running "
                                     "generators serving NAME switch to it between jobs.")
    pub.add_argument("--model", required=True)
    pub.add_argument("--name", required=True)
    pub.add_argument("--version", required=True)
    pub.add_argument("--store", help="object store URI (default K4D_STORE_URI)")
    pub.set_defaults(handler=run_publish)

    lst = sub.add_parser("models", help="list registry models and versions")
    lst.add_argument("--store", help="object store URI (default K4D_STORE_URI)")
    lst.set_defaults(handler=run_models)


# ------------------------------------------------------------------ input files

def read_image(path: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except UnidentifiedImageError:
        raise InvalidArgument.for_field("image", f"{path} is not a readable image") from None


def read_robot(path: str) -> dict[str, np.ndarray]:
    from k4d.tensor_io import load_npz

    arrays = load_npz(path, required=("rgb", "pointmap", "mask"))
    return {"robot_rgb": arrays["rgb"].astype(np.uint8),
            "robot_pointmap": arrays["pointmap"].astype(np.float32),
            "robot_mask": arrays["mask"].astype(bool)}


def read_intrinsics(path: str) -> tuple[float, float, float, float]:
    try:
        camera = json.loads(Path(path).read_text())
        intrinsics = tuple(float(camera[k]) for k in ("fx", "fy", "cx", "cy"))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument.for_field("camera", f"{path}: needs numeric fx, fy, cx, cy "
                                                  f"({exc})") from None
    # Checked here for every generator: with a model they are only recorded, and a NaN
    # would make generation.json invalid JSON.
    if not (all(np.isfinite(intrinsics)) and intrinsics[0] > 0 and intrinsics[1] > 0):
        raise InvalidArgument.for_field("camera", f"{path}: fx, fy, cx, cy must be finite, "
                                                  f"fx, fy > 0; got {list(intrinsics)}")
    return intrinsics


def read_camera_pose(path: str) -> np.ndarray | None:
    """T_cam_from_base (4, 4) of a camera JSON that has extrinsics (T_cam_from_world, and
    T_world_from_base when the robot's base is not the world), else None."""
    from k4d.camera import check_rigid

    camera = json.loads(Path(path).read_text())
    if "T_cam_from_world" not in camera:
        return None
    pose = check_rigid(camera["T_cam_from_world"], "camera.T_cam_from_world")
    if camera.get("T_world_from_base") is not None:
        pose = pose @ check_rigid(camera["T_world_from_base"], "camera.T_world_from_base")
    return pose


# ------------------------------------------------------------------ handlers

def _require(args, *names: str) -> None:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is None]
    if missing:
        raise InvalidArgument.for_field(missing[0].lstrip("-"), f"{', '.join(missing)} required")


def run_generate(args) -> int:
    _require(args, "image", "robot", "camera", "out")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        # Found now, not after minutes of sampling when the outputs are written.
        raise InvalidArgument.for_field("out", f"{args.out} exists and is not a directory")
    image = read_image(args.image)
    robot = read_robot(args.robot)
    intrinsics = read_intrinsics(args.camera)
    pose = read_camera_pose(args.camera)
    if args.model is None:
        from k4d_generator.static_world import StaticWorldGenerator

        sys.stderr.write("k4d generate: no --model: using the static-world generator (robot "
                         "composited onto the unchanged scene, no dynamics)\n")
        result = StaticWorldGenerator()(image, intrinsics=intrinsics, seed=args.seed, **robot)
        fps = 24
    else:
        result, fps = _sample(args, image, robot, pose)
    result.metadata["camera_intrinsics"] = list(intrinsics)
    from k4d_generator.outputs import write_result

    written = write_result(result, args.out, fps=fps, camera_path=args.camera,
                           robot_path=args.robot)
    print(json.dumps(written, indent=2))
    return 0


def _sample(args, image, robot, T_cam_from_base=None):
    from k4d_generator.pipeline import Kinema4DPipeline

    options = sampling_layer_from_flags(args)  # bad flags fail before the model loads
    store = _open_store(args.store) if args.store else None
    import transformers

    transformers.utils.logging.disable_progress_bar()
    # The clip size requested is the robot condition's; a checkpoint trained for another
    # size is refused with a clear error instead of being broadcast.
    frames, height, width = robot["robot_rgb"].shape[:3]
    pipe = Kinema4DPipeline.from_pretrained(args.model, backend=args.backend,
                                            precision=args.precision, device=args.device,
                                            cache_dir=args.cache_dir, base_dir=args.base,
                                            store=store, num_frames=frames, height=height,
                                            width=width)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=pipe.sampling_options(options, args.steps, args.scheduler).steps
                   or pipe.info.num_inference_steps, desc="sampling", unit="step",
                   file=sys.stderr)
    try:
        result = pipe(image, num_steps=args.steps, seed=args.seed, guidance=args.guidance,
                      guidance_mode=args.guidance_mode, scheduler=args.scheduler,
                      shift=args.shift, callback=(lambda done, total: bar.update(1)) if bar
                      else None, T_cam_from_base=T_cam_from_base, options=options, **robot)
    finally:
        if bar is not None:
            bar.close()
    return result, pipe.info.fps


def run_init_model(args) -> int:
    from k4d_model.checkpoints import build_components, save_k4d, save_official
    from k4d_model.model.configs import get_model_config

    config = get_model_config(args.config, args.variant)
    _ensure_host_memory_for(config)
    components, lora = build_components(config, seed=args.seed, lora_fused=False)
    out = Path(args.out)
    if args.layout == "official":
        save_official(components, out / "base", out / "kinema4d", lora=lora)
    else:
        save_k4d(components, out, lora=lora)
    print(json.dumps({"model": str(out), "layout": args.layout, "config": args.config,
                      "variant": args.variant, "clip": [config.num_frames, config.height,
                                                        config.width]}))
    return 0


def _ensure_host_memory_for(config) -> None:
    """Refuse (ResourceExhausted) a random fp32 model that cannot fit in free host memory
    (wan14b needs ~120 GiB: weights plus save buffers), instead of being killed by the OOM killer half-way."""
    import psutil
    from k4d.errors import ResourceExhausted
    from k4d_model.checkpoints import transformer_parameter_count

    needed = 2 * 4 * transformer_parameter_count(config.transformer)  # weights + save buffers
    free = psutil.virtual_memory().available
    if needed > free:
        raise ResourceExhausted(f"a random {config.name} model needs about {needed / 2**30:.0f} "
                                f"GiB of host memory; {free / 2**30:.0f} GiB is free")


def _open_store(uri):
    from k4d.store import open_store

    return open_store(uri)


def run_publish(args) -> int:
    """Publish, then announce on k4d.model.published when a broker is configured
    (K4D_KAFKA_BOOTSTRAP): running generators serving NAME switch to the new version."""
    from k4d.bus import open_bus
    from k4d.config import load_config
    from k4d_model.registry import publish

    config = load_config()
    store = _open_store(args.store)
    with open_bus(config) as bus:
        announce = bool(config.kafka_bootstrap)
        manifest = publish(store, args.model, args.name, args.version,
                           bus=bus if announce else None)
    print(json.dumps({"name": manifest["name"], "version": manifest["version"],
                      "files": len(manifest["files"]), "announced": announce}))
    return 0


def run_models(args) -> int:
    from k4d_model.registry import list_models

    print(json.dumps(list_models(_open_store(args.store)), indent=2))
    return 0
