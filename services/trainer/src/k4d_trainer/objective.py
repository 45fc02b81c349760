"""The official Kinema4D training objective (rectified flow), exactly:

- timestep: an index drawn uniformly from the FlowMatchEulerDiscrete training schedule
  (1000 steps), giving the timestep t in [0, 1000) and its sigma s;
- x_t = (1 - s) x + s eps, target = eps - x, loss = MSE(model(x_t, t, ...), target);
- the robot mask (arm_cond channels 0:4) has 10% of its ones set to 0.5 ("soft mask").

Optionally (issue 21, not the official objective) the squared error is a weighted mean over
latent cells: `changed_loss_weight` where the scene changed from frame 0, `robot_loss_weight`
on the robot, `moving_loss_weight` (a tracks target) where the scene changed and the target
moves: the moving objects, not their shadows nor the robot; 1 elsewhere (`loss_weights`).
With `coherence_loss_weight` (a tracks target) a second term asks the moving cells that touch
to err alike (`coherence_loss`), so that an object is drawn whole.
And `condition_dropout` of the samples see a scene with no robot in view in place of their
robot condition (what guidance samples against, k4d_model.options `guidance_negative`).
And `high_noise_share` of the samples are noised to a sigma in [`high_noise_min_sigma`, 1]
(1: pure noise), where the transformer must predict the reaction from its conditions alone
(issue 45).

Every random draw of a sample comes from a generator seeded by (run seed, global sample
number), so a sample gets the same noise whichever rank, world size or restart computes
it: a DDP step equals the single-process step on the same global batch, and a resumed run
repeats the uninterrupted run's losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from k4d_model.latent_target import change_from_first, samples_change, samples_tracks
from k4d_model.options import LATENT_TARGET_KEY, LATENT_TARGETS


def training_schedule(shift: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(timesteps, sigmas) of the 1000-step FlowMatchEulerDiscrete training schedule."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    return scheduler.timesteps.float().clone(), scheduler.sigmas.float().clone()


def sample_generator(seed: int, sample_number: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 0x9E3779B1 + sample_number * 7919) % (2 ** 63))


def soften_mask(arm_cond: torch.Tensor, ratio: float, mask_channels: int,
                generator: torch.Generator) -> torch.Tensor:
    """arm_cond: (C, F, h, w) of one sample; `ratio` of the mask entries equal to 1 become
    0.5 (all mask channels of a position together, as the mask is one map tiled 4x)."""
    if ratio <= 0:
        return arm_cond
    mask = arm_cond[:mask_channels]
    pick = (torch.rand(mask.shape[1:], generator=generator) < ratio) & (mask[0] == 1)
    softened = torch.where(pick.expand_as(mask), torch.full_like(mask, 0.5), mask)
    return torch.cat([softened, arm_cond[mask_channels:]], dim=0)


def learns_change(latent_target: str) -> bool:
    """Whether `training.latent_target` makes the RGB half a change from frame 0."""
    return samples_change({LATENT_TARGET_KEY: latent_target})


def clean_sample(latents: torch.Tensor, latent_target: str, motion_scale: float = 1.0
                 ) -> torch.Tensor:
    """(B, 16, F, h, 2w) latents -> the clean sample x the transformer learns to draw for
    `training.latent_target`: the latents, or their change from frame 0
    (k4d_model.latent_target; a tracks target's motion times `training.motion_scale`)."""
    if not learns_change(latent_target):
        return latents
    return change_from_first(latents, latents[:, :, :1, :, : latents.shape[-1] // 2],
                             tracks=samples_tracks({LATENT_TARGET_KEY: latent_target}),
                             motion_scale=motion_scale)


@dataclass
class NoisedBatch:
    model_input: torch.Tensor  # (B, 36, F, h, 2w)
    timestep: torch.Tensor  # (B,)
    target: torch.Tensor  # (B, 16, F, h, 2w) = eps - x
    arm_cond: torch.Tensor  # soft-masked
    clean: torch.Tensor  # (B, 16, F, h, 2w) x, the clean sample (what moving_cells reads)
    sigma: torch.Tensor  # (B,) each sample's noise level s (x_t = (1 - s) x + s eps)


def noise_batch(batch: dict[str, torch.Tensor], sample_numbers: list[int], seed: int,
                schedule: tuple[torch.Tensor, torch.Tensor], soft_mask_ratio: float,
                mask_channels: int, latent_target: str = LATENT_TARGETS[0],
                condition_dropout: float = 0.0,
                no_robot: torch.Tensor | None = None, motion_scale: float = 1.0,
                high_noise_share: float = 0.0, high_noise_min_sigma: float = 1.0
                ) -> NoisedBatch:
    """Draw each sample's timestep, noise and soft mask; build the model input (CPU).
    latent_target: what the clean sample is (`clean_sample`: the latents, or their change
    from frame 0 with a per-frame VAE; a tracks target's motion times `motion_scale`).
    condition_dropout: the chance that a sample's robot condition is `no_robot` (drawn after
    the rest, so the sample's timestep and noise are those of a run without it).
    high_noise_share: the chance that a sample's timestep is drawn again, uniformly among the
    schedule's whose sigma is at least `high_noise_min_sigma` (1: the top alone, pure noise,
    x_t = eps); drawn last, so its noise is the same."""
    if condition_dropout > 0 and no_robot is None:
        raise ValueError("condition_dropout needs the no-robot condition")
    timesteps, sigmas = schedule
    high = high_noise_count(sigmas[: len(timesteps)], high_noise_min_sigma)
    inputs, ts, targets, arms, cleans, noise_levels = [], [], [], [], [], []
    for i, number in enumerate(sample_numbers):
        generator = sample_generator(seed, number)
        x = clean_sample(batch["latents"][i][None], latent_target, motion_scale)[0]
        index = int(torch.randint(0, len(timesteps), (1,), generator=generator))
        eps = torch.randn(x.shape, generator=generator, dtype=x.dtype)
        arm = soften_mask(batch["arm_cond"][i], soft_mask_ratio, mask_channels, generator)
        if condition_dropout > 0 and float(torch.rand((), generator=generator)) < condition_dropout:
            arm = no_robot.to(arm)
        if high_noise_share > 0 and float(torch.rand((), generator=generator)) < high_noise_share:
            index = int(torch.randint(0, high, (1,), generator=generator)) if high > 1 else 0
        s = sigmas[index]
        x_t = (1.0 - s) * x + s * eps
        inputs.append(torch.cat([x_t, batch["condition"][i]], dim=0))
        ts.append(timesteps[index])
        targets.append(eps - x)
        arms.append(arm)
        cleans.append(x)
        noise_levels.append(s)
    return NoisedBatch(torch.stack(inputs), torch.stack(ts), torch.stack(targets),
                       torch.stack(arms), torch.stack(cleans), torch.stack(noise_levels))


def high_noise_count(sigmas: torch.Tensor, min_sigma: float) -> int:
    """How many of the schedule's first (highest, descending) sigmas are >= `min_sigma`; at
    least the top one."""
    return max(1, int((sigmas >= min_sigma - 1e-6).sum()))


def loss_weights(batch: dict[str, torch.Tensor], changed_weight: float, robot_weight: float,
                 moving_weight: float = 1.0, clean: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 1, F, h, 2w): per latent cell the largest weight that applies (the changed scene,
    the robot's un-softened mask, with `moving_weight` the moving cells of `clean`, a tracks
    target's clean sample: `moving_cells`), 1 elsewhere."""
    change = batch["change"]
    robot = batch["arm_cond"][:, :1]
    if robot.shape[-1] != change.shape[-1]:  # `pmcond`: one mask for both halves
        robot = robot.repeat(1, 1, 1, 1, change.shape[-1] // robot.shape[-1])
    ones = torch.ones_like(change)
    weights = torch.maximum(torch.maximum(ones, changed_weight * change), robot_weight * robot)
    if moving_weight != 1.0:
        if clean is None:
            raise ValueError("a moving-cell weight needs the clean sample")
        weights = torch.maximum(weights, moving_weight * moving_cells(change, clean))
    return weights


# A tracks target's cell moves when its largest channel's motion (x motion_scale) is above
# this. Measured on the demo's cache: the changed cells split into shadows and colour
# changes (90 % below 0.2) and moving surfaces (units to tens); between 0.5 and 2 the share
# of moving ones moves by a few per cent.
MOVING_CELL_MIN = 1.0


def moving_cells(change: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """(B, 1, F, h, 2w) float: 1 on the cells where the scene changed off the robot
    (`change`) and a tracks target's clean sample `clean` (B, 16, F, h, 2w) moves frame 0's
    surface: the origin of a moving object in the motion grid, in both halves (its colour
    change too); not a shadow, whose surface stays."""
    half = clean.shape[-1] // 2
    moving = (clean[..., half:].abs().amax(dim=1, keepdim=True) > MOVING_CELL_MIN).to(change)
    return change * moving.repeat(1, 1, 1, 1, 2)


def coherence_loss(prediction: torch.Tensor, target: torch.Tensor, sigma: torch.Tensor,
                   moving: torch.Tensor) -> torch.Tensor:
    """How much the x0 error differs between neighbouring moving cells: the mean over
    pairs of 4-neighbour cells both in `moving` (B, 1, F, h, 2w; `moving_cells`), within one
    half and one frame, of the squared difference of their x0 errors, per channel.

    The sampler commits to its x0 estimate, x_t - s v, whose error is s times the velocity
    error: where the cells of one moving object err alike, the object is drawn whole (too
    short, too far), not in scattered pieces; a common error costs nothing here, the MSE
    still pays for it. 0 when no two moving cells touch."""
    error = (prediction.float() - target.float()) * sigma.float().view(-1, 1, 1, 1, 1)
    moving = moving.to(error.device, torch.float32)
    half = error.shape[-1] // 2
    total = error.new_zeros(())
    pairs = error.new_zeros(())
    for side in (slice(None, half), slice(half, None)):
        e, m = error[..., side], moving[..., side]
        for dim in (-1, -2):  # across, then down
            n = e.shape[dim]
            both = m.narrow(dim, 1, n - 1) * m.narrow(dim, 0, n - 1)
            step = e.narrow(dim, 1, n - 1) - e.narrow(dim, 0, n - 1)
            total = total + (both * step.square()).sum()
            pairs = pairs + both.sum() * e.shape[1]
    return total / pairs.clamp(min=1.0)


def flow_matching_loss(prediction: torch.Tensor, target: torch.Tensor,
                       weights: torch.Tensor | None = None) -> torch.Tensor:
    """MSE; with `weights` (broadcast over the channels) their weighted mean."""
    if weights is None:
        return F.mse_loss(prediction.float(), target.float())
    error = (prediction.float() - target.float()).square()
    weights = weights.to(error.device, torch.float32).expand_as(error)
    return (weights * error).sum() / weights.sum()
