"""TrainingJobSpec -> the run's recipe config, validated at the boundary.

Every bad field is reported at once (one InvalidArgument with a violation per field) with
the field's path in the request (`spec.learning_rate`, `spec.recipe_json.optim.lr`). Zero
values of the proto mean "the recipe's default". String lengths are bounded so a request
can never make the trainer store or log megabytes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from k4d.errors import FieldViolation, InvalidArgument
from k4d.limits import MAX_COMPONENT_BYTES, MAX_NAME_CHARS, MAX_URI_CHARS
from kinema4d.v1 import trainer_pb2

RECIPES = ("finetune-lora", "from-scratch")
DEFAULT_RECIPE = "finetune-lora"
VARIANTS = ("act", "pmcond")
SHARDINGS = ("ddp", "fsdp2")
MAX_RECIPE_JSON_BYTES = 64 * 1024
MAX_IDEMPOTENCY_KEY_CHARS = MAX_NAME_CHARS
MAX_STEPS = 10_000_000
MAX_WORLD_SIZE = 1024
MAX_LORA_RANK = 1024
# Registry names and versions (k4d_model.registry): 1-100 safe characters.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class RunPlan:
    """What the launcher needs: the validated recipe config (as the dict written to the
    run's config file) and the process count."""

    config: dict
    nproc: int

    @property
    def steps(self) -> int:
        return self.config["training"]["steps"]

    @property
    def data_uri(self) -> str:
        return self.config["data"]["uri"]


class _Violations:
    def __init__(self):
        self.items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.items.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self.items:
            summary = "; ".join(f"{v.field}: {v.description}" for v in self.items[:5])
            raise InvalidArgument(f"invalid training job spec: {summary}", self.items)


def _check_uri(v: _Violations, field: str, value: str, required: bool) -> None:
    if not value:
        if required:
            v.add(field, "required (s3://bucket/prefix or file:///path)")
        return
    if len(value) > MAX_URI_CHARS:
        v.add(field, f"at most {MAX_URI_CHARS} characters")
    elif not (value.startswith("s3://") and len(value) > 5 or value.startswith("file:///")):
        v.add(field, f"expected s3://bucket/prefix or file:///path, got {value[:80]!r}")
    elif any(ord(c) < 32 for c in value):
        v.add(field, "control characters are not allowed")
    elif any(len(c.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES for c in value.split("/")):
        v.add(field, f"a path component is longer than {MAX_COMPONENT_BYTES} bytes")
    elif any(c in (".", "..") for c in value.split("://", 1)[1].split("/")):
        v.add(field, "'.' and '..' path components are not allowed")


def _check_name(v: _Violations, field: str, value: str, required: bool) -> None:
    if not value:
        if required:
            v.add(field, "required")
    elif not NAME.match(value):
        v.add(field, f"{value[:80]!r} must match {NAME.pattern}")


def _check_number(v: _Violations, field: str, value: float, low: float, high: float,
                  low_inclusive: bool = False) -> None:
    if value == 0:
        return  # the recipe's default
    ok = math.isfinite(value) and (value >= low if low_inclusive else value > low) and value <= high
    if not ok:
        v.add(field, f"must be {'>=' if low_inclusive else '>'} {low:g} and <= {high:g} "
                     f"(0 = the recipe's default), got {value!r}")


def _recipe_overrides(v: _Violations, text: str) -> dict:
    if not text:
        return {}
    if len(text.encode()) > MAX_RECIPE_JSON_BYTES:
        v.add("spec.recipe_json", f"at most {MAX_RECIPE_JSON_BYTES} bytes")
        return {}
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        v.add("spec.recipe_json", f"not valid JSON: {str(exc)[:200]}")
        return {}
    if not isinstance(value, dict):
        v.add("spec.recipe_json", "must be a JSON object of recipe settings")
        return {}
    return value


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def validate_spec(spec: trainer_pb2.TrainingJobSpec) -> RunPlan:
    """The run plan of a valid spec; InvalidArgument naming every bad field otherwise."""
    v = _Violations()
    recipe = spec.recipe or DEFAULT_RECIPE
    if recipe not in RECIPES:
        v.add("spec.recipe", f"one of {', '.join(RECIPES)}, got {spec.recipe[:80]!r}")
    base = spec.base_model
    _check_name(v, "spec.base_model.name", base.name, required=False)
    if base.version and not NAME.match(base.version):
        v.add("spec.base_model.version", f"{base.version[:80]!r} must match {NAME.pattern}")
    _check_uri(v, "spec.base_model.uri", base.uri, required=False)
    _check_uri(v, "spec.dataset_uri", spec.dataset_uri, required=True)
    _check_name(v, "spec.output_model_name", spec.output_model_name, required=True)
    if spec.variant and spec.variant not in VARIANTS:
        v.add("spec.variant", f"one of {', '.join(VARIANTS)}, got {spec.variant[:80]!r}")
    if spec.num_steps > MAX_STEPS:
        v.add("spec.num_steps", f"at most {MAX_STEPS}, got {spec.num_steps}")
    _check_number(v, "spec.learning_rate", spec.learning_rate, 0.0, 1.0)
    _check_number(v, "spec.weight_decay", spec.weight_decay, 0.0, 1.0, low_inclusive=True)
    if spec.lora_rank > MAX_LORA_RANK:
        v.add("spec.lora_rank", f"at most {MAX_LORA_RANK}, got {spec.lora_rank}")
    _check_number(v, "spec.lora_alpha", spec.lora_alpha, 0.0, 1e4)
    if spec.world_size > MAX_WORLD_SIZE:
        v.add("spec.world_size", f"at most {MAX_WORLD_SIZE}, got {spec.world_size}")
    if spec.sharding and spec.sharding not in SHARDINGS:
        v.add("spec.sharding", f"one of {', '.join(SHARDINGS)}, got {spec.sharding[:80]!r}")
    overrides = _recipe_overrides(v, spec.recipe_json)
    v.raise_if_any()
    config = _validated_config(_config(spec, recipe, overrides))
    return RunPlan(config=config, nproc=spec.world_size or 1)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def _config(spec: trainer_pb2.TrainingJobSpec, recipe: str, overrides: dict) -> dict:
    """The recipe config document: recipe_json first, the typed spec fields over it (zero
    fields leave the recipe's value). Runs managed by the trainer service report through
    it, so the run's own bus events and progress bar are off unless recipe_json asks."""
    typed: dict = {"recipe": recipe, "model": {}, "data": {"uri": spec.dataset_uri},
                   "training": {}, "publish": {"name": spec.output_model_name}}
    base = spec.base_model
    if base.uri or base.name:
        typed["model"]["base"] = base.uri or (
            f"registry:{base.name}" + (f"/{base.version}" if base.version else ""))
    for proto_field, section, key in _TYPED_FIELDS:
        value = getattr(spec, proto_field)
        if value:
            typed[section][key] = value
    if spec.sharding:
        typed["parallelism"] = ({"dp_replicate": -1, "dp_shard": 1} if spec.sharding == "ddp"
                                else {"dp_replicate": 1, "dp_shard": -1})
    quiet = {"observability": {"bus_events": False, "progress_bar": False}}
    return _deep_merge(_deep_merge(quiet, overrides), typed)


# (TrainingJobSpec field, config section, config key); zero = the recipe's value.
_TYPED_FIELDS = (("variant", "model", "variant"), ("lora_rank", "model", "lora_rank"),
                 ("lora_alpha", "model", "lora_alpha"), ("num_steps", "training", "steps"),
                 ("learning_rate", "training", "lr"),
                 ("weight_decay", "training", "weight_decay"))
# Recipe config field -> the request field a violation is reported on.
_SPEC_FIELD = {"recipe": "spec.recipe", "model.base": "spec.base_model",
               "model.kinema4d": "spec.base_model", "model.variant": "spec.variant",
               "model.lora_rank": "spec.lora_rank", "model.lora_alpha": "spec.lora_alpha",
               "data.uri": "spec.dataset_uri", "training.steps": "spec.num_steps",
               "training.lr": "spec.learning_rate", "training.weight_decay": "spec.weight_decay",
               "publish.name": "spec.output_model_name"}


def _validated_config(document: dict) -> dict:
    """The document through the training program's own schema (k4d_trainer.config), its
    violations renamed to the request's fields (recipe_json ones keep their path)."""
    from k4d_trainer.config import config_from_dict

    try:
        return config_from_dict(document).to_dict()
    except InvalidArgument as exc:
        violations = [FieldViolation(_SPEC_FIELD.get(x.field, f"spec.recipe_json.{x.field}"),
                                     x.description) for x in exc.violations]
        raise InvalidArgument(f"invalid training job spec: {exc}", violations) from None
