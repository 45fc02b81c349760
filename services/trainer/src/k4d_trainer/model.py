"""Building the model a recipe trains, from the generator's own classes and checkpoint
layouts (k4d_model.checkpoints / model / registry), and choosing what is trainable.

- finetune-lora: a base (Wan2.1-I2V diffusers directory, official pair, k4d-layout model or
  registry reference) + optionally an official Kinema4D directory; peft LoRA on
  to_q/to_k/to_v/to_out.0; trainable = LoRA + every parameter named
  `learnable_domain_embeddings` or containing `arm`; the rest frozen.
- from-scratch: the generator's named size (`tiny`, `small`) with random weights, or the
  weights of `init` (a model of that size), every transformer parameter trainable (the VAE
  is trained in its own stage, k4d_trainer.vae, or kept from `init`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from k4d.errors import InvalidArgument, NotFound
from k4d_model import checkpoints
from k4d_model.checkpoints import ModelComponents, ModelInfo
from k4d_model.conditions import TOOL_FEATURES, TOOL_POSITION_FEATURES, reads_tool_position
from k4d_model.frame_vae import temporal_stride
from k4d_model.model.configs import arm_grid_for, get_model_config
from k4d_model.model.transformer import Kinema4DTransformer3DModel
from k4d_model.options import (
    CASCADE_KEY,
    GUIDANCE_HALVES_KEY,
    GUIDANCE_NEGATIVE_KEY,
    GUIDANCE_NEGATIVE_NO_ROBOT,
    LATENT_TARGET_KEY,
    MOTION_SCALE_KEY,
    VAE_DECODE_KEY,
    VAE_DECODE_SPLIT,
)

from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import ModelSection

LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
ADAPTER = "default"  # peft adapter name


def is_added_parameter(name: str) -> bool:
    """The official trainer's rule for the Kinema4D parameters it trains, and our tool
    condition's (not official: new with the run, so trained in full beside LoRA)."""
    return "learnable_domain_embeddings" in name or "arm" in name or "tool_embedding" in name


def is_lora_parameter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


# ---------------------------------------------------------------- loading

def load_components(recipe: str, section: ModelSection, seed: int) -> ModelComponents:
    """The recipe's starting model on the CPU in float32 (the caller moves and wraps it)."""
    components = _from_scratch(section, seed) if recipe == "from-scratch" else \
        _finetune_base(section)
    components.info.extra.update(section.fidelity)  # published in k4d_model.json
    set_tool_condition(components.transformer, section.tool_condition, section.tool_position)
    return components


def set_tool_condition(transformer: Kinema4DTransformer3DModel, wanted: bool,
                       position: bool = False) -> None:
    """Give the transformer the tool condition (`model.tool_condition`, with the tool's
    position: `model.tool_position`) when it lacks it; a starting model that already reads
    the tool must be asked for the same features."""
    features = tool_feature_count(position)
    if wanted and not transformer.reads_tool:
        transformer.add_tool_embedding(features)
    elif transformer.reads_tool and not wanted:
        raise InvalidArgument.for_field("model.tool_condition", "the starting model's "
                                        "transformer reads the tool condition; set "
                                        "model.tool_condition: true")
    elif wanted and transformer.config.tool_features != features:
        has = reads_tool_position(transformer.config.tool_features)
        raise InvalidArgument.for_field(
            "model.tool_position", f"the starting model's transformer reads "
                                   f"{transformer.config.tool_features} tool features "
                                   f"({'with' if has else 'without'} the tool's position); set "
                                   f"model.tool_position: {str(has).lower()}")


def tool_feature_count(position: bool) -> int:
    """The tool features a transformer reads: the gripper's state, and its position."""
    return TOOL_FEATURES + (TOOL_POSITION_FEATURES if position else 0)


def set_latent_target(components: ModelComponents, target: str, motion_scale: float = 1.0
                      ) -> None:
    """Record what the transformer learns to sample (k4d_model.latent_target) in the model's
    `extra`, and a tracks target's motion scale when not 1; the change from frame 0 needs a
    VAE that encodes each frame on its own."""
    if target == "absolute":
        return
    if temporal_stride(components.vae) != 1:
        raise InvalidArgument.for_field("training.latent_target", f"{target!r} needs a "
                                        "per-frame VAE (a size such as small-f4): a causal "
                                        "video VAE's later latent frames are not frame 0's "
                                        "when nothing moves")
    components.info.extra[LATENT_TARGET_KEY] = target
    if motion_scale != 1.0:
        components.info.extra[MOTION_SCALE_KEY] = float(motion_scale)


