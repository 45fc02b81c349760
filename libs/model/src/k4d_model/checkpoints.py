"""Checkpoint layouts: the official Kinema4D release and our own.

Official layout (what the paper's code reads):
    BASE/                         Wan2.1-I2V diffusers directory
        model_index.json
        transformer/ config.json + diffusion_pytorch_model[-0000x-of-0000y].safetensors[.index.json]
        vae/ image_encoder/ image_processor/ scheduler/   (text_encoder/ tokenizer/ unused)
    KINEMA4D/
        added_weights.safetensors         the conditioning parameters (REFERENCE section 2)
        pytorch_lora_weights.safetensors  LoRA r64 on to_q/to_k/to_v/to_out.0, fused x0.5

Our layout (what the trainer produces and the registry stores):
    DIR/
        k4d_model.json            name, variant, clip size, sampling defaults, lora
        transformer/ config.json (Kinema4DTransformer3DModel) + diffusion_pytorch_model.safetensors
        vae/ image_encoder/ image_processor/ scheduler/
        lora/pytorch_lora_weights.safetensors   optional, unfused LoRA (else already fused)
        refiner/ config.json + model.safetensors  optional change refiner (k4d_model.refiner)
        cascade/ config.json + model.safetensors  optional sample refiner (k4d_model.cascade)
        motion_decoder/ config.json + model.safetensors  optional (k4d_model.motion_decoder)

`load_model(ref)` accepts either and returns `ModelComponents`. `transformer_only=True`
loads the transformer (+ scheduler config) alone, without `vae/` or `image_encoder/`
(ONNX / TensorRT export and parity checks need nothing else; those directories may
be absent).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from k4d.errors import FailedPrecondition, InvalidArgument, K4DError, NotFound
from k4d.sampling import check_sampling
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from k4d_model.cascade import load_cascade, save_cascade
from k4d_model.frame_vae import build_vae, load_vae
from k4d_model.lora import (
    LORA_FILE_NAME,
    OFFICIAL_LORA_SCALE,
    fuse_lora,
    official_lora_targets,
    read_lora,
    write_lora,
)
from k4d_model.model.configs import ModelConfig, arm_grid_for
from k4d_model.model.transformer import ADDED_PARAMETER_PREFIXES, Kinema4DTransformer3DModel
from k4d_model.motion_decoder import load_motion_decoder, save_motion_decoder
from k4d_model.options import check_model_extra
from k4d_model.refiner import load_refiner, save_refiner

ADDED_WEIGHTS_FILE = "added_weights.safetensors"
K4D_MODEL_FILE = "k4d_model.json"
K4D_FORMAT = "k4d-generator-model"
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
_WAN_KEYS_IGNORED = ("norm_added_q",)  # saved by diffusers 0.34, unused by the model
# Components are read from the model directory only: a missing one is an error, never a
# Hugging Face Hub download of a repo that happens to share its relative path.
_LOCAL_ONLY = {"local_files_only": True}


@dataclass
class ModelInfo:
    """What a loaded model is; recorded in every output's metadata."""

    name: str
    version: str
    layout: str  # "official" | "k4d"
    variant: str
    num_frames: int
    height: int
    width: int
    num_inference_steps: int = 50
    guidance_scale: float = 5.0
    flow_shift: float = 3.0
    fps: int = 24
    lora: dict[str, Any] | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # Default sampling options (k4d.sampling: profile, solver, steps, cache, ...); a request
    # overrides them.
    sampling: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ModelComponents:
    transformer: Kinema4DTransformer3DModel
    vae: Any  # diffusers AutoencoderKLWan (None for a transformer-only load)
    image_encoder: Any  # transformers CLIPVisionModel (None for a transformer-only load)
    image_processor: Any  # transformers CLIPImageProcessor (None for a transformer-only load)
    scheduler: Any  # diffusers scheduler
    info: ModelInfo
    refiner: Any = None  # k4d_model.refiner.ChangeRefiner, our layout's optional refiner/
    cascade: Any = None  # k4d_model.cascade.SampleRefiner, our layout's optional cascade/
    # k4d_model.motion_decoder.MotionDecoder, our layout's optional motion_decoder/
    motion_decoder: Any = None


