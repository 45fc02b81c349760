"""Sampling options of a model (issue 44): solver, steps, step caching, quantisation,
compiled blocks, and the named profiles that set them together.

Plain data, no torch: the CLI (`k4d simulate`, `k4d submit`), the front door, the generator
service and the model library all read the same schema.

Layers, each a partial dict of `SAMPLING_KEYS`, resolve in order (`resolve_sampling`):
the model's `k4d_model.json` `sampling` section, then the request (CLI flags or
`SamplingParams`). Inside one layer a `profile` is expanded first and the layer's other keys
override it, so `--profile fast --steps 12` is `fast` with 12 steps. An unset solver or
step count means the model's own scheduler and `num_inference_steps`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass
from typing import Any

from k4d.errors import InvalidArgument

SOLVERS = ("euler", "unipc")
CACHES = ("none", "dbcache", "dbcache-taylorseer")
QUANTS = ("none", "fp8")
PROFILE_REFERENCE = "reference"
PROFILE_FAST = "fast"
SAMPLING_KEYS = ("profile", "solver", "steps", "cache", "cache_threshold", "quant", "compile")
DEFAULT_CACHE_THRESHOLD = 0.08  # cache-dit's DBCache default (residual difference)
MAX_STEPS = 1000

# `reference`: the official sampler (flow-matching Euler, 50 steps, no cache, the loaded
# precision). `fast`: fewer UniPC steps with DBCache + TaylorSeer. Its GPU wall time is
# unmeasured (no GPU in the session that chose it); its drift against `reference` is
# measured on CPU (docs/benchmarks.md, benchmarks/generator/drift.py). FP8 and compiled
# blocks are left out of it so that it runs everywhere; add --quant fp8 --compile on a
# Hopper GPU.
PROFILES: dict[str, dict[str, Any]] = {
    PROFILE_REFERENCE: {"solver": "euler", "steps": 50, "cache": "none", "quant": "none",
                        "compile": False},
    PROFILE_FAST: {"solver": "unipc", "steps": 20, "cache": "dbcache-taylorseer",
                   "cache_threshold": DEFAULT_CACHE_THRESHOLD, "quant": "none",
                   "compile": False},
}


@dataclass(frozen=True)
class SamplingOptions:
    """What one generation samples with, all layers resolved. `solver`/`steps` None: the
    model's scheduler and step count. `profile`: the last profile named by a layer."""

    solver: str | None = None
    steps: int | None = None
    cache: str = "none"
    cache_threshold: float = DEFAULT_CACHE_THRESHOLD
    quant: str = "none"
    compile: bool = False
    profile: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def lossless(self) -> bool:
        """No lever that changes the numbers beyond rounding (compile only)."""
        return self.cache == "none" and self.quant == "none"