def set_guidance(components: ModelComponents, section: ModelSection,
                 condition_dropout: float) -> None:
    """Record how the published model samples with guidance: `model.guidance_scale` and
    `model.guidance_halves` when the recipe sets them, and after condition dropout the
    robot-free negative the transformer learned (k4d_model.options `guidance_negative`)."""
    if section.guidance_scale is not None:
        components.info.guidance_scale = float(section.guidance_scale)
    if section.guidance_halves is not None:
        components.info.extra[GUIDANCE_HALVES_KEY] = section.guidance_halves
    if condition_dropout > 0:
        components.info.extra[GUIDANCE_NEGATIVE_KEY] = GUIDANCE_NEGATIVE_NO_ROBOT


def record_recipe(components: ModelComponents, config) -> None:
    """What a published model keeps of its recipe (`TrainConfig`): what its transformer
    samples and how it is guided; the trainer and `demo_model.py export` both call it."""
    set_latent_target(components, config.training.latent_target, config.training.motion_scale)
    set_guidance(components, config.model, config.training.condition_dropout)


def _from_scratch(section: ModelSection, seed: int) -> ModelComponents:
    config = get_model_config(section.size, section.variant)
    for name in ("num_frames", "height", "width"):
        value = getattr(section, name)
        if value is not None and value != getattr(config, name):
            raise InvalidArgument.for_field(f"model.{name}", f"size {section.size!r} has a fixed "
                                                             f"clip {config.num_frames}x"
                                                             f"{config.height}x{config.width}")
    if section.init:
        return _init_model(section, config)
    components, _ = checkpoints.build_components(config, seed=seed, name=f"k4d-{section.size}")
    # The VAE stage trains on single videos and the samples encode RGB and pointmap apart,
    # so the published model decodes them apart too (k4d_model.pipeline.decode).
    components.info.extra[VAE_DECODE_KEY] = VAE_DECODE_SPLIT
    return components


def _model_path(ref: str, field_name: str) -> Path:
    from k4d_model.registry import is_registry_ref, resolve_registry_ref

    path = resolve_registry_ref(ref) if is_registry_ref(ref) else Path(ref)
    if not path.exists():
        raise NotFound(f"{field_name}: {path} not found")
    return path


def _init_model(section: ModelSection, config) -> ModelComponents:
    """A from-scratch model of `size` that starts from `init`'s weights (a k4d layout)."""
    path = _model_path(section.init, "model.init")
    if not (path / checkpoints.K4D_MODEL_FILE).exists():
        raise InvalidArgument.for_field("model.init", f"{path} is not a k4d-layout model "
                                                      f"(no {checkpoints.K4D_MODEL_FILE})")
    components = checkpoints.load_model(path)
    have, want = components.transformer.config, config.transformer
    for key in ("variant", "num_layers", "num_attention_heads", "attention_head_dim"):
        if have.get(key) != want.get(key):
            raise InvalidArgument.for_field(
                "model.init", f"{path} has {key} {have.get(key)!r}; size {section.size!r} "
                              f"needs {want.get(key)!r}")
    info = components.info
    if (info.num_frames, info.height, info.width) != (config.num_frames, config.height,
                                                      config.width):
        raise InvalidArgument.for_field(
            "model.init", f"{path} is a {info.num_frames}x{info.height}x{info.width} model; "
                          f"size {section.size!r} is {config.num_frames}x{config.height}x"
                          f"{config.width}")
    # The init's sample refiner learned the rollouts of the init's transformer, which this
    # run trains further: it is not this run's. The run trains its own (the cascade section)
    # or the model ships without one, and the output option that reads it goes with it.
    components.cascade = None
    components.info.extra.pop(CASCADE_KEY, None)
    return components


def _finetune_base(section: ModelSection) -> ModelComponents:
    path = _model_path(section.base, "model.base")
    clip = {k: getattr(section, k) for k in ("num_frames", "height", "width")}
    if section.kinema4d:
        kinema4d = Path(section.kinema4d)
        if not (kinema4d / checkpoints.ADDED_WEIGHTS_FILE).exists():
            raise NotFound(f"model.kinema4d: no {checkpoints.ADDED_WEIGHTS_FILE} in {kinema4d}")
        components = checkpoints.load_official(path, kinema4d, variant=section.variant,
                                               **{k: v for k, v in clip.items() if v})
    elif _is_bare_wan(path):
        components = _load_bare_wan(path, section)
    else:
        components = checkpoints.load_model(path, **clip)
    if components.transformer.config.variant != section.variant:
        raise InvalidArgument.for_field("model.variant", f"the checkpoint is "
                                                         f"{components.transformer.config.variant!r}")
    return components


def _is_bare_wan(path: Path) -> bool:
    return ((path / "transformer" / "config.json").exists()
            and not (path / checkpoints.K4D_MODEL_FILE).exists())