# ---------------------------------------------------------------- building from a config

def build_components(config: ModelConfig, seed: int = 0, lora_fused: bool = True,
                     name: str | None = None) -> tuple[ModelComponents, dict | None]:
    """Fresh random components for a named config (tests, demos, benchmarks).

    The added weights are made non-zero (a fresh model has zero projections, which would
    hide bugs in the conditioning). With `lora_fused=False` a random LoRA is also
    returned as `{module: (A, B)}` (not applied).
    """
    from transformers import CLIPVisionConfig, CLIPVisionModel

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    transformer = Kinema4DTransformer3DModel(**config.transformer).eval()
    with torch.no_grad():
        for pname, param in transformer.named_parameters():
            if pname.startswith(ADDED_PARAMETER_PREFIXES):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    vae = build_vae(config.vae).eval()
    image_encoder = CLIPVisionModel(CLIPVisionConfig(**config.image_encoder)).eval()
    lora = None
    if not lora_fused:
        rank = config.lora_rank
        lora = {}
        for module in official_lora_targets(transformer.config.num_layers):
            linear = transformer.get_submodule(module)
            lora[module] = (torch.randn(rank, linear.in_features, generator=generator) * 0.05,
                            torch.randn(linear.out_features, rank, generator=generator) * 0.05)
    info = ModelInfo(name=name or config.name, version="0", layout="k4d",
                     variant=config.transformer["variant"], num_frames=config.num_frames,
                     height=config.height, width=config.width,
                     num_inference_steps=config.num_inference_steps,
                     guidance_scale=config.guidance_scale, flow_shift=config.flow_shift,
                     fps=config.fps, source=f"config:{config.name}")
    components = ModelComponents(transformer, vae, image_encoder,
                                 default_image_processor(image_encoder.config),
                                 default_scheduler(config.flow_shift), info)
    return components, lora


def default_scheduler(flow_shift: float = 3.0):
    """The Wan2.1 scheduler: UniPC multistep on flow-matching sigmas with a shift."""
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                   num_train_timesteps=1000, flow_shift=flow_shift)


def default_image_processor(encoder_config):
    """CLIP preprocessing (resize, centre crop, OpenAI mean/std) at the encoder's input size."""
    size = encoder_config.image_size
    return _clip_processor_class()(size={"shortest_edge": size}, crop_size={"height": size, "width": size})


# ---------------------------------------------------------------- transformer weights I/O

