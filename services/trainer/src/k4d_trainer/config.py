"""The training recipe: one validated schema for every recipe file (YAML or JSON).

A recipe is data: nested sections, each a small dataclass whose fields are the schema.
Unknown keys and bad values are `InvalidArgument` naming the dotted field
(`training.lr: must be > 0, got -1.0`). Command-line overrides are few (data, steps, out,
checkpoint interval) and go through the same validation.

    recipe: finetune-lora | from-scratch
    seed, run_name
    model:        base / kinema4d checkpoints or a named size, variant, LoRA, precision, AC
    data:         dataset URI, latent cache, clip adaptation limits
    training:     steps, global batch, AdamW + warmup, objective settings
    vae:          the from-scratch recipe's VAE stage
    refiner:      the change refiner's stage (k4d_model.refiner; off with steps 0)
    cascade:      the sample refiner's stage after the transformer (k4d_model.cascade; off
                  with steps 0)
    parallelism:  dp_replicate x dp_shard (DDP, FSDP2 or both) = world size
    checkpoint:   interval, retention
    publish:      registry name/version, layouts, store
    observability: TensorBoard, Prometheus port, bus events, progress bar
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k4d.errors import InvalidArgument
from k4d_model.options import (
    GUIDANCE_HALVES_KEY,
    LATENT_TARGET_TRACKS,
    LATENT_TARGETS,
    MAX_CASCADE_SAMPLES,
    FidelityOptions,
    check_model_extra,
)

RECIPES = ("finetune-lora", "from-scratch")
VARIANTS = ("act", "pmcond")
PRECISIONS = ("auto", "fp32", "bf16", "bf16-if-native")
SECTION_PRECISIONS = ("model", "fp32", "bf16")  # a refiner network's own, or the model's
FIRST_DEPTH_FRAMES = ("first", "every")  # the given images of a first-depth network
LR_SCHEDULES = ("constant", "cosine", "linear")
MAX_CASCADE_CONTEXT = 6  # half a 13-frame clip each side
CASCADE_COLOUR_LOSSES = ("squared", "l1")
FLOW_PIXELS = ("objects", "all")  # cascade.flow_pixels: where the flow is a target


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise InvalidArgument.for_field(name, message)


@dataclass
class ModelSection:
    """What is trained.

    finetune-lora: `base` is a Wan2.1-I2V diffusers directory, an official pair directory
    (base/ + kinema4d/), a k4d-layout model directory or `registry:name[/version]`;
    `kinema4d` optionally an official Kinema4D directory applied on top of a bare base.
    from-scratch: `size` names the generator's model config (`tiny`, `small`); `init`
    optionally a k4d-layout model of that size (directory or `registry:name[/version]`) to
    start from instead of random weights: its transformer trains on, its VAE is kept and
    the VAE stage does not run (a second stage of a from-scratch recipe).
    """

    base: str | None = None
    kinema4d: str | None = None
    size: str | None = None
    init: str | None = None
    variant: str = "act"
    num_frames: int | None = None  # clip; default: the checkpoint's or the size's
    height: int | None = None
    width: int | None = None
    lora_rank: int = 64
    lora_alpha: float = 32.0
    # auto: bf16 autocast on GPU, fp32 on CPU; bf16-if-native: bf16 on GPU and on a CPU with
    # AVX512-BF16 or AMX, fp32 elsewhere (emulated bf16 is many times slower than fp32)
    precision: str = "auto"
    activation_checkpointing: bool = True
    arm_patch_size: list[int] = field(default_factory=lambda: [1, 15, 15])
    arm_bottleneck_dim: int = 128
    # Output options of the published model (k4d_model.fidelity, k4d_model.json `extra`):
    # how its samples keep the given frame and the unchanged scene. Sampling only.
    fidelity: dict[str, Any] = field(default_factory=dict)
    # The published model's guidance scale (k4d_model.json; default: the init's or the
    # size's). Above 1 with training.condition_dropout: two passes a sampling step.
    guidance_scale: float | None = None
    # Which halves of the latent guidance pushes (k4d_model.json `extra` guidance_halves):
    # "both" (official) or "rgb" (the pointmap half keeps the conditional velocity); default:
    # the init's, or both.
    guidance_halves: str | None = None
    # The transformer reads the gripper's state per frame (k4d_model.conditions.tool_features,
    # read off each episode's joints, k4d_trainer.tool_condition); added to an init without
    # it from a zero projection. The published model then needs the rollout's tool track.
    tool_condition: bool = False
    # With tool_condition: the transformer also reads where the tool is in the camera frame
    # and how far it moved since frame 0 (k4d_model.conditions.tool_position_features,
    # through each episode's camera); the published model then needs the camera pose too.
    tool_position: bool = False

    def validate(self, recipe: str) -> None:
        _check(self.tool_condition or not self.tool_position, "model.tool_position",
               "needs model.tool_condition: true (the position is part of the tool condition)")
        FidelityOptions.check(self.fidelity, "model.fidelity")  # unknown keys too
        _check(self.guidance_scale is None
               or (math.isfinite(self.guidance_scale) and self.guidance_scale >= 0),
               "model.guidance_scale", f"must be a finite number >= 0, got {self.guidance_scale}")
        if self.guidance_halves is not None:  # the model schema's own check, named model.*
            check_model_extra({GUIDANCE_HALVES_KEY: self.guidance_halves}, "model")
        _check(self.variant in VARIANTS, "model.variant", f"must be one of {VARIANTS}")
        _check(self.precision in PRECISIONS, "model.precision", f"must be one of {PRECISIONS}")
        _check(self.lora_rank >= 1, "model.lora_rank", f"must be >= 1, got {self.lora_rank}")
        _check(self.lora_alpha > 0, "model.lora_alpha", f"must be > 0, got {self.lora_alpha}")
        _check(len(self.arm_patch_size) == 3 and all(p >= 1 for p in self.arm_patch_size),
               "model.arm_patch_size", "must be three integers >= 1")
        for name in ("num_frames", "height", "width"):
            value = getattr(self, name)
            _check(value is None or value >= 1, f"model.{name}", f"must be >= 1, got {value}")
        if self.num_frames is not None:
            _check((self.num_frames - 1) % 4 == 0, "model.num_frames",
                   f"must be 1 + 4k (the VAE's temporal stride), got {self.num_frames}")
        for name in ("height", "width"):
            value = getattr(self, name)
            _check(value is None or value % 16 == 0, f"model.{name}",
                   f"must be a multiple of 16 (VAE stride 8 x patch 2), got {value}")
        if recipe == "finetune-lora":
            _check(bool(self.base), "model.base", "the finetune-lora recipe needs a base model "
                                                  "(Wan2.1-I2V directory or Kinema4D checkpoint)")
            _check(self.size is None, "model.size", "only the from-scratch recipe takes a size")
            _check(self.init is None, "model.init", "only the from-scratch recipe takes an init "
                                                    "model; finetune-lora starts from model.base")
        else:
            _check(bool(self.size), "model.size", "the from-scratch recipe needs a model size "
                                                  "(tiny, small)")
            _check(self.base is None and self.kinema4d is None, "model.base",
                   "the from-scratch recipe trains every parameter from random; no base")


@dataclass
class DataSection:
    """Where the episodes are and how they become the recipe's clip."""

    uri: str | None = None
    format: str = "auto"  # auto | episodes | robo4d
    latents_uri: str | None = None  # latent cache; default RUN_URI/latents
    max_episodes: int | None = None
    max_upscale: float = 2.0  # refuse to enlarge frames more than this to fill the clip

    def validate(self) -> None:
        _check(self.format in ("auto", "episodes", "robo4d"), "data.format",
               "must be auto, episodes or robo4d")
        _check(self.max_episodes is None or self.max_episodes >= 1, "data.max_episodes",
               "must be >= 1")
        _check(math.isfinite(self.max_upscale) and self.max_upscale >= 1.0, "data.max_upscale",
               f"must be a finite number >= 1, got {self.max_upscale}")