def check_sampling(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`values` (a partial layer) checked: InvalidArgument naming the first unknown key or
    bad value (`<prefix>.<key>`, or the bare key without a prefix). Returns `values`."""
    def name(key: str) -> str:
        return f"{prefix}.{key}" if prefix else key

    if not isinstance(values, dict):
        raise InvalidArgument.for_field(prefix or "sampling", "must be an object of "
                                                              f"{', '.join(SAMPLING_KEYS)}")
    unknown = sorted(set(values) - set(SAMPLING_KEYS))
    if unknown:
        raise InvalidArgument.for_field(name(unknown[0]), "is not a sampling option (known: "
                                                          f"{', '.join(SAMPLING_KEYS)})")
    for key, allowed in (("profile", tuple(PROFILES)), ("solver", SOLVERS), ("cache", CACHES),
                         ("quant", QUANTS)):
        if key in values and values[key] not in allowed:
            raise InvalidArgument.for_field(name(key), f"must be one of {'|'.join(allowed)}, "
                                                       f"got {values[key]!r}")
    if "steps" in values:
        steps = values["steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
            raise InvalidArgument.for_field(name("steps"), f"must be an integer in [1, "
                                                           f"{MAX_STEPS}], got {steps!r}")
    if "cache_threshold" in values:
        value = values["cache_threshold"]
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value <= 0):
            raise InvalidArgument.for_field(name("cache_threshold"),
                                            f"must be a finite number > 0, got {value!r}")
    if "compile" in values and not isinstance(values["compile"], bool):
        raise InvalidArgument.for_field(name("compile"), f"must be true or false, got "
                                                         f"{values['compile']!r}")
    return values


def resolve_sampling(*layers: dict[str, Any] | None) -> SamplingOptions:
    """The options of `layers` (lowest priority first; None or {} adds nothing), each
    checked; a layer's profile is expanded under that layer's own keys."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        check_sampling(layer)
        if "profile" in layer:
            merged.update(PROFILES[layer["profile"]], profile=layer["profile"])
        merged.update({k: v for k, v in layer.items() if k != "profile"})
    if "cache_threshold" in merged:
        merged["cache_threshold"] = float(merged["cache_threshold"])
    return SamplingOptions(**merged)


def sampling_layer_from_proto(params, prefix: str = "sampling") -> dict[str, Any]:
    """The request layer of a `kinema4d.v1.SamplingParams` (zero values unset; `compile` is
    proto3 optional, so an explicit false overrides a profile), checked. The older
    `num_steps` / `scheduler` fields are the same settings as `steps` / `solver`: either may
    be set; both set to different values is InvalidArgument."""
    layer: dict[str, Any] = {}
    for key in ("profile", "solver", "cache", "quant"):
        if getattr(params, key):
            layer[key] = getattr(params, key)
    if params.steps:
        layer["steps"] = int(params.steps)
    if params.cache_threshold:
        layer["cache_threshold"] = float(params.cache_threshold)
    if params.HasField("compile"):
        layer["compile"] = bool(params.compile)
    for old, new, value in (("num_steps", "steps", int(params.num_steps)),
                            ("scheduler", "solver", params.scheduler)):
        if not value:
            continue
        if new in layer and layer[new] != value:
            raise InvalidArgument.for_field(f"{prefix}.{new}", f"is {layer[new]!r} but "
                                                               f"{prefix}.{old} is {value!r}; "
                                                               "set one")
        layer[new] = value
    return check_sampling(layer, prefix)


def add_sampling_flags(parser) -> None:
    """The sampling flags of `k4d simulate` / `k4d submit` (argparse). Unset flags are None,
    so a model's or profile's value stands (`sampling_layer_from_flags`)."""
    parser.add_argument("--profile", default=None, help="named sampling options: "
                        f"{'|'.join(PROFILES)} (docs/generator.md); flags beside it override it")
    parser.add_argument("--solver", default=None, help=f"{'|'.join(SOLVERS)} "
                                                       "(default: the model's scheduler)")
    parser.add_argument("--cache", default=None, help=f"step caching through cache-dit: "
                                                      f"{'|'.join(CACHES)} (default none)")
    parser.add_argument("--cache-threshold", type=float, default=None,
                        help=f"DBCache residual threshold (default {DEFAULT_CACHE_THRESHOLD}; "
                             "larger caches more steps and drifts more)")
    parser.add_argument("--quant", default=None, help=f"{'|'.join(QUANTS)}: fp8 needs a Hopper "
                                                      "or newer GPU (refused elsewhere)")
    parser.add_argument("--compile", default=None, action=argparse.BooleanOptionalAction,
                        help="torch.compile each transformer block (--no-compile turns a "
                             "profile's off)")


def sampling_layer_from_flags(args) -> dict[str, Any]:
    """The request layer of parsed flags (`add_sampling_flags`, and `--steps` > 0), checked
    with the flags' names in the errors (`--solver`)."""
    layer: dict[str, Any] = {}
    for key in ("profile", "solver", "cache", "cache_threshold", "quant", "compile"):
        value = getattr(args, key, None)
        if value is not None:
            layer[key] = value
    if getattr(args, "steps", 0):
        layer["steps"] = args.steps
    try:
        return check_sampling(layer)
    except InvalidArgument as exc:
        field = exc.violations[0].field if exc.violations else ""
        raise InvalidArgument.for_field("--" + field.replace("_", "-"),
                                        exc.violations[0].description) from None


def sampling_params_fields(layer: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `SamplingParams` for a request layer (the inverse of
    `sampling_layer_from_proto`)."""
    return {key: value for key, value in layer.items() if key in SAMPLING_KEYS}