def _read_weight_files(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of a diffusers model directory (single file or sharded with an index)."""
    single = directory / WEIGHTS_FILE
    index = directory / f"{WEIGHTS_FILE}.index.json"
    if single.exists():
        return load_file(str(single))
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(directory / shard)))
        return state
    raise NotFound(f"no {WEIGHTS_FILE} (or sharded index) in {directory}")


def _load_transformer(config: dict[str, Any], state: dict[str, torch.Tensor],
                      allow_missing_added: bool, dtype: torch.dtype = torch.float32
                      ) -> Kinema4DTransformer3DModel:
    """Build on the meta device and assign the tensors; any missing or unexpected key,
    or shape mismatch, is a clear error naming the key."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = Kinema4DTransformer3DModel(**config)
    expected = model.state_dict()
    state = _owned_tensors(state, dtype)
    unexpected = sorted(set(state) - set(expected))
    missing = sorted(k for k in set(expected) - set(state)
                     if not (allow_missing_added and k.startswith(ADDED_PARAMETER_PREFIXES)))
    if unexpected or missing:
        raise InvalidArgument.for_field("model", f"transformer weights do not match the "
                                                 f"architecture: missing {missing[:5]}, "
                                                 f"unexpected {unexpected[:5]}")
    _check_shapes(expected, state)
    model.load_state_dict(state, strict=False, assign=True)
    return model.eval()


def _owned_tensors(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Fresh, aligned copies in `dtype`, one tensor at a time (the source dict is emptied as we
    go, so peak memory stays near one model). Tensors viewed out of a file buffer can sit at
    odd offsets, which makes CPU kernels take other code paths: a model loaded from disk would
    then not be bit-identical to the same weights in memory."""
    owned = {}
    for key in list(state):
        tensor = state.pop(key)
        if not any(s in key for s in _WAN_KEYS_IGNORED):
            owned[key] = tensor.to(dtype=dtype, copy=True).contiguous()
    return owned


def _check_shapes(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> None:
    for key, tensor in state.items():
        if key in expected and tuple(expected[key].shape) != tuple(tensor.shape):
            raise InvalidArgument.for_field(
                "model", f"checkpoint tensor {key} has shape {tuple(tensor.shape)} but the model "
                         f"expects {tuple(expected[key].shape)}")


# ---------------------------------------------------------------- official layout

def _wan_config_only(config: dict[str, Any]) -> dict[str, Any]:
    import inspect

    from diffusers import WanTransformer3DModel

    wan_args = set(inspect.signature(WanTransformer3DModel.__init__).parameters) - {"self"}
    return {k: v for k, v in config.items() if k in wan_args}


def _added_config(added: dict[str, torch.Tensor], num_frames: int, height: int, width: int,
                  variant: str | None, num_image_tokens: int) -> dict[str, Any]:
    """Kinema4D constructor arguments implied by `added_weights.safetensors` + the clip size."""
    required = ("learnable_domain_embeddings", "patch_embedding_arm.weight", "arm_pos_emb",
                "arm_patch_proj.weight", "arm_cond_proj.weight")
    absent = [k for k in required if k not in added]
    if absent:
        raise InvalidArgument.for_field("model", f"{ADDED_WEIGHTS_FILE} lacks {absent}")
    found_variant = "act" if "arm_domain_emb" in added else "pmcond"
    if variant is not None and variant != found_variant:
        raise InvalidArgument.for_field("variant", f"requested {variant!r} but the checkpoint is "
                                                   f"{found_variant!r}")
    kernel = tuple(added["patch_embedding_arm.weight"].shape[2:])
    grid = tuple(added["arm_pos_emb"].shape[2:])
    wanted = arm_grid_for(num_frames, height, width, kernel)
    if grid != wanted:
        raise InvalidArgument.for_field(
            "model", f"checkpoint arm_pos_emb grid {grid} was trained for another clip size; "
                     f"{num_frames} frames at {height}x{width} needs {wanted}")
    return dict(variant=found_variant, arm_patch_size=kernel, arm_grid=grid,
                arm_bottleneck_dim=int(added["arm_pos_emb"].shape[1]),
                num_image_tokens=num_image_tokens)


def load_official(base_dir: str | Path, kinema4d_dir: str | Path, num_frames: int = 49,
                  height: int = 480, width: int = 720, variant: str | None = None,
                  lora_scale: float = OFFICIAL_LORA_SCALE, fuse: bool = True,
                  dtype: torch.dtype = torch.float32, transformer_only: bool = False
                  ) -> ModelComponents:
    """Load the official release: Wan2.1-I2V base + Kinema4D added weights + LoRA fused with
    `lora_scale` (0.5 as the official inference). The result is the same function as the
    official `WanTransformer3DModelDembSameRope` given the same files. `transformer_only`:
    no VAE, no image encoder (the image-token count comes from `image_encoder/config.json`
    when present, else CLIP ViT-H/14's 257)."""
    base_dir, kinema4d_dir = Path(base_dir), Path(kinema4d_dir)
    for needed in (base_dir / "transformer" / "config.json", kinema4d_dir / ADDED_WEIGHTS_FILE):
        if not needed.exists():
            raise NotFound(f"official checkpoint incomplete: {needed} not found")
    if transformer_only:
        image_encoder = image_processor = None
        num_image_tokens = _image_tokens_from_config(base_dir)
    else:
        image_encoder, image_processor = _load_image_encoder(base_dir)
        num_image_tokens = _image_tokens(image_encoder.config.image_size,
                                         image_encoder.config.patch_size)
    added = load_file(str(kinema4d_dir / ADDED_WEIGHTS_FILE))
    wan_config = _wan_config_only(json.loads((base_dir / "transformer" / "config.json").read_text()))
    config = {**wan_config, **_added_config(added, num_frames, height, width, variant,
                                            num_image_tokens)}
    transformer = _load_transformer(config, _read_weight_files(base_dir / "transformer"),
                                    allow_missing_added=True, dtype=dtype)
    _assign_added(transformer, added)
    lora_info = None
    lora_path = kinema4d_dir / LORA_FILE_NAME
    if lora_path.exists():
        lora = read_lora(lora_path)
        lora_info = {"file": str(lora_path), "scale": lora_scale, "alpha": lora.alpha,
                     "layers": len(lora.layers), "fused": fuse}
        if fuse:
            fuse_lora(transformer, lora, lora_scale)
    info = ModelInfo(name=kinema4d_dir.name, version="official", layout="official",
                     variant=config["variant"], num_frames=num_frames, height=height,
                     width=width, lora=lora_info, source=f"{base_dir}|{kinema4d_dir}")
    vae = None if transformer_only else _load_vae(base_dir)
    return ModelComponents(transformer, vae, image_encoder, image_processor,
                           _load_scheduler(base_dir), info)


CLIP_VIT_H14_IMAGE_TOKENS = 257  # (224 / 14) ** 2 + 1: the image encoder of Wan2.1-I2V


def _image_tokens(image_size: int, patch_size: int) -> int:
    return (image_size // patch_size) ** 2 + 1


def _image_tokens_from_config(base_dir: Path) -> int:
    """Image-token count from the image encoder's config alone (no weights read)."""
    config_path = base_dir / "image_encoder" / "config.json"
    if not config_path.exists():
        return CLIP_VIT_H14_IMAGE_TOKENS
    config = json.loads(config_path.read_text())
    config = config.get("vision_config", config)
    return _image_tokens(int(config["image_size"]), int(config["patch_size"]))


def _assign_added(transformer: Kinema4DTransformer3DModel, added: dict[str, torch.Tensor]) -> None:
    expected = transformer.state_dict()
    unknown = sorted(k for k in added if k not in expected)
    if unknown:
        raise InvalidArgument.for_field("model", f"{ADDED_WEIGHTS_FILE} has unknown keys {unknown}")
    _check_shapes(expected, added)
    dtype = transformer.patch_embedding.weight.dtype
    transformer.load_state_dict(_owned_tensors(dict(added), dtype), strict=False, assign=True)
    still_meta = [n for n, p in transformer.named_parameters() if p.is_meta]
    if still_meta:
        raise InvalidArgument.for_field("model", f"{ADDED_WEIGHTS_FILE} lacks {still_meta}")


def _clip_processor_class():
    """transformers 5 splits CLIP preprocessing into a torchvision and a PIL class; use the PIL
    one when torchvision is absent (same arithmetic, no fallback warning)."""
    import importlib.util

    import transformers

    if importlib.util.find_spec("torchvision") is None and hasattr(transformers,
                                                                   "CLIPImageProcessorPil"):
        return transformers.CLIPImageProcessorPil
    return transformers.CLIPImageProcessor


def _load_vae(directory: Path):
    return load_vae(directory / "vae", **_LOCAL_ONLY)


def _load_image_encoder(directory: Path):
    from transformers import CLIPVisionModel

    encoder = CLIPVisionModel.from_pretrained(str(directory / "image_encoder"),
                                             **_LOCAL_ONLY).eval()
    if (directory / "image_processor").exists():
        processor = _clip_processor_class().from_pretrained(str(directory / "image_processor"),
                                                             **_LOCAL_ONLY)
    else:
        processor = default_image_processor(encoder.config)
    return encoder, processor


def _load_scheduler(directory: Path):
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    config_path = directory / "scheduler" / "scheduler_config.json"
    if not config_path.exists():
        return default_scheduler()
    class_name = json.loads(config_path.read_text()).get("_class_name", "UniPCMultistepScheduler")
    classes = {"UniPCMultistepScheduler": UniPCMultistepScheduler,
               "FlowMatchEulerDiscreteScheduler": FlowMatchEulerDiscreteScheduler}
    if class_name not in classes:
        raise InvalidArgument.for_field("model", f"unsupported scheduler {class_name}")
    return classes[class_name].from_pretrained(str(directory / "scheduler"), **_LOCAL_ONLY)


def _save_shared(components: ModelComponents, out: Path) -> None:
    components.vae.save_pretrained(str(out / "vae"))
    components.image_encoder.save_pretrained(str(out / "image_encoder"))
    components.image_processor.save_pretrained(str(out / "image_processor"))
    components.scheduler.save_pretrained(str(out / "scheduler"))


def save_official(components: ModelComponents, base_dir: str | Path, kinema4d_dir: str | Path,
                  lora: dict | None = None, lora_alpha: float | None = None) -> None:
    """Write the official layout: a Wan2.1-I2V diffusers base directory (loadable by diffusers'
    own `WanTransformer3DModel.from_pretrained`) + the Kinema4D directory. `components`'
    transformer must hold the base + added weights with the LoRA NOT fused; `lora` is
    `{module: (A, B)}` written as `pytorch_lora_weights.safetensors`."""
    import diffusers

    base_dir, kinema4d_dir = Path(base_dir), Path(kinema4d_dir)
    (base_dir / "transformer").mkdir(parents=True, exist_ok=True)
    kinema4d_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in components.transformer.state_dict().items()}
    added = {k: v for k, v in state.items() if k.startswith(ADDED_PARAMETER_PREFIXES)}
    base = {k: v for k, v in state.items() if k not in added}
    wan_config = _wan_config_only(dict(components.transformer.config))
    wan_config.update(_class_name="WanTransformer3DModel", _diffusers_version=diffusers.__version__)
    (base_dir / "transformer" / "config.json").write_text(json.dumps(wan_config, indent=2))
    save_file(base, str(base_dir / "transformer" / WEIGHTS_FILE))
    _save_shared(components, base_dir)
    (base_dir / "model_index.json").write_text(json.dumps({
        "_class_name": "WanImageToVideoPipeline", "_diffusers_version": diffusers.__version__,
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
        "image_encoder": ["transformers", "CLIPVisionModel"],
        "image_processor": ["transformers", "CLIPImageProcessor"],
        "scheduler": ["diffusers", type(components.scheduler).__name__]}, indent=2))
    save_file(added, str(kinema4d_dir / ADDED_WEIGHTS_FILE))
    if lora:
        rank = next(iter(lora.values()))[0].shape[0]
        write_lora(kinema4d_dir / LORA_FILE_NAME, lora, alpha=lora_alpha,
                   rank=rank if lora_alpha is not None else None)


# ---------------------------------------------------------------- our layout

def save_k4d(components: ModelComponents, out_dir: str | Path, lora: dict | None = None,
             lora_scale: float = OFFICIAL_LORA_SCALE) -> Path:
    """Write our layout. With `lora` the LoRA is stored unfused next to the weights."""
    out = Path(out_dir)
    (out / "transformer").mkdir(parents=True, exist_ok=True)
    transformer = components.transformer
    config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in transformer.config.items()
              if not k.startswith("_")}
    config["_class_name"] = type(transformer).__name__
    (out / "transformer" / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in transformer.state_dict().items()},
              str(out / "transformer" / WEIGHTS_FILE))
    _save_shared(components, out)
    if components.refiner is not None:
        save_refiner(components.refiner, out)
    if components.cascade is not None:
        save_cascade(components.cascade, out)
    if components.motion_decoder is not None:
        save_motion_decoder(components.motion_decoder, out)
    info = components.info.to_dict()
    info["layout"] = "k4d"
    info["lora"] = None
    if lora:
        (out / "lora").mkdir(exist_ok=True)
        write_lora(out / "lora" / LORA_FILE_NAME, lora)
        info["lora"] = {"file": f"lora/{LORA_FILE_NAME}", "scale": lora_scale, "fused": False}
    (out / K4D_MODEL_FILE).write_text(json.dumps({"format": K4D_FORMAT, "format_version": 1,
                                                  **info}, indent=2))
    return out


def load_k4d(model_dir: str | Path, num_frames: int | None = None, height: int | None = None,
             width: int | None = None, transformer_only: bool = False) -> ModelComponents:
    model_dir = Path(model_dir)
    meta_path = model_dir / K4D_MODEL_FILE
    if not meta_path.exists():
        raise NotFound(f"{model_dir} is not a k4d model directory ({K4D_MODEL_FILE} missing)")
    meta = json.loads(meta_path.read_text())
    if not isinstance(meta, dict) or meta.get("format") != K4D_FORMAT:
        raise InvalidArgument.for_field("model", f"{meta_path}: unknown format "
                                                 f"{meta.get('format') if isinstance(meta, dict) else meta!r}")
    check_model_meta(meta, meta_path)
    requested = {"num_frames": num_frames, "height": height, "width": width}
    for key, value in requested.items():
        if value is not None and value != meta[key]:
            raise InvalidArgument.for_field(key, f"model {meta['name']} was trained for "
                                                 f"{meta['num_frames']}x{meta['height']}x"
                                                 f"{meta['width']}; requested {key}={value}")
    config = json.loads((model_dir / "transformer" / "config.json").read_text())
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    transformer = _load_transformer(config, _read_weight_files(model_dir / "transformer"),
                                    allow_missing_added=False)
    lora = meta.get("lora")
    if lora and not lora.get("fused", True):
        fuse_lora(transformer, read_lora(model_dir / lora["file"]), lora["scale"])
    fields = set(ModelInfo.__dataclass_fields__)
    info = ModelInfo(**{k: v for k, v in meta.items() if k in fields})
    info.source = str(model_dir)
    if transformer_only:
        return ModelComponents(transformer, None, None, None, _load_scheduler(model_dir), info)
    image_encoder, image_processor = _load_image_encoder(model_dir)
    return ModelComponents(transformer, _load_vae(model_dir), image_encoder, image_processor,
                           _load_scheduler(model_dir), info, load_refiner(model_dir),
                           load_cascade(model_dir), load_motion_decoder(model_dir))


_META_FORMAT_KEYS = ("format", "format_version")
_META_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "version": (str,), "layout": (str,), "variant": (str,),
    "num_frames": (int,), "height": (int,), "width": (int,), "num_inference_steps": (int,),
    "guidance_scale": (int, float), "flow_shift": (int, float), "fps": (int,),
    "lora": (dict, type(None)), "source": (str,), "extra": (dict,), "format_version": (int,),
    "sampling": (dict,)}


