"""`Kinema4DPipeline`: initial image + robot condition -> RGB + pointmap rollout.

Reads as the official pipeline does, step by step:
 1. check inputs
 2. encode the first frame with CLIP (penultimate hidden states)
 3. VAE-encode [first RGB frame | uniform pointmap] + zero frames -> condition latents,
    with the first-frame mask (1 | 0.5)
 4. VAE-encode the robot RGB / pointmap sequences (pointmap latents (z + 0.17) / 1.36),
    downsample the robot occupancy mask -> arm_cond
 5. seeded Gaussian noise
 6. flow-matching denoising (UniPC or Euler), guidance, progress and cancellation per step
 7. decode; split RGB | pointmap; de-normalise the pointmap to metres

Guidance: the official setting has identical conditional and unconditional inputs,
so one pass per step gives the same result as the official two (`guidance_mode="auto"`).
With a real negative condition both passes run batched in one forward: a request's, or for a
model whose `extra` says `guidance_negative: no-robot` (trained with condition dropout) a
scene with no robot in view. `extra` `guidance_halves: rgb` guides the RGB half of the
latent alone; its pointmap half keeps the conditional pass's velocity.
`guidance_mode="official"` reproduces the released code bit for bit in spirit: its
second pass sees the arm latent projection added twice (see `inject_arm_latents`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import numpy as np
import torch
from k4d.camera import check_rigid, fit_pinhole
from k4d.errors import Cancelled, FailedPrecondition, InvalidArgument
from k4d.sampling import SamplingOptions, check_sampling, resolve_sampling
from k4d.tool import ToolTrack

from k4d_model.cascade import refine_sample
from k4d_model.checkpoints import ModelComponents
from k4d_model.conditions import (
    POINTMAP_LATENT_MEAN,
    POINTMAP_LATENT_STD,
    PointmapNormalization,
    downsample_robot_mask,
    first_frame_mask,
    reads_tool_position,
    tool_condition,
    uniform_pointmap,
)
from k4d_model.fidelity import (
    anchor_first_latent,
    calibrated_robot_render,
    change_mask,
    compose_over_input,
    compose_relative,
    estimated_first_points,
    fill_behind_robot,
    fill_points_behind_robot,
    input_frames,
    move_refined_points,
    shaded_robot_render,
    show_refined_change,
    uncovered_by_robot,
)
from k4d_model.frame_vae import temporal_stride
from k4d_model.latent_target import (
    add_first,
    latent_target_of,
    motion_scale_of,
    repeat_first_frame,
    samples_change,
    samples_tracks,
)
from k4d_model.memory import ensure_fits, estimate
from k4d_model.motion_decoder import decode_motion
from k4d_model.options import (
    CASCADE_SAMPLE,
    CASCADE_SAMPLE_GIVEN_DEPTH,
    FIRST_FRAME_GIVEN,
    GUIDANCE_HALVES_BOTH,
    GUIDANCE_HALVES_KEY,
    GUIDANCE_HALVES_RGB,
    GUIDANCE_NEGATIVE_KEY,
    GUIDANCE_NEGATIVE_NO_ROBOT,
    REFINER_CHANGE,
    REFINER_DRAWN,
    REFINER_FIRST_DEPTH_ESTIMATED,
    ROBOT_POINTMAP_KINEMATICS,
    ROBOT_RGB_CALIBRATED,
    ROBOT_RGB_SHADED,
    UNCOVERED_FILLED,
    VAE_DECODE_KEY,
    VAE_DECODE_SPLIT,
    FidelityOptions,
)
from k4d_model.refiner import predict_change
from k4d_model.results import GenerationResult, RobotCondition, check_robot
from k4d_model.tracks import frames_from_tracks

ProgressCallback = Callable[[int, int], None]  # (steps done, total steps)
CancelCheck = Callable[[], bool]
GUIDANCE_MODES = ("auto", "two-pass", "official")
ABLATION_FIRST_FRAME = "first-frame"
# Sample k of a rollout seeded `seed` (a sample refiner that reads several) draws its noise
# with seed + k * this: sample 0 is the rollout's usual sample, and the episodes' seeds
# (1000 + i) do not meet another episode's further samples.
SAMPLE_SEED_STRIDE = 1_000_003
SCHEDULERS = ("unipc", "euler")


def model_id_of(components: ModelComponents) -> str:
    """A short content hash of the fused transformer weights: the key of exported graphs and
    engines (a different LoRA or fine-tune gets a different id). Hashes names, shapes and a
    strided sample of at most 4096 values per tensor, taken on the tensor's own device, so
    it costs little even for a 14B model on a GPU."""
    digest = hashlib.sha256()
    for name, tensor in sorted(components.transformer.state_dict().items()):
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy()
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(sample.tobytes())
    return digest.hexdigest()[:16]



class Kinema4DPipeline:
    """Holds the model components and a denoiser backend; `__call__` samples one rollout.

    `backend` is any callable denoiser (the transformer's forward: latents, timestep, image
    embeddings, arm condition); `None` is enough for the encoders (the trainer builds its
    samples with `encode_video`, `prepare_condition`, `encode_image`, `prepare_arm_cond`).
    Loading a model behind a torch / ONNX Runtime / TensorRT backend is the generator
    service's `k4d_generator.pipeline.Kinema4DPipeline.from_pretrained`."""

    def __init__(self, components: ModelComponents, backend, device: str = "cpu",
                 model_id: str | None = None):
        self.components = components
        self.info = components.info
        self.vae = components.vae.to(device)
        self.image_encoder = components.image_encoder.to(device)
        self.image_processor = components.image_processor
        self.scheduler = components.scheduler
        self.backend = backend
        self.device = torch.device(device)
        self.model_id = model_id or model_id_of(components)
        self.refiner = components.refiner.to(device) if components.refiner is not None else None
        self.cascade = components.cascade.to(device) if components.cascade is not None else None
        self.motion_decoder = (components.motion_decoder.to(device)
                               if components.motion_decoder is not None else None)
        self._check_refiner(FidelityOptions.from_extra(self.info.extra))
        self.temporal_stride = temporal_stride(self.vae)

    # ------------------------------------------------------------ 1. inputs

    def check_inputs(self, image, robot: RobotCondition, num_steps: int, guidance: float,
                     guidance_mode: str, scheduler: str | None,
                     negative: RobotCondition | None, shift: float | None = None) -> None:
        info = self.info
        size = (info.num_frames, info.height, info.width)
        if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3
                and image.shape[2] == 3):
            raise InvalidArgument.for_field("image", "must be an (H, W, 3) uint8 array")
        if image.shape[:2] != size[1:]:
            raise InvalidArgument.for_field("image", f"is {image.shape[1]}x{image.shape[0]}; the "
                                                     f"model needs {info.width}x{info.height}")
        for prefix, cond in (("robot", robot), ("negative", negative)):
            if cond is not None:
                check_robot(prefix, cond, size)
        if num_steps < 1 or num_steps > 1000:
            raise InvalidArgument.for_field("num_steps", "must be in [1, 1000]")
        if not np.isfinite(guidance) or guidance < 0:
            raise InvalidArgument.for_field("guidance", "must be a finite number >= 0")
        if guidance_mode not in GUIDANCE_MODES:
            raise InvalidArgument.for_field("guidance_mode", f"must be one of {GUIDANCE_MODES}")
        if scheduler is not None and scheduler not in SCHEDULERS:
            raise InvalidArgument.for_field("scheduler", f"must be one of {SCHEDULERS}")
        # A flow shift <= 0 (or NaN) turns every sigma into NaN: refuse it here rather than
        # sample a NaN rollout that fails much later, far from the bad argument.
        if shift is not None and not (np.isfinite(shift) and shift > 0):
            raise InvalidArgument.for_field("shift", "must be a finite number > 0")

    # ------------------------------------------------------------ 2.-4. conditioning

    @torch.no_grad()
    def encode_image(self, image: np.ndarray) -> torch.Tensor:
        """(H, W, 3) uint8 -> (1, N_img, D) CLIP penultimate hidden states."""
        from PIL import Image

        pixels = self.image_processor(images=Image.fromarray(image), return_tensors="pt")
        out = self.image_encoder(pixel_values=pixels["pixel_values"].to(self.device),
                                 output_hidden_states=True)
        return out.hidden_states[-2].float()

    @torch.no_grad()
    def encode_video(self, video: torch.Tensor) -> torch.Tensor:
        """(1, 3, T, H, W) in [-1, 1] -> VAE-normalised latent mode (1, 16, F, h, w)."""
        latent = self.vae.encode(video.to(self.device, self.vae.dtype)).latent_dist.mode()
        return (latent.float() - self._vae_mean()) / self._vae_std()

    def _vae_mean(self) -> torch.Tensor:
        return torch.tensor(self.vae.config.latents_mean, device=self.device).view(1, -1, 1, 1, 1)

    def _vae_std(self) -> torch.Tensor:
        return torch.tensor(self.vae.config.latents_std, device=self.device).view(1, -1, 1, 1, 1)

    def prepare_condition(self, image: np.ndarray) -> torch.Tensor:
        """(1, 4 + 16, F, h, 2w): first-frame mask + latents of [image | uniform pointmap]
        followed by zero frames."""
        t, h, w = self.info.num_frames, self.info.height, self.info.width
        rgb = torch.from_numpy(np.array(image)).float().div(255.0).mul(2.0).sub(1.0)
        pm = torch.from_numpy(uniform_pointmap(h, w)).float().mul(2.0).sub(1.0)
        first = torch.cat([rgb, pm], dim=1).permute(2, 0, 1)[None, :, None]
        video = torch.cat([first, first.new_zeros(1, 3, t - 1, h, 2 * w)], dim=2)
        latents = self.encode_video(video)
        mask = first_frame_mask(1, t, latents.shape[3], latents.shape[4], self.temporal_stride)
        return torch.cat([mask.to(latents), latents], dim=1)

    def prepare_arm_cond(self, robot: RobotCondition, norm: PointmapNormalization
                         ) -> torch.Tensor:
        """(1, 20, F, h, 2w) for `act`, (1, 20, F, h, w) for `pmcond`."""
        act = self.components.transformer.config.variant == "act"
        pm = norm.normalise(robot.pointmap)
        pm[~robot.mask] = -1.0  # black background of the official 8-bit robot pointmap video
        pm_latent = self.encode_video(_to_video(pm))
        pm_latent = (pm_latent - POINTMAP_LATENT_MEAN) / POINTMAP_LATENT_STD
        latents = pm_latent
        if act:
            rgb = robot.rgb.astype(np.float32) / 255.0 * 2.0 - 1.0
            latents = torch.cat([self.encode_video(_to_video(rgb)), pm_latent], dim=-1)
        occupancy = torch.from_numpy(robot.mask.astype(np.float32))[None, None]
        mask = downsample_robot_mask(occupancy, pm_latent.shape[3], pm_latent.shape[4],
                                     self.temporal_stride).to(self.device)
        mask = mask.repeat_interleave(self.temporal_stride, dim=1)
        if act:
            mask = mask.repeat(1, 1, 1, 1, 2)
        return torch.cat([mask, latents], dim=1)

    @property
    def reads_tool(self) -> bool:
        """Whether the transformer reads the rollout's tool track (a tool condition)."""
        return self.components.transformer.reads_tool

    @property
    def tool_features(self) -> int:
        """Features per latent frame of the transformer's tool condition, 0 without one
        (k4d_model.conditions.tool_condition)."""
        return self.components.transformer.config.tool_features

    @property
    def reads_tool_position(self) -> bool:
        """Whether the tool condition holds the tool's position in the camera frame too
        (k4d_model.conditions.tool_position_features), which needs the camera pose."""
        return self.reads_tool and reads_tool_position(self.tool_features)

    def prepare_tool_cond(self, tool: ToolTrack | None, frames: int,
                          norm: PointmapNormalization | None = None,
                          T_cam_from_base: np.ndarray | None = None) -> torch.Tensor | None:
        """(1, F, features) of the rollout's tool over its `frames` pixel frames for a model
        that reads it, None for one that does not; FailedPrecondition when the model reads
        it and the request has none, or reads the tool's position and the request has no
        camera pose (before any work). `norm`: the rollout's pointmap normalisation (the
        tool's position is in its units)."""
        if not self.reads_tool:
            return None
        if tool is None:
            raise FailedPrecondition(
                "this model reads the gripper's state (its transformer's tool condition), and "
                "the request carries no tool track: send the rollout's kinematics (joints) so "
                "the tool is read off them, or pass `tool`")
        if self.reads_tool_position and T_cam_from_base is None:
            raise FailedPrecondition(
                "this model reads where the tool is in the camera frame (its transformer's "
                "tool condition with the tool's position), and the request carries no camera "
                "pose: pass T_cam_from_base, the camera the robot condition was rendered with")
        latent_frames = (frames - 1) // self.temporal_stride + 1
        features = tool_condition(tool, latent_frames, self.temporal_stride,
                                  self.tool_features, T_cam_from_base, norm)
        return torch.from_numpy(features)[None].to(self.device)

    # ------------------------------------------------------------ 6. sampling

    def make_scheduler(self, name: str | None, shift: float | None):
        from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

        base = self.scheduler
        shift = shift if shift is not None else base.config.get(
            "flow_shift", base.config.get("shift", self.info.flow_shift))
        if name is None:
            overrides = {"flow_shift": shift} if "flow_shift" in base.config else {"shift": shift}
            return type(base).from_config(base.config, **overrides)
        if name == "unipc":
            return UniPCMultistepScheduler(prediction_type="flow_prediction",
                                           use_flow_sigmas=True, num_train_timesteps=1000,
                                           flow_shift=shift)
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)

    def _denoise_step(self, latents, condition, t, image_embeds, arm_cond, plan,
                      tool_cond: torch.Tensor | None = None) -> torch.Tensor:
        model_input = torch.cat([latents, condition], dim=1)
        # only a model with a tool condition gets the argument: backends without it (an
        # exported graph) keep their five inputs
        tool = {} if tool_cond is None else {"tool_cond": tool_cond.repeat(plan["passes"], 1, 1)}
        if plan["passes"] == 1:
            return self.backend(model_input, t.expand(1).float(), image_embeds, arm_cond,
                                torch.ones(1), **tool)
        velocity = self.backend(model_input.repeat(2, 1, 1, 1, 1), t.expand(2).float(),
                                image_embeds.repeat(2, 1, 1), plan["arm_cond_pair"],
                                plan["gain_pair"], **tool)
        cond, uncond = velocity[:1], velocity[1:]
        guided = uncond + plan["guidance"] * (cond - uncond)
        if plan["halves"] == GUIDANCE_HALVES_RGB:
            half = guided.shape[-1] // 2  # RGB | pointmap side by side in width
            guided[..., half:] = cond[..., half:]
        return guided

    def _guidance_plan(self, guidance: float, mode: str, arm_cond: torch.Tensor,
                       negative_arm_cond: torch.Tensor | None) -> dict:
        if guidance <= 1.0 or (mode == "auto" and negative_arm_cond is None):
            reason = "guidance <= 1" if guidance <= 1.0 else "identical conditions"
            return {"passes": 1, "mode": mode, "reason": reason, "guidance": guidance}
        uncond = negative_arm_cond if negative_arm_cond is not None else arm_cond
        gain = torch.tensor([1.0, 2.0 if mode == "official" else 1.0])
        halves = self.info.extra.get(GUIDANCE_HALVES_KEY, GUIDANCE_HALVES_BOTH)
        return {"passes": 2, "mode": mode, "guidance": guidance, "halves": halves,
                "arm_cond_pair": torch.cat([arm_cond, uncond.to(arm_cond)], dim=0),
                "gain_pair": gain,
                "reason": "negative condition" if negative_arm_cond is not None else mode}

    # ------------------------------------------------------------ 7. decoding

    @torch.no_grad()
    def decode_float(self, latents: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(1, 16, F, h, 2w) -> rgb, pointmap (T, H, W, 3) float32 in [-1, 1]."""
        half = latents.shape[-1] // 2
        latents = torch.cat([latents[..., :half],
                             latents[..., half:] * POINTMAP_LATENT_STD + POINTMAP_LATENT_MEAN],
                            dim=-1)
        latents = (latents * self._vae_std() + self._vae_mean()).to(self.vae.dtype)
        if self.info.extra.get(VAE_DECODE_KEY) == VAE_DECODE_SPLIT:
            # Models whose VAE was trained on single videos (our from-scratch recipe) decode
            # RGB and pointmap as two videos, as they were encoded: the VAE's global
            # mid-block attention over a side-by-side frame mixes the two (a demo VAE gave
            # 10 dB side by side against 27 dB for the RGB half alone).
            video = torch.cat([self.vae.decode(latents[..., :half]).sample,
                               self.vae.decode(latents[..., half:]).sample], dim=-1).float()[0]
        else:  # the official model decodes the side-by-side latent as one video
            video = self.vae.decode(latents).sample.float()[0]  # 3, T, H, 2W
        video = video.clamp(-1.0, 1.0).permute(1, 2, 3, 0).cpu().numpy()
        width = video.shape[2] // 2
        return video[:, :, :width].astype(np.float32), video[:, :, width:].astype(np.float32)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(1, 16, F, h, 2w) -> rgb (T, H, W, 3) uint8, pointmap (T, H, W, 3) in [-1, 1]."""
        rgb, pointmap = self.decode_float(latents)
        return _to_uint8(rgb), pointmap

    @torch.no_grad()
    def static_reconstruction(self, image: np.ndarray) -> np.ndarray:
        """(T, H, W, 3) float32 in [-1, 1]: what the VAE gives back for the static clip of
        `image` (nothing moves): the reference of relative decoding for RGB."""
        frames = self.info.num_frames
        rgb = torch.from_numpy(np.array(image)).float().div(127.5).sub(1.0)
        clip = rgb.permute(2, 0, 1)[None, :, None].expand(1, 3, frames, *rgb.shape[:2])
        latents = self.encode_video(clip.contiguous())
        latents = (latents * self._vae_std() + self._vae_mean()).to(self.vae.dtype)
        video = self.vae.decode(latents).sample.float()[0].clamp(-1.0, 1.0)
        return video.permute(1, 2, 3, 0).cpu().numpy().astype(np.float32)

    @torch.no_grad()
    def clean_first_latent(self, image: np.ndarray) -> torch.Tensor:
        """(1, 16, 1, h, w): the normalised latent of the input image alone (latent frame 0
        of a causal VAE encodes pixel frame 0 alone)."""
        rgb = torch.from_numpy(np.array(image)).float().div(127.5).sub(1.0)
        return self.encode_video(rgb.permute(2, 0, 1)[None, :, None].contiguous())

    def finish_output(self, image: np.ndarray, robot: RobotCondition, rgb: np.ndarray | None,
                      pointmap: np.ndarray | None, norm: PointmapNormalization,
                      initial_pointmap: np.ndarray | None,
                      T_cam_from_base: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Decoded rgb / pointmap ([-1, 1] floats) -> uint8 RGB, metric pointmap under the
        model's fidelity options (k4d_model.fidelity). T_cam_from_base: the camera's pose,
        for a refiner whose geometry network reads it (scene planes). With `decode: input`
        and frame 0's points known, rgb and pointmap are None: the transformer was not
        sampled. Stacked samples (K, T, H, W, 3), drawn for a sample refiner that reads K,
        go to it as they are; every other option reads their mean (a tracks model's
        `motion_samples`: frame 0 is carried along the mean motion)."""
        opts = FidelityOptions.from_extra(self.info.extra)
        samples_rgb, samples_pointmap = rgb, pointmap
        if rgb is not None and rgb.ndim == 5:
            rgb, pointmap = rgb.mean(axis=0), pointmap.mean(axis=0)
        if pointmap is not None and samples_tracks(self.info.extra):
            pointmap = self.redrawn_motion(image, pointmap, rgb)
        points = norm.denormalise(pointmap) if pointmap is not None else None
        change = None
        if opts.refiner or opts.refiner_pointmap or opts.refiner_first_depth:
            self._check_refiner(opts)
            change = predict_change(self.refiner, image, robot, T_cam_from_base=T_cam_from_base)
        if initial_pointmap is None and opts.refiner_first_depth == REFINER_FIRST_DEPTH_ESTIMATED:
            # as if the caller had given the refiner's estimate as the initial pointmap
            initial_pointmap = estimated_first_points(change.first_depth_m, robot)
        if points is not None and samples_tracks(self.info.extra):
            first_points = _first_points(points[0], initial_pointmap)
            rgb_out, points = frames_from_tracks(image, points, first_points, robot.pointmap,
                                                 robot.mask)
            if opts.cascade:
                rgb_out, points = self._refine_tracked(image, robot, samples_rgb,
                                                       samples_pointmap, norm, initial_pointmap,
                                                       first_points, rgb_out, points, opts)
        elif opts.input_only:
            first = (initial_pointmap if points is None
                     else _first_points(points[0], initial_pointmap))
            rgb_out, points = input_frames(image, first, robot)
        elif opts.against_input:
            generated = (rgb + 1.0) * 127.5
            reference = (self.static_reconstruction(image) + 1.0) * 127.5
            first_points = _first_points(points[0], initial_pointmap)
            weight = point_weight = None
            if opts.change_threshold > 0 or not opts.relative:
                weight = change_mask(generated - reference, points[..., 2] - points[:1, ..., 2],
                                     robot.mask, opts)
                # a point is the input's or the model's, never a blend of two depths
                point_weight = (weight >= 0.5).astype(np.float32)
            if opts.cascade:
                rgb_out, refined = self._refine_sample(image, samples_rgb, reference,
                                                       samples_pointmap, first_points, norm)
                if opts.cascade == CASCADE_SAMPLE:
                    points = refined
                else:
                    points = compose_relative(first_points.astype(np.float32), points,
                                              points[:1], None)
                    if (opts.cascade == CASCADE_SAMPLE_GIVEN_DEPTH
                            and initial_pointmap is not None):
                        given = initial_pointmap[None, ..., 2:] > 0
                        points = np.where(given, refined, points)
            elif opts.relative:
                rgb_out = compose_relative(image.astype(np.float32), generated, reference,
                                           weight)
                points = compose_relative(first_points.astype(np.float32), points, points[:1],
                                          point_weight)
            else:
                rgb_out = compose_over_input(image.astype(np.float32), generated, weight)
                points = compose_over_input(first_points.astype(np.float32), points,
                                            point_weight)
            rgb_out = np.round(np.clip(rgb_out, 0.0, 255.0)).astype(np.uint8)
            points = points.astype(np.float32)
        else:
            rgb_out = _to_uint8(rgb)
        if opts.refiner_pointmap:
            # "drawn": where the colour shows a change, so the points follow what is drawn
            gate = (change.probability if opts.refiner_pointmap == REFINER_DRAWN
                    else change.point_probability)
            points = move_refined_points(points, _first_points(points[0], initial_pointmap),
                                         change.depth_m, gate, opts.refiner_pointmap_threshold)
        if opts.robot_pointmap == ROBOT_POINTMAP_KINEMATICS:
            points = np.where(robot.mask[..., None], robot.pointmap, points).astype(np.float32)
        if opts.refiner == REFINER_CHANGE:
            rgb_out = show_refined_change(rgb_out, image, change.colour, change.probability,
                                          opts)
        if opts.uncovered == UNCOVERED_FILLED and robot.mask[0].any():
            uncovered = uncovered_by_robot(robot.mask)
            filled = np.round(np.clip(fill_behind_robot(image, robot.mask[0]), 0, 255))
            rgb_out = np.where(uncovered[..., None], filled.astype(np.uint8)[None], rgb_out)
        painted = None
        if opts.robot_rgb == ROBOT_RGB_SHADED:
            painted = shaded_robot_render(robot.rgb, robot.pointmap, image, robot.mask)
        elif opts.robot_rgb == ROBOT_RGB_CALIBRATED:
            painted = calibrated_robot_render(robot.rgb, image, robot.mask)
        if painted is not None:
            rgb_out = np.where(robot.mask[..., None], painted, rgb_out)
        if opts.first_frame == FIRST_FRAME_GIVEN:  # observations win over what is derived
            rgb_out[0] = image
            if initial_pointmap is not None:
                points[0] = initial_pointmap
        if opts.uncovered_pointmap == UNCOVERED_FILLED and robot.mask[0].any():
            behind = fill_points_behind_robot(points[0], robot.pointmap[0], robot.mask[0])
            points = np.where(uncovered_by_robot(robot.mask)[..., None], behind[None],
                              points).astype(np.float32)
        return rgb_out, points

    def refiner_input(self, image: np.ndarray, robot: RobotCondition, rgb: np.ndarray,
                      pointmap: np.ndarray, norm: PointmapNormalization,
                      initial_pointmap: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """What the sample refiner (k4d_model.cascade) reads of a decoded sample (rgb,
        pointmap in [-1, 1], (T, H, W, 3) or stacked samples (K, T, H, W, 3)): the sample
        as decoded; for a tracks model, its frames, frame 0 carried along the sampled motion
        (k4d_model.tracks.frames_from_tracks), on the same scale. Its trainer stores the
        rollouts it learns from with this (k4d_trainer.cascade_stage)."""
        if not samples_tracks(self.info.extra):
            return rgb, pointmap
        if rgb.ndim == 5:
            pieces = [self.refiner_input(image, robot, one_rgb, one_pointmap, norm,
                                         initial_pointmap)
                      for one_rgb, one_pointmap in zip(rgb, pointmap, strict=True)]
            return np.stack([p[0] for p in pieces]), np.stack([p[1] for p in pieces])
        tracks = norm.denormalise(self.redrawn_motion(image, pointmap, rgb))
        return _on_sample_scale(*frames_from_tracks(image, tracks,
                                                    _first_points(tracks[0], initial_pointmap),
                                                    robot.pointmap, robot.mask), norm)

    def redrawn_motion(self, image: np.ndarray, pointmap: np.ndarray, rgb: np.ndarray
                       ) -> np.ndarray:
        """A tracks model's decoded pointmap half (T, H, W, 3), normalised, as frames are
        drawn from it: redrawn by the model's motion decoder with `motion_decoder: learned`
        (k4d_model.motion_decoder; `rgb`, the decoded RGB half, for one that reads it), else
        as decoded."""
        if not FidelityOptions.from_extra(self.info.extra).motion_decoder:
            return pointmap
        return decode_motion(self.motion_decoder, pointmap, image, rgb)

    def sample_reference(self, image: np.ndarray) -> np.ndarray:
        """(T, H, W, 3) float32 in [-1, 1]: what the refiner measures a sample's colour
        change from: the VAE's static clip (static_reconstruction) for a model that decodes
        its colour; frame 0 itself for a tracks model, whose frames carry frame 0's pixels."""
        if samples_tracks(self.info.extra):
            first = np.asarray(image, np.float32) / 127.5 - 1.0
            return np.repeat(first[None], self.info.num_frames, axis=0)
        return self.static_reconstruction(image)

    def _refine_tracked(self, image: np.ndarray, robot: RobotCondition, rgb: np.ndarray,
                        pointmap: np.ndarray, norm: PointmapNormalization,
                        initial_pointmap: np.ndarray | None, first_points: np.ndarray,
                        tracked_rgb: np.ndarray, tracked_points: np.ndarray,
                        opts: FidelityOptions) -> tuple[np.ndarray, np.ndarray]:
        """`cascade` on a tracks model: the refiner redraws the colour of its frames (frame 0
        carried along the sampled motion); the points are the refiner's with `cascade:
        sample` (or `sample-given-depth` and frame 0's depth given), else the carried ones."""
        self._check_refiner(opts)
        if rgb.ndim == 4:  # one sample: its frames are the ones finish_output just drew
            frames, frame_points = _on_sample_scale(tracked_rgb, tracked_points, norm)
        else:
            frames, frame_points = self.refiner_input(image, robot, rgb, pointmap, norm,
                                                      initial_pointmap)
        reference = (self.sample_reference(image) + 1.0) * 127.5
        colour, refined = self._refine_sample(image, frames, reference, frame_points,
                                              first_points, norm)
        points = tracked_points
        if opts.cascade == CASCADE_SAMPLE:
            points = refined
        elif opts.cascade == CASCADE_SAMPLE_GIVEN_DEPTH and initial_pointmap is not None:
            points = np.where(initial_pointmap[None, ..., 2:] > 0, refined, tracked_points)
        return (np.round(np.clip(colour, 0.0, 255.0)).astype(np.uint8),
                points.astype(np.float32))

    def _refine_sample(self, image: np.ndarray, rgb: np.ndarray, reference: np.ndarray,
                       pointmap: np.ndarray, first_points: np.ndarray,
                       norm: PointmapNormalization) -> tuple[np.ndarray, np.ndarray]:
        """`cascade`: frames t >= 1 are frame 0 plus the change the sample refiner draws
        from the decoded sample (rgb, pointmap in [-1, 1]; reference in levels).
        Returns float RGB levels and metric points, frame 0 the input's."""
        colour, moved = refine_sample(self.cascade, image, rgb, reference / 127.5 - 1.0,
                                      pointmap, norm.scale)
        first = image.astype(np.float32)
        rgb_out = np.concatenate([first[None], first[None] + colour])
        points = np.concatenate([first_points[None], first_points[None] + moved])
        return rgb_out, points

    def _check_refiner(self, opts: FidelityOptions) -> None:
        if opts.cascade and self.cascade is None:
            raise FailedPrecondition(f"model {self.info.name} sets extra.cascade="
                                     f"{opts.cascade!r} but has no cascade/ directory")
        if opts.motion_decoder and self.motion_decoder is None:
            raise FailedPrecondition(f"model {self.info.name} sets extra.motion_decoder="
                                     f"{opts.motion_decoder!r} but has no motion_decoder/ "
                                     "directory")
        for key in ("refiner", "refiner_pointmap", "refiner_first_depth"):
            if getattr(opts, key) and self.refiner is None:
                raise FailedPrecondition(f"model {self.info.name} sets extra.{key}="
                                         f"{getattr(opts, key)!r} but has no refiner/ directory")
        for key, head in (("refiner_pointmap", "depth"), ("refiner_first_depth", "first_depth")):
            if getattr(opts, key) and not getattr(self.refiner.geometry_source.config, head):
                raise FailedPrecondition(f"model {self.info.name} sets extra.{key}="
                                         f"{getattr(opts, key)!r} but its refiner has no "
                                         f"{head} head (refiner/config.json \"{head}\": false)")

    # ------------------------------------------------------------ the call

    def __call__(self, image: np.ndarray, robot_rgb: np.ndarray, robot_pointmap: np.ndarray,
                 robot_mask: np.ndarray, num_steps: int | None = None, seed: int = 42,
                 guidance: float | None = None, guidance_mode: str = "auto",
                 negative: RobotCondition | None = None, scheduler: str | None = None,
                 shift: float | None = None,
                 pointmap_normalization: PointmapNormalization | None = None,
                 callback: ProgressCallback | None = None,
                 should_cancel: CancelCheck | None = None,
                 initial_pointmap: np.ndarray | None = None,
                 T_cam_from_base: np.ndarray | None = None,
                 tool: ToolTrack | None = None, ablation: str | None = None,
                 options: dict | None = None) -> GenerationResult:
        """Sample one rollout. See the module docstring for the steps and guidance modes.

        initial_pointmap: optional (H, W, 3) float32 metres, camera frame: the scene's points
        in the first frame (an RGB-D observation). The model does not see it; the output
        keeps it where nothing changes (k4d_model.fidelity, relative decoding).
        T_cam_from_base: optional (4, 4), the pose of the camera the robot condition was
        rendered with, relative to the robot's base: a refiner with scene planes reads frame
        0's depth off the base frame's planes with it (k4d_model.refiner; ADR 017), and a
        transformer that reads the tool's position sees the tool through it.
        tool: optional k4d.tool.ToolTrack of the rollout (the tool frame and the gripper's
        opening per frame): checked against the clip and recorded; a model whose transformer
        has a tool condition reads the gripper's state off it (`tool_features`; with the
        tool's position also where the tool is, `tool_position_features`) and refuses a
        request without it (or, reading the position, without `T_cam_from_base`).
        ablation: "first-frame" replaces the transformer's sample by frame 0's latent in every
        frame (a sample that changes nothing), to measure what the transformer contributes;
        None: the sample itself.
        options: the request's sampling options (k4d.sampling: profile, solver, steps,
        cache, cache_threshold, quant, compile) over the model's `sampling` defaults;
        `num_steps` / `scheduler` are the same settings as `steps` / `solver`. Caching,
        quantisation and compiled blocks are the backend's (`prepare_levers`); a backend
        without them refuses a request that asks for one."""
        started = time.perf_counter()
        if ablation not in (None, ABLATION_FIRST_FRAME):
            raise InvalidArgument.for_field("ablation", f"must be None or {ABLATION_FIRST_FRAME!r}")
        robot = RobotCondition(robot_rgb, robot_pointmap, robot_mask)
        sampling_options = self.sampling_options(options, num_steps, scheduler)
        num_steps = sampling_options.steps or self.info.num_inference_steps
        scheduler = sampling_options.solver
        guidance = self.info.guidance_scale if guidance is None else float(guidance)
        # 1. check inputs (the levers first: a refused FP8 request costs nothing)
        self.check_levers(sampling_options)
        self.check_inputs(image, robot, num_steps, guidance, guidance_mode, scheduler, negative,
                          shift)
        _check_initial_pointmap(initial_pointmap, image.shape[:2])
        _check_camera_pose(T_cam_from_base)
        if tool is not None:
            tool.check_frames(robot.rgb.shape[0])
        opts = FidelityOptions.from_extra(self.info.extra)
        norm = pointmap_normalization or PointmapNormalization.from_points(robot_pointmap,
                                                                           robot_mask)
        tool_cond = self.prepare_tool_cond(tool, robot.rgb.shape[0], norm, T_cam_from_base)
        if opts.input_only and self._first_points_known(opts, robot, initial_pointmap):
            # `decode: input` with frame 0's points known: nothing reads the transformer's
            # frames, so it is not sampled (k4d_model.options)
            rgb, pointmap = self.finish_output(image, robot, None, None, norm, initial_pointmap,
                                               T_cam_from_base)
            sampling = {"num_steps": 0, "scheduler": None, "shift": None, "cached_steps": 0,
                        "options": sampling_options.to_dict(), "attention_backend": None,
                        "guidance": {"passes": 0, "reason": "decode: input (the transformer's "
                                                            "frames are not shown)"}}
            timings = {"conditioning": 0.0, "denoising": 0.0,
                       "decoding": time.perf_counter() - started}
        else:
            rgb, pointmap, sampling, timings = self._sample_and_finish(
                image, robot, norm, num_steps, seed, guidance, guidance_mode, negative,
                scheduler, shift, callback, should_cancel, initial_pointmap, T_cam_from_base,
                opts, started, ablation, sampling_options, tool_cond)
        metadata = {
            "generator": "kinema4d", "model": self.info.to_dict(), "model_id": self.model_id,
            "backend": self.backend.describe(), "seed": int(seed), **sampling,
            "pointmap_units": "metres", "pointmap_normalization": norm.to_dict(),
            "fidelity": opts.to_dict(), "initial_pointmap": initial_pointmap is not None,
            "camera_pose": T_cam_from_base is not None,
            "tool": tool is not None, "tool_read": tool is not None and self.reads_tool,
            "fps": self.info.fps,
            "timings_s": timings,
        }
        return GenerationResult(rgb, pointmap, metadata)

    def sampling_options(self, options: dict | list | tuple | None = None,
                         num_steps: int | None = None, scheduler: str | None = None
                         ) -> SamplingOptions:
        """The model's `sampling` defaults under the request's `options` (one layer, or
        several lowest first, e.g. a server's profile then the request); `num_steps` /
        `scheduler` (the older arguments) are `steps` / `solver` of the last layer, refused
        when both spellings are given with different values."""
        layers = list(options) if isinstance(options, (list, tuple)) else [options]
        lower = [check_sampling(dict(layer or {}), "sampling") for layer in layers[:-1]]
        layer = dict(check_sampling(dict(layers[-1] or {}), "sampling"))
        if num_steps is not None and not 1 <= int(num_steps) <= 1000:
            raise InvalidArgument.for_field("num_steps", "must be in [1, 1000]")
        if scheduler is not None and scheduler not in SCHEDULERS:
            raise InvalidArgument.for_field("scheduler", f"must be one of {SCHEDULERS}")
        for old, new, value in (("num_steps", "steps", num_steps), ("scheduler", "solver",
                                                                    scheduler)):
            if value is None:
                continue
            if new in layer and layer[new] != value:
                raise InvalidArgument.for_field(f"sampling.{new}", f"is {layer[new]!r} but "
                                                                   f"{old} is {value!r}; set one")
            layer[new] = int(value) if new == "steps" else value
        return resolve_sampling(self.info.sampling, *lower, layer)

    def check_levers(self, options: SamplingOptions) -> None:
        """InvalidArgument when the backend cannot apply `options` (caching, FP8, compiled
        blocks): before any work, never a silent fallback."""
        check = getattr(self.backend, "check_levers", None)
        if check is not None:
            check(options)
            return
        for key, wanted in (("cache", options.cache != "none"), ("quant", options.quant != "none"),
                            ("compile", options.compile)):
            if wanted:
                raise InvalidArgument.for_field(
                    f"sampling.{key}", f"{getattr(options, key)!r} needs the torch backend; "
                                       f"this model runs on {self.backend.describe().get('backend')}")

    def _first_points_known(self, opts: FidelityOptions, robot: RobotCondition,
                            initial_pointmap: np.ndarray | None) -> bool:
        """Whether frame 0's points are had without the transformer: a whole initial
        pointmap, or the refiner's estimate along a camera fitted on the robot's points."""
        if initial_pointmap is not None:
            return bool((initial_pointmap[..., 2] > 0).all())
        return (opts.refiner_first_depth == REFINER_FIRST_DEPTH_ESTIMATED
                and fit_pinhole(robot.pointmap, robot.mask) is not None)

    def decoded_sample(self, image: np.ndarray, robot: RobotCondition,
                       norm: PointmapNormalization, seed: int = 42,
                       num_steps: int | None = None, count: int = 1,
                       tool: ToolTrack | None = None, T_cam_from_base: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The transformer's rollout with the model's own sampler settings, decoded, before
        any output option: rgb and pointmap (T, H, W, 3) float32 in [-1, 1] (what the sample
        refiner reads, k4d_model.cascade; its trainer samples rollouts with this). With
        `count` > 1, that many independent samples, stacked (count, T, H, W, 3), seeded as
        a generation seeds them (SAMPLE_SEED_STRIDE); `tool` and `T_cam_from_base` as in
        `__call__`."""
        steps = num_steps or self.info.num_inference_steps
        self.check_inputs(image, robot, steps, self.info.guidance_scale, "auto", None, None,
                          None)
        _check_camera_pose(T_cam_from_base)
        tool_cond = self.prepare_tool_cond(tool, robot.rgb.shape[0], norm, T_cam_from_base)
        pieces = [self.decode_float(self._sample_latents(
            image, robot, norm, steps, sample_seed(seed, k), self.info.guidance_scale,
            "auto", None, None, None, None, None, FidelityOptions.from_extra(self.info.extra),
            tool_cond=tool_cond)[0])
            for k in range(count)]
        if count == 1:
            return pieces[0]
        return np.stack([p[0] for p in pieces]), np.stack([p[1] for p in pieces])

    def samples_drawn(self, opts: FidelityOptions) -> int:
        """Independent samples a rollout draws: what the sample refiner reads when the
        model's options use it, a tracks model's `motion_samples` (their mean motion is
        drawn), else one."""
        if opts.cascade and self.cascade is not None:
            return self.cascade.config.samples
        if samples_tracks(self.info.extra):
            return opts.motion_samples
        return 1

    def _sample_latents(self, image, robot, norm, num_steps, seed, guidance, guidance_mode,
                        negative, scheduler, shift, callback, should_cancel, opts,
                        ablation=None, sampling_options: SamplingOptions | None = None,
                        tool_cond: torch.Tensor | None = None):
        """Steps 2-6: condition and sample the transformer's rollout. Returns the latents
        to decode (frame 0's RGB latent added back for a model that samples the change),
        the sampler, the guidance plan, the backend's lever report and the time
        conditioning ended."""
        # 2.-4. conditioning
        image_embeds = self.encode_image(image)
        condition = self.prepare_condition(image)
        arm_cond = self.prepare_arm_cond(robot, norm)
        if negative is None and guidance > 1.0 and \
                self.info.extra.get(GUIDANCE_NEGATIVE_KEY) == GUIDANCE_NEGATIVE_NO_ROBOT:
            # the model learned the scene without a robot (training.condition_dropout)
            negative = RobotCondition.empty(*robot.mask.shape)
        negative_arm = self.prepare_arm_cond(negative, norm) if negative is not None else None
        plan = self._guidance_plan(guidance, guidance_mode, arm_cond, negative_arm)
        self._check_memory(plan["passes"])
        # 5. noise (CPU generator, as the official pipeline, so seeds give the same noise)
        shape = (1, condition.shape[1] - self.temporal_stride, *condition.shape[2:])
        generator = torch.Generator("cpu").manual_seed(int(seed))
        latents = torch.randn(shape, generator=generator, dtype=torch.float32).to(self.device)
        conditioned = time.perf_counter()
        # 6. denoise (the backend's levers set up for this generation: a fresh cache context)
        sampler = self.make_scheduler(scheduler, shift)
        sampler.set_timesteps(num_steps, device=self.device)
        levers = getattr(self.backend, "prepare_levers", None)
        if levers is not None:
            levers(sampling_options or SamplingOptions(), num_steps)
        anchor = None
        if opts.latent_anchor:
            half = latents.shape[-1] // 2
            anchor = (self.clean_first_latent(image), latents[:, :, :1, :, :half].clone())
            latents = anchor_first_latent(latents, *anchor, float(sampler.sigmas[0]))
        for step, t in enumerate(sampler.timesteps):
            if should_cancel is not None and should_cancel():
                raise Cancelled(f"generation cancelled after {step} of {num_steps} steps")
            velocity = self._denoise_step(latents, condition, t, image_embeds, arm_cond, plan,
                                          tool_cond)
            latents = sampler.step(velocity.to(latents.device), t, latents,
                                   return_dict=False)[0]
            if anchor is not None:
                latents = anchor_first_latent(latents, *anchor, float(sampler.sigmas[step + 1]))
            if callback is not None:
                callback(step + 1, num_steps)
        if ablation == ABLATION_FIRST_FRAME:
            latents = repeat_first_frame(latents, self.clean_first_latent(image))
        elif samples_change(self.info.extra):
            latents = add_first(latents, self.clean_first_latent(image),
                                tracks=samples_tracks(self.info.extra),
                                motion_scale=motion_scale_of(self.info.extra))
        report = getattr(self.backend, "lever_report", None)
        return latents, sampler, plan, report() if report is not None else {}, conditioned

    def _sample_and_finish(self, image, robot, norm, num_steps, seed, guidance, guidance_mode,
                           negative, scheduler, shift, callback, should_cancel,
                           initial_pointmap, T_cam_from_base, opts, started, ablation=None,
                           sampling_options: SamplingOptions | None = None,
                           tool_cond: torch.Tensor | None = None):
        """Steps 2-7: condition, sample and decode the transformer's rollout (as many
        independent samples as the sample refiner reads), then the output options. Returns
        rgb, pointmap, the sampling's metadata and the timings."""
        count = self.samples_drawn(opts)
        timings = {"conditioning": 0.0, "denoising": 0.0, "decoding": 0.0}
        pieces, reports, begun = [], [], started
        for k in range(count):
            progress = callback
            if callback is not None and count > 1:  # one bar over every sample's steps
                def progress(done, total, _k=k):
                    return callback(_k * total + done, count * total)
            latents, sampler, plan, lever_report, conditioned = self._sample_latents(
                image, robot, norm, num_steps, sample_seed(seed, k), guidance,
                guidance_mode, negative, scheduler, shift, progress, should_cancel, opts,
                ablation, sampling_options, tool_cond)
            denoised = time.perf_counter()
            pieces.append(self.decode_float(latents))
            reports.append(lever_report)
            timings["conditioning"] += conditioned - begun
            timings["denoising"] += denoised - conditioned
            begun = time.perf_counter()
            timings["decoding"] += begun - denoised
        decoded = pieces[0] if count == 1 else tuple(np.stack(a) for a in zip(*pieces, strict=True))
        # 7. decode and de-normalise
        rgb, pointmap = self.finish_output(image, robot, *decoded, norm, initial_pointmap,
                                           T_cam_from_base)
        timings["decoding"] += time.perf_counter() - begun
        lever_report = {**reports[0],
                        "cached_steps": sum(int(r.get("cached_steps", 0)) for r in reports)}
        sampling = {
            "num_steps": num_steps, "scheduler": type(sampler).__name__,
            "shift": float(sampler.config.get("flow_shift", sampler.config.get("shift", 0.0))),
            "guidance": {k: v for k, v in plan.items() if not isinstance(v, torch.Tensor)},
            "latent_target": latent_target_of(self.info.extra),
            "ablation": ablation, "samples": count,
            "cached_steps": int(lever_report.get("cached_steps", 0)),
            "options": (sampling_options or SamplingOptions()).to_dict(),
            "attention_backend": lever_report.get("attention_backend")}
        if lever_report.get("compile_s") is not None:
            # the one-time compile cost apart from the steady state (the first compiled
            # call, less one steady step)
            timings["compile"] = lever_report["compile_s"]
            timings["denoising"] -= lever_report["compile_s"]
            timings["denoising_step"] = lever_report.get("steady_step_s")
        return rgb, pointmap, sampling, timings

    def _check_memory(self, batch: int) -> None:
        dtype = getattr(self.backend, "dtype", torch.float32)
        size = torch.empty((), dtype=dtype).element_size() if isinstance(dtype, torch.dtype) else 4
        est = estimate(self.components.transformer.config, self.vae.config, self.info.num_frames,
                       self.info.height, self.info.width, batch, size, str(self.device))
        ensure_fits(est)


def sample_seed(seed: int, k: int) -> int:
    """The noise seed of sample k of a rollout seeded `seed` (SAMPLE_SEED_STRIDE)."""
    return int(seed) if k == 0 else (int(seed) + k * SAMPLE_SEED_STRIDE) % 2 ** 63


def _on_sample_scale(frames: np.ndarray, points: np.ndarray, norm: PointmapNormalization
                     ) -> tuple[np.ndarray, np.ndarray]:
    """A tracks model's drawn frames (uint8) and metric points -> [-1, 1] and normalised
    units, the scale of a decoded sample (what the sample refiner reads)."""
    return (frames.astype(np.float32) / 127.5 - 1.0,
            norm.normalise(points.astype(np.float32)).astype(np.float32))


def _first_points(generated: np.ndarray, initial_pointmap: np.ndarray | None) -> np.ndarray:
    """Frame 0's points: the initial pointmap's where its depth is known (observed, or the
    refiner's estimate), else the generated frame 0's. (H, W, 3)."""
    if initial_pointmap is None:
        return generated
    return np.where(initial_pointmap[..., 2:] > 0, initial_pointmap, generated)


def _check_initial_pointmap(points: np.ndarray | None, size: tuple[int, int]) -> None:
    if points is None:
        return
    if not (isinstance(points, np.ndarray) and points.shape == (*size, 3)):
        raise InvalidArgument.for_field("initial_pointmap", f"must be an ({size[0]}, {size[1]}, "
                                                            "3) array of metres")
    if not np.isfinite(points).all():
        raise InvalidArgument.for_field("initial_pointmap", "contains NaN or inf")


def _check_camera_pose(T: np.ndarray | None) -> None:
    if T is not None:
        check_rigid(T, "T_cam_from_base")


def _to_uint8(video: np.ndarray) -> np.ndarray:
    """[-1, 1] floats -> uint8 levels."""
    return np.round((video / 2.0 + 0.5) * 255.0).astype(np.uint8)


def _to_video(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) float in [-1, 1] -> (1, 3, T, H, W)."""
    return torch.from_numpy(np.ascontiguousarray(frames)).float().permute(3, 0, 1, 2)[None]