@dataclass
class TrainingSection:
    """The optimisation. Defaults are the official recipe's (REFERENCE section 2)."""

    steps: int = 5000
    global_batch_size: int = 32
    lr: float = 2e-5
    weight_decay: float = 1e-4
    warmup_steps: int = 100
    lr_schedule: str = "constant"  # after warmup
    # With the constant schedule: a linear decay to 0 over the last `decay_steps` steps
    # (warmup-stable-decay; 0 = none). A resumed run with more --steps decays at its new end.
    decay_steps: int = 0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    max_grad_norm: float = 1.0
    soft_mask_ratio: float = 0.1  # fraction of robot-mask entries set to 0.5
    timestep_shift: float = 1.0  # FlowMatchEulerDiscrete shift of the training schedule
    deterministic: bool = False  # torch.use_deterministic_algorithms for the run
    # Loss weight of a latent cell (issue 21): the largest that applies, 1 elsewhere. Where
    # the scene changed from frame 0 (the evaluator's `changed` rule, k4d_tabletop.scene_change; 8 %
    # of the demo data's cells) and the robot (7 %) hold most of the error. 1 and 1 is the
    # official objective.
    changed_loss_weight: float = 1.0
    robot_loss_weight: float = 1.0
    # With latent_target tracks (issue 45): the weight of the changed cells whose target
    # moves frame 0's surface (k4d_trainer.objective.moving_cells): the moving objects,
    # about 1.6 % of the demo's cells, without the shadows the changed weight also lifts
    moving_loss_weight: float = 1.0
    # With latent_target tracks (issue 45): the weight of a second loss term, the squared
    # difference of the x0 errors of touching moving cells (k4d_trainer.objective.
    # coherence_loss), so that a moving object is drawn whole, not in pieces; 0 = off
    coherence_loss_weight: float = 0.0
    # Condition dropout (issue 45; not the official objective): the share of samples whose
    # robot condition is replaced by a scene with no robot in view, so that the model learns
    # both and guidance can sample against the robot-free one. > 0 publishes
    # `guidance_negative: no-robot` (k4d_model.options); the model's guidance_scale says
    # how strongly it samples towards the robot's effect.
    condition_dropout: float = 0.0
    # The share of samples whose timestep is drawn again among the schedule's with sigma >=
    # high_noise_min_sigma (1: the top alone, pure noise) (issue 45; not the official
    # objective; 0 = off). There the transformer sees little or nothing of the clip but its
    # conditions, so only there does it learn to predict the reaction, what the sampler's
    # first steps commit to; the rest keep the schedule's spread.
    high_noise_share: float = 0.0
    high_noise_min_sigma: float = 1.0
    # What the transformer learns to sample (k4d_model.latent_target, issue 45): the clip's
    # latents (absolute, the official objective) or, with a per-frame VAE, their change from
    # frame 0's RGB latent (change: zero wherever nothing moves)
    latent_target: str = "absolute"
    # With latent_target tracks: the factor the pointmap half's motion from frame 0 is
    # sampled at (k4d_model.latent_target, published as `motion_scale`). About 1 / the
    # motion latents' RMS puts it at the noise's scale, so the transformer's leftover error
    # on a still surface shrinks by that factor in the rendered motion
    motion_scale: float = 1.0
    # Progress judged by samples (issue 45; k4d_trainer.progress): every `sample_every` steps
    # (and at the last; 0 = off) rank 0 samples the first `sample_episodes` episodes of
    # `sample_uri` (default: vae.heldout_uri) with the model's own sampler, one sampling run
    # per episode, and measures the x0 error at sigma = 1
    sample_every: int = 0
    sample_uri: str | None = None
    sample_episodes: int = 4
    # An exponential moving average of the trainable weights (k4d_trainer.ema; 0 = off,
    # else the decay: 0.999 averages about the last 1000 steps once warmed up): the run
    # samples its progress figures and rollouts with it and publishes it
    ema_decay: float = 0.0
    # The decay warms up as (1 + n) / (10 + n) (diffusers' default, for a random start; at
    # n = 2400 that is still 0.9963); false holds it from the second update (the first
    # copies the weights): a stage from a trained model.init
    ema_warmup: bool = True

    def validate(self) -> None:
        _check(self.steps >= 1, "training.steps", f"must be >= 1, got {self.steps}")
        _check(self.sample_every >= 0, "training.sample_every",
               f"must be >= 0 (0 = off), got {self.sample_every}")
        _check(self.sample_episodes >= 1, "training.sample_episodes",
               f"must be >= 1, got {self.sample_episodes}")
        _check(self.sample_uri is None or bool(self.sample_uri.strip()), "training.sample_uri",
               "must be a dataset URI (or left out for vae.heldout_uri)")
        _check(self.latent_target in LATENT_TARGETS, "training.latent_target",
               f"must be one of {LATENT_TARGETS}, got {self.latent_target!r}")
        _check(math.isfinite(self.motion_scale) and self.motion_scale > 0,
               "training.motion_scale", f"must be a finite number > 0, got {self.motion_scale}")
        _check(self.motion_scale == 1.0 or self.latent_target == LATENT_TARGET_TRACKS,
               "training.motion_scale", "needs training.latent_target tracks (only the "
                                        "tracks' motion is scaled)")
        _check(self.moving_loss_weight == 1.0 or self.latent_target == LATENT_TARGET_TRACKS,
               "training.moving_loss_weight", "needs training.latent_target tracks (only a "
                                              "motion target says which cells move)")
        _check(self.coherence_loss_weight == 0 or self.latent_target == LATENT_TARGET_TRACKS,
               "training.coherence_loss_weight", "needs training.latent_target tracks (only a "
                                                 "motion target says which cells move)")
        _check(math.isfinite(self.coherence_loss_weight) and self.coherence_loss_weight >= 0,
               "training.coherence_loss_weight",
               f"must be a finite number >= 0, got {self.coherence_loss_weight}")
        _check(self.ema_decay == 0 or 0 < self.ema_decay < 1, "training.ema_decay",
               f"must be 0 (off) or in (0, 1), got {self.ema_decay}")
        _check(self.global_batch_size >= 1, "training.global_batch_size", "must be >= 1")
        _check(math.isfinite(self.lr) and self.lr > 0, "training.lr",
               f"must be a finite number > 0, got {self.lr}")
        _check(math.isfinite(self.weight_decay) and self.weight_decay >= 0,
               "training.weight_decay", f"must be >= 0, got {self.weight_decay}")
        _check(self.warmup_steps >= 0, "training.warmup_steps", "must be >= 0")
        _check(self.lr_schedule in LR_SCHEDULES, "training.lr_schedule",
               f"must be one of {LR_SCHEDULES}")
        _check(self.decay_steps >= 0, "training.decay_steps",
               f"must be >= 0 (0 = no decay), got {self.decay_steps}")
        _check(self.decay_steps == 0 or self.lr_schedule == "constant", "training.decay_steps",
               f"only applies to lr_schedule 'constant' (got {self.lr_schedule!r})")
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "training.betas",
               "must be two numbers in [0, 1)")
        _check(self.eps > 0, "training.eps", "must be > 0")
        _check(self.max_grad_norm >= 0, "training.max_grad_norm", "must be >= 0 (0 = off)")
        _check(0 <= self.soft_mask_ratio <= 1, "training.soft_mask_ratio", "must be in [0, 1]")
        _check(math.isfinite(self.timestep_shift) and self.timestep_shift > 0,
               "training.timestep_shift", "must be a finite number > 0")
        _check(math.isfinite(self.high_noise_share) and 0 <= self.high_noise_share <= 1,
               "training.high_noise_share", f"must be in [0, 1], got {self.high_noise_share}")
        _check(math.isfinite(self.high_noise_min_sigma) and 0 < self.high_noise_min_sigma <= 1,
               "training.high_noise_min_sigma",
               f"must be in (0, 1], got {self.high_noise_min_sigma}")
        _check(math.isfinite(self.condition_dropout) and 0 <= self.condition_dropout < 1,
               "training.condition_dropout", f"must be in [0, 1), got {self.condition_dropout}")
        for name in ("changed_loss_weight", "robot_loss_weight", "moving_loss_weight"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, f"training.{name}",
                   f"must be a finite number >= 0, got {value}")

    @property
    def weighted_loss(self) -> bool:
        return (self.changed_loss_weight != 1.0 or self.robot_loss_weight != 1.0
                or self.moving_loss_weight != 1.0)