def check_model_meta(meta: dict[str, Any], meta_path: Path | str = K4D_MODEL_FILE) -> None:
    """`k4d_model.json` as a typed schema (ModelInfo's fields, `extra` as
    k4d_model.options.check_model_extra): an unknown key, a value of the wrong type or out of
    range is refused with one line naming it (a misspelt option must not load and run)."""
    name = Path(meta_path).name
    known = set(ModelInfo.__dataclass_fields__) | set(_META_FORMAT_KEYS)
    unknown = sorted(set(meta) - known)
    if unknown:
        raise InvalidArgument.for_field(f"{name}.{unknown[0]}", "is not a model field (known: "
                                                                f"{', '.join(sorted(known))})")
    for key in ("name", "version", "variant", "num_frames", "height", "width"):
        if key not in meta:
            raise InvalidArgument.for_field(f"{name}.{key}", "is required")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, types) or isinstance(value, bool)):
            raise InvalidArgument.for_field(f"{name}.{key}", f"must be {' or '.join(t.__name__ for t in types)}, "
                                                             f"got {value!r}")
    if meta["variant"] not in ("act", "pmcond"):
        raise InvalidArgument.for_field(f"{name}.variant", f"must be 'act' or 'pmcond', got {meta['variant']!r}")
    for key in ("num_frames", "height", "width", "fps"):
        if key in meta and meta[key] < 1:
            raise InvalidArgument.for_field(f"{name}.{key}", f"must be >= 1, got {meta[key]}")
    if not 1 <= meta.get("num_inference_steps", 50) <= 1000:
        raise InvalidArgument.for_field(f"{name}.num_inference_steps", "must be in [1, 1000]")
    if not (math.isfinite(meta.get("guidance_scale", 0.0)) and meta.get("guidance_scale", 0.0) >= 0):
        raise InvalidArgument.for_field(f"{name}.guidance_scale", "must be a finite number >= 0")
    if not (math.isfinite(meta.get("flow_shift", 1.0)) and meta.get("flow_shift", 1.0) > 0):
        raise InvalidArgument.for_field(f"{name}.flow_shift", "must be a finite number > 0")
    check_model_extra(meta.get("extra", {}), f"{name}.extra")
    check_sampling(meta.get("sampling", {}), f"{name}.sampling")


