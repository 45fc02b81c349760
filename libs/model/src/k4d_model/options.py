"""A model's output options: the schema of `k4d_model.json` `extra`, defined once.

Plain Python, no torch: the trainer's control plane validates recipes with it, and
`import k4d_model.options` imports neither torch nor diffusers (libs/model/tests/
test_model_options.py). The array work of the options is `k4d_model.fidelity`.

`FidelityOptions` are a model's output options (`k4d_model.json` under `extra`; the
official checkpoints have none of these keys and sample exactly as before). They keep what
the model was given: the first frame is an observation, and where nothing changes the output
is the input, not a VAE reconstruction of it:

  first_frame        "given": frame 0 of the output is the input image (and the input
                     pointmap when one is given), not the decoder's reconstruction of it.
  latent_anchor      true: the RGB half of latent frame 0 is held at the clean encoding of
                     the input image through sampling (noised to each step's sigma), as
                     image-to-video models keep their conditioning frame.
  decode             "relative": frame t = x_0 + D(z)_t - R_t, where R_t is the decoder's
                     output for a world in which nothing changed (RGB: the decode of the
                     encoded static clip of the input image; pointmap: the model's own frame
                     0, which it had to guess when no pointmap was given). VAE error then
                     cancels where the scene is the same as in frame 0.
                     "composite": inside the change mask the generated pixels D(z)_t, outside
                     it x_0 (generated pixels composited over the input's).
                     "input": the transformer's frames are not shown. Frame t starts as the
                     input image and frame 0's points, with the robot condition's render and
                     points where the robot is; the options below (the refiner's change, the
                     robot's colours, the uncovered fill) draw the world's change over it.
                     The pipeline then does not sample at all, unless frame 0's points are
                     unknown (no initial pointmap, or one with holes, and no
                     `refiner_first_depth` estimate): then the transformer is sampled for
                     its frame-0 points only. Whatever moves then comes from the refiner,
                     which never sees a sample: not a world model's mode (the shipped model
                     decodes "relative").
  change_threshold   with "relative" or "composite": a pixel keeps x_0 exactly unless its
                     decoded change D(z)_t - R_t exceeds this many RGB levels (0-255) or
                     `change_depth_m` metres of depth (0: RGB alone decides; a model's own
                     depth flickers more than its colour), or the robot covers it now or in frame
                     0; the mask is grown by `change_dilate` pixels.
  change_ramp        with "composite": > 0 fades from x_0 to the generated pixel as the
                     decoded change rises from `change_threshold` to `change_threshold` +
                     this many levels, instead of switching at the threshold (a small
                     generated change is partly shown, not dropped).
  robot_pointmap     "kinematics": the robot's pixels take the robot condition's points,
                     which kinematics gives exactly.
  robot_rgb          "calibrated": the robot's pixels (t >= 1) show the robot condition's
                     render recoloured to the input image: a per-channel quadratic of the
                     render's colours fitted by least squares on frame 0's robot pixels, where
                     the input shows the robot (the render's shading is the projection
                     stage's, not the scene's lights). Too few robot pixels in frame 0 to fit:
                     the generated pixels stay.
                     "shaded": as "calibrated", and the fit also takes the second-order
                     spherical harmonics of the robot surface's normal (from the robot
                     condition's points), so each link is shaded by where it faces the
                     scene's lights in every pose; the colour fit alone with fewer than 64
                     robot pixels in frame 0.
  refiner            "change": where the model's change refiner (refiner/ in the model
                     directory, k4d_model.refiner) gives a pixel of frame t >= 1 a change
                     probability p above `refiner_threshold`, the output shows the input plus
                     p^`refiner_power` times the refiner's predicted change of colour there
                     (power 1: the expected pixel; higher: less of an unsure change), over
                     what the options above made of it. The refiner works at the image's full resolution from
                     the given image and the robot condition: what moves near the robot (the
                     robot's shadow, an object it pushes or lifts) is a few pixels wide, below
                     the latent grid the transformer generates on. A model that sets this
                     without a refiner/ directory is refused at load.
  refiner_threshold  the probability above which the refiner's pixels are shown (default
                     0.5).
  refiner_power      the power of p that weights the refiner's change (default 1).
  refiner_pointmap   "change": where the refiner's change probability exceeds
                     `refiner_pointmap_threshold` (default 0.5), the point of frame t >= 1 is
                     frame 0's point moved along its camera ray by the refiner's predicted
                     change of depth (an object lifted, pushed or set down), over what the
                     options above made of it; the robot's own points still come from
                     `robot_pointmap`. Needs a refiner with a depth head (refiner/config.json
                     "depth": true); a model that sets it without one is refused at load.
                     "drawn": the same, where the probability of the network that draws the
                     colour exceeds the threshold (with a separate geometry network, the
                     colour network's, not the geometry network's own): the points follow
                     the change the output shows, so an object drawn in a new place stands
                     there in the pointmap too.
  refiner_first_depth
                     "estimated": a rollout given an RGB image alone (no initial pointmap)
                     takes the refiner's estimate of frame 0's depth as its initial pointmap,
                     along the rays of the camera fitted on the robot condition's points
                     (which kinematics and projection ray-cast through the real camera); the
                     model's own frame-0 pointmap only where no camera can be fitted (fewer
                     than 16 robot pixels). Needs a refiner with a first-depth head
                     ("first_depth": true). Given an initial pointmap, the rollout uses it.
  cascade            "sample": with `decode: relative`, the model's sample refiner (cascade/ in
                     the model directory, k4d_model.cascade) redraws frames t >= 1 from the
                     given image and the decoded sample alone (its colour change, its
                     pointmap change and its frame-0 points): a learned cascade stage that
                     sharpens what the transformer drew and removes its grain where nothing
                     moved. It never reads the robot condition, so what moves still comes
                     from the sample. "colour": the refiner's colour, and the points of
                     `decode: relative` (the sample's own point change). "sample-given-depth":
                     the refiner's colour, and its points where frame 0's depth is given (an
                     RGB-D observation: `initial_pointmap`), the relative decoding's elsewhere
                     (measured: the refiner's point change is the better one on known points,
                     the relative decoding's on points the model estimated itself). A model
                     that sets it without a cascade/ directory is refused at load. On a
                     `latent_target: tracks` model the refiner reads its frames (frame 0
                     carried along the sampled motion) as the sample, and redraws their
                     colour; "the relative decoding's" points are then the carried ones.
  uncovered          "filled": pixels the robot covered in frame 0 and has left by frame t show
                     the input image filled in over frame 0's robot from the pixels around it
                     (rings from the outside in, then Laplace smoothing). What was behind the
                     robot was never observed: a smooth fill of its surroundings, instead of the
                     model's guess, which a weak model draws as a ghost of the robot.
  uncovered_pointmap "filled": the same pixels' points are what lies behind frame 0's robot,
                     filled in from the points around it: the inverse depth (linear in the
                     pixel coordinates on a plane, so a table or floor behind the robot is
                     filled exactly) rings from the outside in, then Laplace smoothing, along
                     each pixel's camera ray. Otherwise they keep frame 0's robot points: a
                     ghost of the robot in the pointmap.
  motion_samples     (`latent_target: tracks` only; default 1) K: the transformer draws K
                     independent samples of the scene motion (seeded as a rollout seeds them)
                     and frame 0 is carried along their mean, the network's estimate of the
                     expected motion. The motion it is unsure of (noise on still surfaces)
                     averages out; each pixel is still carried whole, never blended, so a
                     moved object keeps frame 0's look. Costs K samples a rollout.
  motion_decoder     (`latent_target: tracks` only) "learned": the model's motion decoder
                     (motion_decoder/ in the model directory, k4d_model.motion_decoder)
                     redraws the decoded motion and frame 0's points at full resolution from
                     them and the given image before frame 0 is carried along it (and before
                     the sample refiner, `cascade`, reads the frames). A model that sets it
                     without a motion_decoder/ directory is refused at load.

No option says where an object is, whether a grasp holds or where a pushed or released object
goes: a network decides each (shared/DESIGN.md, "What a model may do"). The hand-written
tabletop priors that once did (rigid grasp, quasi-static push, settle, plane snapping,
object finding by colour) were removed with ADR 020; `check_model_extra` refuses their keys
like any unknown key.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from k4d.errors import InvalidArgument

FIDELITY_KEYS = ("first_frame", "latent_anchor", "decode", "change_threshold",
                 "change_depth_m", "change_dilate", "change_ramp", "robot_pointmap",
                 "robot_rgb", "uncovered", "refiner", "refiner_threshold", "refiner_power",
                 "refiner_pointmap", "refiner_pointmap_threshold", "refiner_first_depth",
                 "uncovered_pointmap", "cascade", "motion_samples", "motion_decoder")
FIRST_FRAME_GIVEN = "given"
DECODE_RELATIVE = "relative"
DECODE_COMPOSITE = "composite"
DECODE_INPUT = "input"
ROBOT_POINTMAP_KINEMATICS = "kinematics"
ROBOT_RGB_CALIBRATED = "calibrated"
ROBOT_RGB_SHADED = "shaded"
UNCOVERED_FILLED = "filled"
REFINER_CHANGE = "change"
REFINER_DRAWN = "drawn"
REFINER_FIRST_DEPTH_ESTIMATED = "estimated"
# The output option that reads the sample refiner (k4d_model.cascade), and its values.
CASCADE_KEY = "cascade"
CASCADE_SAMPLE = "sample"
CASCADE_COLOUR = "colour"
CASCADE_SAMPLE_GIVEN_DEPTH = "sample-given-depth"
# The most independent samples a sample refiner may read (k4d_model.cascade.CascadeConfig;
# here, beside the options, so that the trainer's torch-free config can check it)
MAX_CASCADE_SAMPLES = 8
# The output option that averages independent samples of a tracks model's motion (at most
# MAX_CASCADE_SAMPLES of them)
MOTION_SAMPLES_KEY = "motion_samples"
# The output option that reads a tracks model's motion decoder (k4d_model.motion_decoder)
MOTION_DECODER_KEY = "motion_decoder"
MOTION_DECODER_LEARNED = "learned"


_CHOICES = {"first_frame": ("", FIRST_FRAME_GIVEN),
            "decode": ("", DECODE_RELATIVE, DECODE_COMPOSITE, DECODE_INPUT),
            "robot_pointmap": ("", ROBOT_POINTMAP_KINEMATICS),
            "robot_rgb": ("", ROBOT_RGB_CALIBRATED, ROBOT_RGB_SHADED),
            "uncovered": ("", UNCOVERED_FILLED),
            "uncovered_pointmap": ("", UNCOVERED_FILLED),
            "refiner": ("", REFINER_CHANGE),
            "refiner_pointmap": ("", REFINER_CHANGE, REFINER_DRAWN),
            "refiner_first_depth": ("", REFINER_FIRST_DEPTH_ESTIMATED),
            "cascade": ("", CASCADE_SAMPLE, CASCADE_COLOUR, CASCADE_SAMPLE_GIVEN_DEPTH),
            "motion_decoder": ("", MOTION_DECODER_LEARNED)}
# ModelInfo.extra keys of a model directory's k4d_model.json beside the output options:
# VAE_DECODE_KEY = VAE_DECODE_SPLIT decodes the RGB and pointmap halves apart.
VAE_DECODE_KEY = "vae_decode"
VAE_DECODE_SPLIT = "split"
# LATENT_TARGET_KEY: what the transformer samples, the clip's latents ("absolute", the
# official objective), their change from frame 0's ("change", k4d_model.latent_target), or
# that change on the RGB half and on the pointmap half where each pixel's surface of frame 0
# is at frame 0, then its motion from there ("tracks"): frames t >= 1 are then frame 0
# carried along that motion (k4d_model.tracks).
LATENT_TARGET_KEY = "latent_target"
LATENT_TARGET_TRACKS = "tracks"
LATENT_TARGETS = ("absolute", "change", LATENT_TARGET_TRACKS)
# MOTION_SCALE_KEY (tracks only, default 1): the factor the pointmap half's motion is
# sampled at (k4d_model.latent_target): a number > 0 the trainer's `training.motion_scale`
# records; the pipeline divides the sampled motion by it.
MOTION_SCALE_KEY = "motion_scale"
# GUIDANCE_NEGATIVE_KEY: what guidance (guidance_scale > 1) samples against when a request
# gives no negative robot condition. "same" (the official setting): the robot condition
# itself, so both passes agree and one runs. "no-robot": a scene with no robot in view
# (RobotCondition.empty), which a transformer trained with `training.condition_dropout` saw
# in place of the robot; guidance then pushes the sample towards what this robot's motion
# changes.
GUIDANCE_NEGATIVE_KEY = "guidance_negative"
GUIDANCE_NEGATIVE_SAME = "same"
GUIDANCE_NEGATIVE_NO_ROBOT = "no-robot"
GUIDANCE_NEGATIVES = (GUIDANCE_NEGATIVE_SAME, GUIDANCE_NEGATIVE_NO_ROBOT)
# GUIDANCE_HALVES_KEY: which halves of the latent (RGB | pointmap, side by side) guidance
# pushes. "both" (the official setting) or "rgb": the pointmap half takes the conditional
# pass's velocity, so guidance that draws more of a moved object's colour leaves its
# geometry as the robot-conditioned model predicts it.
GUIDANCE_HALVES_KEY = "guidance_halves"
GUIDANCE_HALVES_BOTH = "both"
GUIDANCE_HALVES_RGB = "rgb"
GUIDANCE_HALVES = (GUIDANCE_HALVES_BOTH, GUIDANCE_HALVES_RGB)
_MODEL_KEYS = (VAE_DECODE_KEY, LATENT_TARGET_KEY, MOTION_SCALE_KEY, GUIDANCE_NEGATIVE_KEY,
               GUIDANCE_HALVES_KEY)
# Output options a `tracks` model refuses (and `decode: input`): each redraws frames t >= 1
# from something else. (`cascade` it takes: the sample refiner reads its frames, frame 0
# carried along the sampled motion, Kinema4DPipeline.refiner_input.)
_NOT_WITH_TRACKS = ("refiner", "refiner_pointmap")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_model_extra(extra: Any, prefix: str = "extra") -> dict[str, Any]:
    """A model's `extra` (k4d_model.json), checked as a typed schema: the output options
    (`FidelityOptions.check`), `vae_decode`, `latent_target`, `motion_scale`,
    `guidance_negative` and `guidance_halves`; anything else is refused with one line naming
    the key. Returns `extra`."""
    if not isinstance(extra, dict):
        raise InvalidArgument.for_field(prefix, f"must be an object, got {type(extra).__name__}")
    options = {k: v for k, v in extra.items() if k not in _MODEL_KEYS}
    if extra.get(VAE_DECODE_KEY, VAE_DECODE_SPLIT) != VAE_DECODE_SPLIT:
        raise InvalidArgument.for_field(f"{prefix}.{VAE_DECODE_KEY}",
                                        f"must be {VAE_DECODE_SPLIT!r}, got {extra[VAE_DECODE_KEY]!r}")
    if extra.get(LATENT_TARGET_KEY, LATENT_TARGETS[0]) not in LATENT_TARGETS:
        raise InvalidArgument.for_field(f"{prefix}.{LATENT_TARGET_KEY}",
                                        f"must be one of {LATENT_TARGETS}, got {extra[LATENT_TARGET_KEY]!r}")
    _check_motion_scale(extra, prefix)
    if extra.get(GUIDANCE_NEGATIVE_KEY, GUIDANCE_NEGATIVE_SAME) not in GUIDANCE_NEGATIVES:
        raise InvalidArgument.for_field(f"{prefix}.{GUIDANCE_NEGATIVE_KEY}",
                                        f"must be one of {GUIDANCE_NEGATIVES}, got "
                                        f"{extra[GUIDANCE_NEGATIVE_KEY]!r}")
    if extra.get(GUIDANCE_HALVES_KEY, GUIDANCE_HALVES_BOTH) not in GUIDANCE_HALVES:
        raise InvalidArgument.for_field(f"{prefix}.{GUIDANCE_HALVES_KEY}",
                                        f"must be one of {GUIDANCE_HALVES}, got "
                                        f"{extra[GUIDANCE_HALVES_KEY]!r}")
    FidelityOptions.check(options, prefix)
    if extra.get(LATENT_TARGET_KEY) == LATENT_TARGET_TRACKS:
        _check_tracks_options(options, prefix)
    elif options.get(MOTION_SAMPLES_KEY, 1) != 1:
        raise InvalidArgument.for_field(f"{prefix}.{MOTION_SAMPLES_KEY}",
                                        f"needs {LATENT_TARGET_KEY} {LATENT_TARGET_TRACKS!r} "
                                        "(only a sampled motion is averaged)")
    elif options.get(MOTION_DECODER_KEY):
        raise InvalidArgument.for_field(f"{prefix}.{MOTION_DECODER_KEY}",
                                        f"needs {LATENT_TARGET_KEY} {LATENT_TARGET_TRACKS!r} "
                                        "(only a sampled motion is redrawn)")
    return extra


def _check_motion_scale(extra: dict[str, Any], prefix: str) -> None:
    if MOTION_SCALE_KEY not in extra:
        return
    scale = extra[MOTION_SCALE_KEY]
    if not _is_number(scale) or scale <= 0:
        raise InvalidArgument.for_field(f"{prefix}.{MOTION_SCALE_KEY}",
                                        f"must be a finite number > 0, got {scale!r}")
    if extra.get(LATENT_TARGET_KEY) != LATENT_TARGET_TRACKS:
        raise InvalidArgument.for_field(f"{prefix}.{MOTION_SCALE_KEY}",
                                        f"needs {LATENT_TARGET_KEY} {LATENT_TARGET_TRACKS!r} "
                                        "(only the tracks' motion is scaled)")


def _check_tracks_options(options: dict[str, Any], prefix: str) -> None:
    """A `tracks` model's frames are frame 0 carried along the sampled motion
    (k4d_model.tracks): an option that redraws them from something else is refused."""
    redraws = [key for key in _NOT_WITH_TRACKS if options.get(key)]
    if options.get("decode") == DECODE_INPUT:
        redraws.append("decode")
    if redraws:
        raise InvalidArgument.for_field(
            f"{prefix}.{redraws[0]}", f"must be unset with {LATENT_TARGET_KEY} "
                                      f"{LATENT_TARGET_TRACKS!r}: its frames are frame 0 "
                                      "carried along the sampled motion (k4d_model.tracks)")
    if options.get(CASCADE_KEY) and options.get(MOTION_SAMPLES_KEY, 1) != 1:
        raise InvalidArgument.for_field(
            f"{prefix}.{MOTION_SAMPLES_KEY}", "must be 1 with a sample refiner (`cascade`): "
                                              "the refiner reads the samples its own config "
                                              "names (cascade/config.json `samples`)")


@dataclass(frozen=True)
class FidelityOptions:
    """The `k4d_model.json` `extra` keys above, with their meaning when absent."""

    first_frame: str = ""
    latent_anchor: bool = False
    decode: str = ""
    change_threshold: float = 0.0
    change_depth_m: float = 0.02
    change_dilate: int = 1
    change_ramp: float = 0.0
    robot_pointmap: str = ""
    robot_rgb: str = ""
    uncovered: str = ""
    refiner: str = ""
    refiner_threshold: float = 0.5
    refiner_power: float = 1.0
    refiner_pointmap: str = ""
    refiner_pointmap_threshold: float = 0.5
    refiner_first_depth: str = ""
    uncovered_pointmap: str = ""
    cascade: str = ""
    motion_samples: int = 1
    motion_decoder: str = ""

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None) -> FidelityOptions:
        extra = extra or {}
        return cls(first_frame=str(extra.get("first_frame", "")),
                   latent_anchor=bool(extra.get("latent_anchor", False)),
                   decode=str(extra.get("decode", "")),
                   change_threshold=float(extra.get("change_threshold", 0.0)),
                   change_depth_m=float(extra.get("change_depth_m", 0.02)),
                   change_dilate=int(extra.get("change_dilate", 1)),
                   change_ramp=float(extra.get("change_ramp", 0.0)),
                   robot_pointmap=str(extra.get("robot_pointmap", "")),
                   robot_rgb=str(extra.get("robot_rgb", "")),
                   uncovered=str(extra.get("uncovered", "")),
                   refiner=str(extra.get("refiner", "")),
                   refiner_threshold=float(extra.get("refiner_threshold", 0.5)),
                   refiner_power=float(extra.get("refiner_power", 1.0)),
                   refiner_pointmap=str(extra.get("refiner_pointmap", "")),
                   refiner_pointmap_threshold=float(extra.get("refiner_pointmap_threshold",
                                                              0.5)),
                   refiner_first_depth=str(extra.get("refiner_first_depth", "")),
                   uncovered_pointmap=str(extra.get("uncovered_pointmap", "")),
                   cascade=str(extra.get(CASCADE_KEY, "")),
                   motion_samples=int(extra.get(MOTION_SAMPLES_KEY, 1)),
                   motion_decoder=str(extra.get(MOTION_DECODER_KEY, "")))

    @classmethod
    def check(cls, extra: dict[str, Any], prefix: str = "extra") -> FidelityOptions:
        """The options of `extra`, or InvalidArgument naming the first bad key: one that is
        not an option (`FIDELITY_KEYS`), a value of the wrong type or out of range."""
        unknown = sorted(set(extra) - set(FIDELITY_KEYS))
        if unknown:
            raise InvalidArgument.for_field(f"{prefix}.{unknown[0]}",
                                            "is not an output option (known: "
                                            f"{', '.join(FIDELITY_KEYS)})")
        for key, allowed in _CHOICES.items():
            if key in extra and extra[key] not in allowed:
                raise InvalidArgument.for_field(f"{prefix}.{key}",
                                                f"must be one of {allowed}, got {extra[key]!r}")
        for key in ("change_threshold", "change_depth_m", "change_dilate", "change_ramp"):
            value = extra.get(key, 0)
            if not _is_number(value) or value < 0:
                raise InvalidArgument.for_field(f"{prefix}.{key}", f"must be a number >= 0, got {value!r}")
        if "change_dilate" in extra and not isinstance(extra["change_dilate"], int):
            raise InvalidArgument.for_field(f"{prefix}.change_dilate",
                                            f"must be a whole number, got {extra['change_dilate']!r}")
        for key in ("refiner_threshold", "refiner_pointmap_threshold"):
            threshold = extra.get(key, 0.5)
            if not _is_number(threshold) or not 0 <= threshold < 1:
                raise InvalidArgument.for_field(f"{prefix}.{key}", f"must be in [0, 1), got {threshold!r}")
        power = extra.get("refiner_power", 1.0)
        if not _is_number(power) or not 0 < power <= 8:
            raise InvalidArgument.for_field(f"{prefix}.refiner_power", f"must be in (0, 8], got {power!r}")
        if not isinstance(extra.get("latent_anchor", False), bool):
            raise InvalidArgument.for_field(f"{prefix}.latent_anchor",
                                            f"must be true or false, got {extra['latent_anchor']!r}")
        samples = extra.get(MOTION_SAMPLES_KEY, 1)
        if (not isinstance(samples, int) or isinstance(samples, bool)
                or not 1 <= samples <= MAX_CASCADE_SAMPLES):
            raise InvalidArgument.for_field(f"{prefix}.{MOTION_SAMPLES_KEY}",
                                            f"must be a whole number in 1..{MAX_CASCADE_SAMPLES}, "
                                            f"got {samples!r}")
        if extra.get(CASCADE_KEY) and extra.get("decode") != DECODE_RELATIVE:
            raise InvalidArgument.for_field(f"{prefix}.cascade",
                                            f"needs decode {DECODE_RELATIVE!r}, got "
                                            f"{extra.get('decode', '')!r}")
        return cls.from_extra(extra)

    @property
    def relative(self) -> bool:
        return self.decode == DECODE_RELATIVE

    @property
    def against_input(self) -> bool:
        """Whether the output is built against the input (relative or composite)."""
        return self.decode in (DECODE_RELATIVE, DECODE_COMPOSITE)

    @property
    def input_only(self) -> bool:
        """Whether the output starts from the input, without the transformer's frames."""
        return self.decode == DECODE_INPUT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