@dataclass
class VaeSection:
    """The from-scratch recipe's first stage: a small AutoencoderKLWan on the same clips."""

    steps: int = 200
    lr: float = 1e-3
    batch_size: int = 2
    kl_weight: float = 1e-6
    # Square random crops (pixels, a multiple of the VAE's 8x spatial factor; 0 = whole
    # frames). The VAE is convolutional, so crops teach it the same filters at a fraction of
    # the cost per sample: many more steps in the same CPU-hours.
    crop: int = 0
    # Random windows of this many consecutive frames (1 + 4k: the causal VAE's chunks;
    # 0 = the whole clip): the same weights learn time from a 5-frame window as from 13.
    crop_frames: int = 0
    warmup_steps: int = 0
    lr_schedule: str = "constant"   # constant | cosine | linear (decay to 0 at `steps`)
    # A second phase of `long_steps` on windows of `long_frames` (0 = the whole clip), with
    # its own AdamW and schedule (`long_lr`, `long_batch_size`; 0 = the main phase's): the
    # causal VAE's steady-state chunks only train on windows of 9 frames or more.
    long_steps: int = 0
    long_frames: int = 0
    long_lr: float = 0.0
    long_batch_size: int = 0
    checkpoint_every: int = 0       # steps between resumable VAE-stage checkpoints; 0 = none
    log_every: int = 0              # steps between log lines; 0 = five lines per stage
    # Episodes the VAE never trains on: its reconstruction of their clips is measured after
    # the stage (RUN/vae/heldout.json, k4d_trainer.vae.reconstruction_figures)
    heldout_uri: str | None = None

    def validate(self) -> None:
        _check(self.steps >= 0, "vae.steps", "must be >= 0")
        _check(math.isfinite(self.lr) and self.lr > 0, "vae.lr", f"must be > 0, got {self.lr}")
        _check(self.batch_size >= 1, "vae.batch_size", "must be >= 1")
        _check(self.kl_weight >= 0, "vae.kl_weight", "must be >= 0")
        _check(self.crop >= 0 and self.crop % 8 == 0, "vae.crop",
               f"must be 0 (whole frames) or a positive multiple of 8, got {self.crop}")
        _check(self.crop_frames >= 0 and (self.crop_frames == 0 or self.crop_frames % 4 == 1),
               "vae.crop_frames", f"must be 0 (the whole clip) or 1 + 4k, got {self.crop_frames}")
        _check(self.warmup_steps >= 0, "vae.warmup_steps", "must be >= 0")
        _check(self.lr_schedule in LR_SCHEDULES, "vae.lr_schedule",
               f"must be one of {LR_SCHEDULES}")
        _check(self.long_steps >= 0, "vae.long_steps", "must be >= 0")
        _check(self.long_frames >= 0 and (self.long_frames == 0 or self.long_frames % 4 == 1),
               "vae.long_frames", f"must be 0 (the whole clip) or 1 + 4k, got {self.long_frames}")
        _check(math.isfinite(self.long_lr) and self.long_lr >= 0, "vae.long_lr",
               "must be >= 0 (0 = vae.lr)")
        _check(self.long_batch_size >= 0, "vae.long_batch_size", "must be >= 0 (0 = batch_size)")
        _check(self.checkpoint_every >= 0, "vae.checkpoint_every", "must be >= 0")
        _check(self.log_every >= 0, "vae.log_every", "must be >= 0")


