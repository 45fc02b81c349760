"""What the transformer's sample is: the clip's latents (the official objective), their
change from frame 0 (`k4d_model.json` extra `latent_target: change`, issue 45), or with
`latent_target: tracks` (k4d_model.tracks) that change on the RGB half and, on the pointmap
half, frame 0's tracks then their motion from frame 0.

With a per-frame VAE (k4d_model.frame_vae) a scene that does not change has frame 0's RGB
latent in every frame, so the change is zero wherever nothing moves: the transformer learns
only what the robot and the objects change, and the static region comes back exactly as
frame 0's. With `change` only the RGB half is a change: frame 0's pointmap is not an input
(the model draws it from the image, as Kinema4D does). With `tracks` the pointmap half keeps
its frame 0 (the model's estimate of frame 0's points) and each later frame is the tracks'
change from it: a surface that does not move samples zero, so the noise of its absolute
position is drawn once, at frame 0, and cannot move it between frames (ADR 027). That
motion is small beside the unit noise the transformer denoises, so a tracks model may scale
it (`motion_scale`, about 1 / its RMS): the transformer's leftover error on a still surface
shrinks by that factor when the sample is scaled back.

Latents are normalised, (B, C, F, h, 2w): RGB on the left half, pointmap on the right.
"""

from __future__ import annotations

import torch

from k4d_model.options import (
    LATENT_TARGET_KEY,
    LATENT_TARGET_TRACKS,
    LATENT_TARGETS,
    MOTION_SCALE_KEY,
)

LATENT_TARGET_CHANGE = "change"


def latent_target_of(extra: dict) -> str:
    """A model's (its k4d_model.json `extra`) latent target; the official one when unset."""
    return extra.get(LATENT_TARGET_KEY, LATENT_TARGETS[0])


def motion_scale_of(extra: dict) -> float:
    """A tracks model's motion scale (its k4d_model.json `extra`); 1 when unset."""
    return float(extra.get(MOTION_SCALE_KEY, 1.0))


def samples_change(extra: dict) -> bool:
    """Whether a model (its k4d_model.json `extra`) samples the RGB half's change from frame
    0 (`change`, and `tracks` whose pointmap half is the scene's motion)."""
    return latent_target_of(extra) in (LATENT_TARGET_CHANGE, LATENT_TARGET_TRACKS)


def samples_tracks(extra: dict) -> bool:
    """Whether a model's pointmap half is where frame 0's surfaces are at each frame
    (k4d_model.tracks), not the pointmap seen at that frame."""
    return latent_target_of(extra) == LATENT_TARGET_TRACKS


def _rgb_half(latents: torch.Tensor) -> torch.Tensor:
    return latents[..., : latents.shape[-1] // 2]


def _later_points(latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the pointmap half's frames t >= 1, a copy of its frame 0) of (B, C, F, h, 2w)."""
    points = latents[..., latents.shape[-1] // 2:]
    return points[:, :, 1:], points[:, :, :1].clone()


def change_from_first(latents: torch.Tensor, first_rgb: torch.Tensor,
                      tracks: bool = False, motion_scale: float = 1.0) -> torch.Tensor:
    """latents -> the training target: the RGB half minus frame 0's RGB latent
    `first_rgb` (B, C, 1, h, w), repeated over the frames; the pointmap half as it is, or
    with `tracks` its frames t >= 1 minus its frame 0, times `motion_scale`."""
    out = latents.clone()
    _rgb_half(out).sub_(first_rgb)
    if tracks:
        later, first = _later_points(out)
        later.sub_(first).mul_(motion_scale)
    return out


def add_first(change: torch.Tensor, first_rgb: torch.Tensor, tracks: bool = False,
              motion_scale: float = 1.0) -> torch.Tensor:
    """The inverse of `change_from_first`: a sampled change -> the clip's latents."""
    out = change.clone()
    _rgb_half(out).add_(first_rgb)
    if tracks:
        later, first = _later_points(out)
        later.div_(motion_scale).add_(first)
    return out


def repeat_first_frame(latents: torch.Tensor, first_rgb: torch.Tensor) -> torch.Tensor:
    """A sample that changes nothing (the transformer ablation of issue 45): the given
    image's RGB latent `first_rgb` (B, C, 1, h, w) in every frame, and the sample's own frame
    0 on the pointmap half (frame 0's points are the model's estimate)."""
    out = latents[:, :, :1].expand_as(latents).clone()
    _rgb_half(out).copy_(first_rgb.expand_as(_rgb_half(out)))
    return out