def _load_bare_wan(base: Path, section: ModelSection) -> ModelComponents:
    """A Wan2.1-I2V diffusers directory without Kinema4D weights: the Kinema4D parameters
    start fresh (zero projections, so the untrained model is the base model)."""
    import json

    frames = section.num_frames or 49
    height, width = section.height or 480, section.width or 720
    # The generator's loader for Wan weights (also used by its official-layout loading).
    wan = checkpoints._wan_config_only(json.loads((base / "transformer" / "config.json").read_text()))
    encoder, processor = checkpoints._load_image_encoder(base)
    patch = tuple(section.arm_patch_size)
    grid = arm_grid_for(frames, height, width, patch)
    if min(grid) < 1:
        raise InvalidArgument.for_field("model.arm_patch_size", f"{list(patch)} is larger than the "
                                                                f"latent grid of a {frames}x{height}"
                                                                f"x{width} clip")
    config = {**wan, "variant": section.variant, "arm_patch_size": patch,
              "arm_grid": grid,
              "arm_bottleneck_dim": section.arm_bottleneck_dim,
              "num_image_tokens": (encoder.config.image_size // encoder.config.patch_size) ** 2 + 1}
    transformer = checkpoints._load_transformer(
        config, checkpoints._read_weight_files(base / "transformer"), allow_missing_added=True)
    _materialise_added(transformer)
    info = ModelInfo(name=base.name, version="base", layout="k4d", variant=section.variant,
                     num_frames=frames, height=height, width=width, source=str(base))
    return ModelComponents(transformer, checkpoints._load_vae(base), encoder, processor,
                           checkpoints._load_scheduler(base), info)


@torch.no_grad()
def _materialise_added(model: Kinema4DTransformer3DModel) -> None:
    """Allocate the Kinema4D parameters left on the meta device and initialise them as the
    constructor does."""
    for module in (model.patch_embedding_arm, model.arm_ln, model.arm_patch_proj,
                   model.arm_cond_proj):
        module.to_empty(device="cpu")
        module.reset_parameters()
    for name in ("learnable_domain_embeddings", "arm_pos_emb", "arm_domain_emb"):
        param = getattr(model, name, None)
        if param is not None and param.is_meta:
            setattr(model, name, torch.nn.Parameter(torch.zeros(param.shape)))
    model._init_added_weights()


def clip_of(components: ModelComponents) -> ClipSpec:
    info = components.info
    return ClipSpec(info.num_frames, info.height, info.width)


# ---------------------------------------------------------------- trainable parameters

def add_lora(transformer: Kinema4DTransformer3DModel, rank: int, alpha: float) -> None:
    """peft LoRA on every attention's to_q/to_k/to_v/to_out.0 (the official targets)."""
    from peft import LoraConfig

    transformer.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights=True,
                                       target_modules=LORA_TARGETS), adapter_name=ADAPTER)


# Kinema4D drops the text embedding (the arm tokens replace the text context), so these
# Wan parameters never take part in the forward pass and get no gradient.
UNUSED_PREFIXES = ("condition_embedder.text_embedder.",)


def set_trainable(transformer: torch.nn.Module, recipe: str) -> list[str]:
    """requires_grad per the recipe; returns the trainable parameter names."""
    names = []
    for name, param in transformer.named_parameters():
        if name.startswith(UNUSED_PREFIXES):
            trainable = False
        else:
            trainable = recipe == "from-scratch" or is_lora_parameter(name) or is_added_parameter(
                name)
        param.requires_grad_(trainable)
        if trainable:
            names.append(name)
    return names


def sampling_components(components: ModelComponents,
                        transformer: torch.nn.Module | None = None) -> ModelComponents:
    """The components as the trainer encodes and samples with them (the latent cache, the
    progress samples, the cascade stage's rollouts): without the output options, the
    refiner, the sample refiner and the motion decoder, which the published model applies;
    the latent target and the VAE's decoding stay, as they are how a sample reads. `transformer`: the weights
    to sample with (default the components' own)."""
    info = components.info
    extra = {k: info.extra[k] for k in (LATENT_TARGET_KEY, MOTION_SCALE_KEY, VAE_DECODE_KEY)
             if k in info.extra}
    return dataclasses.replace(components, transformer=transformer or components.transformer,
                               refiner=None, cascade=None, motion_decoder=None,
                               info=dataclasses.replace(info, extra=extra))


def unwrapped(components: ModelComponents, transformer_state: dict[str, torch.Tensor],
              device: str = "meta") -> ModelComponents:
    """A fresh, plain Kinema4D transformer (no adapter, no parallel wrapper) holding
    `transformer_state`, with the other components shared: what publishing saves. Built on
    the meta device it only holds the state (its non-persistent buffers, the RoPE tables,
    stay empty); `device="cpu"` gives one that runs (k4d_trainer.progress)."""
    config = {k: v for k, v in components.transformer.config.items() if not k.startswith("_")}
    with torch.device(device):
        plain = Kinema4DTransformer3DModel(**config)
    plain.load_state_dict(transformer_state, strict=True, assign=True)
    return dataclasses.replace(components, transformer=plain.eval())