@dataclass
class RefinerSection:
    """The change refiner (k4d_model.refiner): a pixel-space network trained beside the
    transformer on the same clips, to predict where each frame differs from frame 0 and its
    colour there. 0 steps: no refiner (the model ships without one)."""

    steps: int = 0
    batch_size: int = 8             # frames per step and process
    lr: float = 2e-3
    warmup_steps: int = 100
    lr_schedule: str = "cosine"
    # Loss weight of the changed pixels' colour error (1 elsewhere off the robot): they are
    # ~0.2 % of the pixels, the rest would teach "nothing changes" alone.
    changed_weight: float = 10.0
    # 0: no colour term (a geometry network: change mask and depth heads only)
    colour_weight: float = 1.0
    mask_weight: float = 0.1        # weight of the change-mask BCE against the colour MSE
    mask_pos_weight: float = 5.0    # BCE weight of a changed pixel (rare) over an unchanged one
    # > 0: the refiner gets a depth head (the change of depth of the changed pixels, for
    # the `refiner_pointmap` option), its squared error weighted this much
    depth_weight: float = 0.0
    # > 0: a head that estimates frame 0's depth from the image (for `refiner_first_depth`,
    # rollouts from an RGB image alone), its squared log error weighted this much
    first_depth_weight: float = 0.0
    # > 0: scene planes (needs first_depth_weight > 0): the network also reads the camera's
    # pose and tells which plane of the robot base frame (a table top, a floor, a wall) each
    # pixel of frame 0 lies on, whose ray then gives its depth exactly (ADR 017); the loss
    # weight of those outputs. The episodes' metadata must hold their camera.
    plane_weight: float = 0.0
    # share of the training examples without the camera inputs (rollouts without a pose)
    camera_dropout: float = 0.2
    # > 0: frame 0's object pixels (the episodes' `object_ids` > 0) weigh 1 + this in the
    # first-frame depth and plane terms. The objects are ~1 % of the pixels; unweighted, the
    # network put them flat on the table (issue 21, round 9). The episodes must hold
    # object_ids.
    object_weight: float = 0.0
    # true (with plane_weight > 0): frame 0's object pixels (object_ids > 0) are labelled
    # as lying on the horizontal plane z = their own base-frame height, so the network's z
    # coordinate is a height map on them and their depth the ray's meeting with it. A
    # learned log depth errs by a few cm at 1 m, as much as an object is tall. Needs
    # object_ids.
    object_planes: bool = False
    # > 0: an object network (whether the given image's pixel shows an object), its BCE
    # against the episodes' object_ids > 0 weighted this much, on every frame as a given
    # image; it has no other term. Needs object_ids.
    object_logit_weight: float = 0.0
    object_pos_weight: float = 5.0  # BCE weight of an object pixel (~1 %) over the others
    # Which frames a first-depth network alone (first_depth_weight > 0, no other term)
    # learns as the given image: "first", each clip's frame 0; "every", each frame s < T-1
    # as the frame 0 of a rollout of the clip's robot from s on (its depth the target):
    # 12x the distinct images at 13 frames, objects lifted, held and set down among them.
    first_depth_frames: str = "first"
    # > 1: each example is seen through a narrower field of view, a window of 1/z of the
    # frame (z uniform in [1, max_zoom]) at a random place, resized back to the frame: the
    # objects and the robot at other apparent sizes than the data's one framing (a closer
    # or longer-lens camera). Not with scene planes (their camera inputs are the frame's).
    max_zoom: float = 1.0
    # A dataset of the run's episodes rendered at the clip's own frames and size (k4d datagen
    # with data.uri's seed; the same episode ids): measured, a refiner trained on clips
    # resampled from a larger render is much weaker on native renders (round 5 of issue 21).
    # The stage trains on the run's episodes found there. Empty: the run's own clips.
    data_uri: str = ""
    # None: the run's episodes (data.max_episodes). N: the first N episodes of the run's
    # dataset (or of data_uri), more than the transformer trains on: a network that reads
    # frame 0 alone (the first-depth network) sees one image per episode, so it needs more
    # episodes than the transformer, not more steps on them (issue 45)
    max_episodes: int | None = None
    channels: list[int] = field(default_factory=lambda: [24, 48, 96, 128])
    checkpoint_every: int = 0       # steps between resumable stage checkpoints; 0 = none
    log_every: int = 0              # steps between log lines; 0 = five lines per stage
    # The forward pass's precision for this network: "model" follows model.precision (bf16
    # autocast when it is bf16), "fp32" or "bf16" set it for this network alone (issue 21,
    # round 20: the geometry network in fp32 inside a bf16 recipe). Weights and losses stay
    # fp32 either way.
    precision: str = "model"
    # A geometry network trained after this one by the same stage (its own section: usually
    # colour_weight 0 and the depth weights), stored inside the refiner
    # (k4d_model.refiner.RefinerConfig.geometry) for the depth output options
    geometry: RefinerSection | None = None
    # An object network trained after those (its own section: object_logit_weight > 0,
    # usually no other term), stored inside the refiner (RefinerConfig.objects): frame 0's
    # objects (k4d_model.refiner.RefinedChange.object_probability)
    objects: RefinerSection | None = None

    @property
    def first_frame_only(self) -> bool:
        """A first-depth network alone on each clip's frame 0: it reads frame 0's image and
        depth and the robot, nothing of frames t >= 1 but the robot's (the stage keeps that
        much of an episode, refiner_stage.FirstFrameClip)."""
        others = ("colour_weight", "mask_weight", "depth_weight", "plane_weight",
                  "object_logit_weight")
        return (self.first_depth_weight > 0 and self.first_depth_frames == "first"
                and all(getattr(self, name) == 0 for name in others))

    def validate(self, prefix: str = "refiner") -> None:
        _check(self.steps >= 0, f"{prefix}.steps", "must be >= 0")
        _check(self.batch_size >= 1, f"{prefix}.batch_size", "must be >= 1")
        _check(math.isfinite(self.lr) and self.lr > 0, f"{prefix}.lr",
               f"must be > 0, got {self.lr}")
        _check(self.warmup_steps >= 0, f"{prefix}.warmup_steps", "must be >= 0")
        _check(self.lr_schedule in LR_SCHEDULES, f"{prefix}.lr_schedule",
               f"must be one of {LR_SCHEDULES}")
        for name in ("changed_weight", "colour_weight", "mask_weight", "mask_pos_weight",
                     "depth_weight", "first_depth_weight", "plane_weight", "object_weight",
                     "object_logit_weight", "object_pos_weight"):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, f"{prefix}.{name}", "must be >= 0")
        _check(self.plane_weight == 0 or self.first_depth_weight > 0, f"{prefix}.plane_weight",
               "scene planes need the first-frame depth head (first_depth_weight > 0)")
        _check(self.object_weight == 0 or self.first_depth_weight > 0 or self.plane_weight > 0,
               f"{prefix}.object_weight",
               "weighs the first-frame depth and plane terms: one of them needs a weight > 0")
        _check(not self.object_planes or self.plane_weight > 0, f"{prefix}.object_planes",
               "labels the plane targets: needs plane_weight > 0")
        if self.object_logit_weight > 0:
            for name in ("colour_weight", "mask_weight", "depth_weight", "first_depth_weight",
                         "plane_weight"):
                _check(getattr(self, name) == 0, f"{prefix}.{name}",
                       "an object network (object_logit_weight > 0) learns from frames as "
                       "given images and has no other term: must be 0")
        _check(self.first_depth_frames in FIRST_DEPTH_FRAMES, f"{prefix}.first_depth_frames",
               f"must be one of {FIRST_DEPTH_FRAMES}, got {self.first_depth_frames!r}")
        if self.first_depth_frames != "first":
            _check(self.first_depth_weight > 0, f"{prefix}.first_depth_weight",
                   "first_depth_frames chooses the first-depth head's images: must be > 0")
            for name in ("colour_weight", "mask_weight", "depth_weight", "plane_weight",
                         "object_logit_weight"):
                _check(getattr(self, name) == 0, f"{prefix}.{name}",
                       f"a first-depth network on {self.first_depth_frames!r} frames has no "
                       "other term (its change targets are not made): must be 0")
        _check(math.isfinite(self.max_zoom) and self.max_zoom >= 1.0, f"{prefix}.max_zoom",
               f"must be >= 1, got {self.max_zoom}")
        _check(self.max_zoom == 1.0 or self.plane_weight == 0, f"{prefix}.max_zoom",
               "a zoomed window does not match scene planes' camera inputs: needs "
               "plane_weight 0")
        _check(0.0 <= self.camera_dropout < 1.0, f"{prefix}.camera_dropout",
               f"must be in [0, 1), got {self.camera_dropout}")
        _check(bool(self.channels) and all(c > 0 and c % 8 == 0 for c in self.channels),
               f"{prefix}.channels", f"must be positive multiples of 8, got {self.channels}")
        _check(self.checkpoint_every >= 0, f"{prefix}.checkpoint_every", "must be >= 0")
        _check(self.log_every >= 0, f"{prefix}.log_every", "must be >= 0")
        _check(self.max_episodes is None or self.max_episodes >= 1, f"{prefix}.max_episodes",
               f"must be >= 1 (or unset: the run's episodes), got {self.max_episodes}")
        _check(self.precision in SECTION_PRECISIONS, f"{prefix}.precision",
               f"must be one of {SECTION_PRECISIONS}, got {self.precision!r}")
        if self.geometry is not None:
            _check(self.geometry.geometry is None, f"{prefix}.geometry.geometry",
                   "a geometry network has no geometry network of its own")
            self.geometry.validate(f"{prefix}.geometry")
        if self.objects is not None:
            _check(self.objects.geometry is None and self.objects.objects is None,
                   f"{prefix}.objects", "an object network has no networks of its own")
            _check(self.objects.object_logit_weight > 0, f"{prefix}.objects.object_logit_weight",
                   "an object network needs its object head (object_logit_weight > 0)")
            self.objects.validate(f"{prefix}.objects")