# ---------------------------------------------------------------- resolution of a reference

def load_model(ref: str | Path, base_dir: str | Path | None = None,
               transformer_only: bool = False, **clip_size) -> ModelComponents:
    """Load from a path: our layout (has k4d_model.json), an official pair directory with
    `base/` + `kinema4d/`, or an official Kinema4D directory together with `base_dir`.
    Registry references (`registry:name/version`) are resolved by `k4d_model.registry`.
    `transformer_only`: the transformer (and scheduler config) alone; `vae/` and
    `image_encoder/` are neither read nor required."""
    path = Path(ref)
    if not path.exists():
        raise NotFound(f"model {ref} not found")
    try:
        return _load_model_dir(path, base_dir, clip_size, transformer_only)
    except K4DError:
        raise
    except (OSError, ValueError, KeyError, SafetensorError) as exc:
        # A damaged or partial model directory (bad JSON, truncated weights, a missing
        # component) is the caller's input: one clear error, not a traceback or INTERNAL.
        raise InvalidArgument.for_field("model", f"{path} has unreadable model files: "
                                                 f"{type(exc).__name__}: {exc}") from None


def _load_model_dir(path: Path, base_dir: str | Path | None, clip_size: dict,
                    transformer_only: bool = False) -> ModelComponents:
    if (path / K4D_MODEL_FILE).exists():
        return load_k4d(path, transformer_only=transformer_only, **clip_size)
    if (path / "base").is_dir() and (path / "kinema4d").is_dir():
        return load_official(path / "base", path / "kinema4d", transformer_only=transformer_only,
                             **_official_size(clip_size))
    if (path / ADDED_WEIGHTS_FILE).exists():
        if base_dir is None:
            raise FailedPrecondition(f"{path} is an official Kinema4D checkpoint; pass the "
                                     "Wan2.1-I2V base directory too (--base)")
        return load_official(base_dir, path, transformer_only=transformer_only,
                             **_official_size(clip_size))
    raise InvalidArgument.for_field("model", f"{path} is neither a k4d model directory nor an "
                                             "official Kinema4D checkpoint")


def _official_size(clip_size: dict) -> dict:
    return {k: v for k, v in clip_size.items() if v is not None}


def transformer_parameter_count(config: dict[str, Any]) -> int:
    """Parameter count of a transformer config, computed on the meta device (no memory)."""
    with torch.device("meta"):
        model = Kinema4DTransformer3DModel(**config)
    return sum(math.prod(p.shape) for p in model.parameters())