@dataclass
class CascadeSection:
    """The sample refiner (k4d_model.cascade): a learned cascade stage trained after the
    transformer on rollouts the trained transformer samples on episodes it never trained on
    (k4d_trainer.cascade_stage). 0 steps: no sample refiner (the model ships without one)."""

    steps: int = 0
    # Episodes to sample the rollouts on: not the training episodes, on which the
    # transformer's samples are better than on anything a user gives it
    data_uri: str = ""
    max_episodes: int = 0           # 0: every episode of data_uri
    # Episode i of data_uri is sampled with seed sample_seed + i (its noise), whichever rank
    # samples it
    sample_seed: int = 1000
    batch_size: int = 16            # frames per step and process
    lr: float = 2e-3
    warmup_steps: int = 50
    lr_schedule: str = "cosine"
    # Loss weight of the point change's L1 error (POINT_GAIN x normalised units) against
    # the colour's error (`colour_loss`, [-1, 1] scale)
    point_weight: float = 0.1
    # The colour change's error: `squared` (the mean of what the sample allows: an object
    # the sample is unsure of comes out faded) or `l1` (its median: drawn or left out)
    colour_loss: str = "squared"
    # Weight of the colour error where the ground truth changed from frame 0 (the
    # evaluator's `changed` rule, k4d_tabletop.scene_change), 1 elsewhere: a weighted mean,
    # as training.changed_loss_weight is for the transformer. Above 1 the network passes
    # more of an uncertain sampled change (an object arriving) at the cost of the static scene
    changed_weight: float = 1.0
    channels: list[int] = field(default_factory=lambda: [32, 64, 96])
    # true: the colour blends frame 0 warped along a flow the network predicts (an object
    # keeps its look where it is drawn again), trained with the ground truth's flow from
    # the episodes' object ids and poses (k4d_trainer.object_flow)
    warp: bool = False
    # Loss weight of the flow's L1 error (in FLOW_SCALE = 16 pixels) when `warp`
    flow_weight: float = 1.0
    # Where the flow is a target: `objects` (the pixels of an object in frame t: where did
    # that surface stand) or `all` (the table's too, whose flow is 0). With `all` the L1
    # error's median is no flow wherever the network is not sure an object moved there:
    # measured, it learned none (models/demo-small/README.md)
    flow_pixels: str = "objects"
    # > 0 (with `warp`): the flow starts from a global match of the sample's look to frame
    # 0's on features this wide (k4d_model.cascade.FlowMatcher), which the U-Net corrects;
    # 0: the U-Net regresses the flow alone
    matching: int = 0
    # true: the network's output is added to the sample's own change (k4d_model.cascade)
    residual: bool = False
    # Neighbouring frames each side whose sampled change the network also reads (the
    # sample's real change is consistent over frames, its grain is not)
    context: int = 0
    # Independent samples of each rollout the network reads (their mean and spread: where
    # they agree the change is sure); a generation then samples the transformer this often
    samples: int = 1
    # true: a last output gates the colour and point change, a classifier of where the
    # scene changed from frame 0 (k4d_model.cascade), trained with `gate_weight` x its
    # binary cross-entropy against the ground truth's changed pixels, off the robot
    gate: bool = False
    gate_weight: float = 0.1
    checkpoint_every: int = 0       # steps between resumable stage checkpoints; 0 = none
    log_every: int = 0              # steps between log lines; 0 = five lines per stage

    def validate(self, data_uri: str = "", prefix: str = "cascade") -> None:
        _check(self.steps >= 0, f"{prefix}.steps", "must be >= 0")
        _check(self.steps == 0 or bool(self.data_uri), f"{prefix}.data_uri",
               "steps > 0 needs episodes to sample rollouts on (not the training data)")
        _check(not self.data_uri or self.data_uri.rstrip("/") != data_uri.rstrip("/"),
               f"{prefix}.data_uri", "must not be data.uri: the transformer's samples on its "
                                     "own training episodes are not what a user gets")
        _check(self.max_episodes >= 0, f"{prefix}.max_episodes", "must be >= 0")
        _check(self.sample_seed >= 0, f"{prefix}.sample_seed", "must be >= 0")
        _check(self.batch_size >= 1, f"{prefix}.batch_size", "must be >= 1")
        _check(math.isfinite(self.lr) and self.lr > 0, f"{prefix}.lr",
               f"must be > 0, got {self.lr}")
        _check(self.warmup_steps >= 0, f"{prefix}.warmup_steps", "must be >= 0")
        _check(self.lr_schedule in LR_SCHEDULES, f"{prefix}.lr_schedule",
               f"must be one of {LR_SCHEDULES}")
        _check(math.isfinite(self.point_weight) and self.point_weight >= 0,
               f"{prefix}.point_weight", "must be >= 0")
        _check(self.colour_loss in CASCADE_COLOUR_LOSSES, f"{prefix}.colour_loss",
               f"must be one of {CASCADE_COLOUR_LOSSES}, got {self.colour_loss!r}")
        _check(math.isfinite(self.changed_weight) and self.changed_weight > 0,
               f"{prefix}.changed_weight", f"must be a finite number > 0, got {self.changed_weight}")
        _check(self.flow_pixels in FLOW_PIXELS, f"{prefix}.flow_pixels",
               f"must be one of {FLOW_PIXELS}, got {self.flow_pixels!r}")
        _check(math.isfinite(self.flow_weight) and self.flow_weight >= 0,
               f"{prefix}.flow_weight", f"must be a finite number >= 0, got {self.flow_weight}")
        _check(self.matching >= 0, f"{prefix}.matching",
               f"must be >= 0 (0: no match), got {self.matching}")
        _check(not self.matching or self.warp, f"{prefix}.matching",
               "needs warp: true (the match is where the warp samples frame 0)")
        _check(bool(self.channels) and all(c > 0 and c % 8 == 0 for c in self.channels),
               f"{prefix}.channels", f"must be positive multiples of 8, got {self.channels}")
        _check(0 <= self.context <= MAX_CASCADE_CONTEXT, f"{prefix}.context",
               f"must be in 0..{MAX_CASCADE_CONTEXT}, got {self.context}")
        _check(1 <= self.samples <= MAX_CASCADE_SAMPLES, f"{prefix}.samples",
               f"must be in 1..{MAX_CASCADE_SAMPLES}, got {self.samples}")
        _check(math.isfinite(self.gate_weight) and self.gate_weight >= 0,
               f"{prefix}.gate_weight", f"must be a finite number >= 0, got {self.gate_weight}")
        _check(self.checkpoint_every >= 0, f"{prefix}.checkpoint_every", "must be >= 0")
        _check(self.log_every >= 0, f"{prefix}.log_every", "must be >= 0")


@dataclass
class ParallelismSection:
    """Data parallelism: dp_replicate (DDP) x dp_shard (FSDP2) must equal the world size;
    -1 takes what is left. dp_shard > 1 shards with FSDP2 (HSDP when dp_replicate > 1)."""

    dp_replicate: int = -1
    dp_shard: int = 1
    nnodes: str = "1"  # torchrun --nnodes: "N" or elastic "MIN:MAX"
    max_restarts: int = 0

    def validate(self) -> None:
        for name in ("dp_replicate", "dp_shard"):
            value = getattr(self, name)
            _check(value == -1 or value >= 1, f"parallelism.{name}",
                   f"must be -1 (the rest) or >= 1, got {value}")
        _check(not (self.dp_replicate == -1 and self.dp_shard == -1), "parallelism.dp_shard",
               "at most one degree can be -1")
        parts = self.nnodes.split(":")
        _check(1 <= len(parts) <= 2 and all(p.isdigit() and int(p) >= 1 for p in parts)
               and int(parts[0]) <= int(parts[-1]), "parallelism.nnodes",
               f"must be N or MIN:MAX with 1 <= MIN <= MAX, got {self.nnodes!r}")
        _check(self.max_restarts >= 0, "parallelism.max_restarts", "must be >= 0")


@dataclass
class CheckpointSection:
    every: int = 500  # optimizer steps; 0 = only at the end and on SIGTERM / cancel
    keep: int = 3  # newest complete checkpoints kept; 0 = all

    def validate(self) -> None:
        _check(self.every >= 0, "checkpoint.every", f"must be >= 0, got {self.every}")
        _check(self.keep >= 0, "checkpoint.keep", "must be >= 0")


@dataclass
class PublishSection:
    """Publishing at the end of a successful run (skipped when `name` is empty)."""

    name: str | None = None
    version: str | None = None  # default: the run name
    store_uri: str | None = None  # default: K4D_STORE_URI
    official_layout: bool = True  # also export added_weights + pytorch_lora_weights (LoRA)

    def validate(self) -> None:
        import re

        pattern = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
        for name in ("name", "version"):
            value = getattr(self, name)
            _check(value is None or bool(pattern.match(value)), f"publish.{name}",
                   f"{value!r} must match {pattern.pattern}")


@dataclass
class ObservabilitySection:
    tensorboard: bool = True
    prometheus_port: int | None = None  # serve /metrics on this port (rank 0)
    bus_events: bool = True  # progress on k4d.train.events when K4D_KAFKA_BOOTSTRAP is set
    progress_bar: bool = True
    event_every: int = 10  # steps between bus progress events

    def validate(self) -> None:
        _check(self.prometheus_port is None or 0 <= self.prometheus_port <= 65535,
               "observability.prometheus_port", "must be a port in 0..65535")
        _check(self.event_every >= 1, "observability.event_every", "must be >= 1")


@dataclass
class TrainConfig:
    recipe: str = "finetune-lora"
    seed: int = 0
    run_name: str | None = None
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    vae: VaeSection = field(default_factory=VaeSection)
    refiner: RefinerSection = field(default_factory=RefinerSection)
    cascade: CascadeSection = field(default_factory=CascadeSection)
    parallelism: ParallelismSection = field(default_factory=ParallelismSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    publish: PublishSection = field(default_factory=PublishSection)
    observability: ObservabilitySection = field(default_factory=ObservabilitySection)

    def validate(self) -> TrainConfig:
        _check(self.recipe in RECIPES, "recipe", f"must be one of {RECIPES}, got {self.recipe!r}")
        self.model.validate(self.recipe)
        _check(self.training.sample_every <= 0 or bool(self.sample_uri), "training.sample_uri",
               "sample_every > 0 needs episodes to sample: set training.sample_uri or "
               "vae.heldout_uri")
        for section in (self.data, self.training, self.vae, self.refiner, self.parallelism,
                        self.checkpoint, self.publish, self.observability):
            section.validate()
        self.cascade.validate(self.data.uri or "")
        _check(self.cascade.steps == 0 or bool(self.model.fidelity.get("cascade")),
               "cascade.steps", "trains a sample refiner no output option reads: set "
                                "model.fidelity.cascade (sample or colour)")
        _check(not self.model.fidelity.get("cascade") or self.cascade.steps > 0,
               "model.fidelity.cascade", "needs a sample refiner: set cascade.steps > 0")
        _check(self.model.fidelity.get("motion_samples", 1) == 1
               or self.training.latent_target == LATENT_TARGET_TRACKS,
               "model.fidelity.motion_samples", "needs training.latent_target tracks (only a "
                                                "sampled motion is averaged)")
        return self

    @property
    def sample_uri(self) -> str | None:
        """The episodes the progress samples are drawn from (training.sample_uri, else the
        VAE's held-out set)."""
        return self.training.sample_uri or self.vae.heldout_uri

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- parsing

def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp, name: str) -> Any:
    """`value` as the annotated type `tp`, or InvalidArgument naming the field."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, name)
            except InvalidArgument as exc:
                errors.append(exc)
        raise errors[0]
    if origin is dict or tp is dict:
        _check(isinstance(value, dict), name, f"expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        (item,) = typing.get_args(tp)
        _check(isinstance(value, list), name, f"expected a list, got {value!r}")
        return [_coerce(v, item, f"{name}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, name)
    if tp is bool:
        _check(isinstance(value, bool), name, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        _check(isinstance(value, int) and not isinstance(value, bool), name,
               f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 2e-5 as a string
            try:
                value = float(value)
            except ValueError:
                pass
        _check(isinstance(value, (int, float)) and not isinstance(value, bool), name,
               f"expected a number, got {value!r}")
        _check(math.isfinite(float(value)), name, f"expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        _check(isinstance(value, str), name, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {_type_name(tp)} for {name}")


def _build(cls, data: Any, prefix: str = ""):
    where = prefix or "config"
    _check(isinstance(data, dict), where, f"expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        key = unknown[0]
        raise InvalidArgument.for_field(f"{prefix}.{key}" if prefix else key,
                                        f"unknown key; {where} takes {names}")
    values = {k: _coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**values)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    return _build(TrainConfig, data).validate()


def load_config_file(path: str | Path) -> TrainConfig:
    """Read a recipe file (.yaml/.yml/.json); every problem is InvalidArgument."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgument.for_field("config", f"{path} not found")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # yaml.YAMLError / JSONDecodeError: a malformed file
        raise InvalidArgument.for_field("config", f"{path} is not valid "
                                                  f"{'YAML' if path.suffix != '.json' else 'JSON'}: "
                                                  f"{str(exc).splitlines()[0]}") from None
    return config_from_dict(data or {})


def with_overrides(config: TrainConfig, *, data: str | None = None, steps: int | None = None,
                   checkpoint_every: int | None = None) -> TrainConfig:
    """The few command-line overrides, validated like the file."""
    changed = dataclasses.replace(config)
    if data is not None:
        changed.data = dataclasses.replace(config.data, uri=data)
    if steps is not None:
        changed.training = dataclasses.replace(config.training, steps=steps)
    if checkpoint_every is not None:
        changed.checkpoint = dataclasses.replace(config.checkpoint, every=checkpoint_every)
    return changed.validate()


def resolve_degrees(parallelism: ParallelismSection, world_size: int) -> tuple[int, int]:
    """(dp_replicate, dp_shard) for this world size; a product that does not match is one
    readable error naming both degrees."""
    rep, shard = parallelism.dp_replicate, parallelism.dp_shard
    if rep == -1:
        _check(world_size % shard == 0, "parallelism.dp_shard",
               f"world size {world_size} is not divisible by dp_shard {shard}")
        rep = world_size // shard
    elif shard == -1:
        _check(world_size % rep == 0, "parallelism.dp_replicate",
               f"world size {world_size} is not divisible by dp_replicate {rep}")
        shard = world_size // rep
    _check(rep * shard == world_size, "parallelism",
           f"dp_replicate {rep} x dp_shard {shard} = {rep * shard} does not match the world "
           f"size {world_size} (processes launched); change the degrees or --nproc")
    return rep, shard
