"""The model `k4d up` serves by default: the embedded runner owns which model `k4d simulate`
runs without `--model` (`k4d_embedded.shipped`), and `k4d up` publishes that model into its
cluster's registry through this hook (entry point group `k4d.up`, name `default_model`), so
that the runtime's `k4d up` imports no model library (docs/adr/023). Its own module because
the registry imports torch: only `k4d up` loads it, never `k4d simulate --help`."""

from __future__ import annotations

from pathlib import Path

from k4d.errors import FailedPrecondition
from k4d.model_names import STATIC_WORLD
from k4d.settings import current as current_settings
from k4d_model import registry

from k4d_embedded.shipped import (
    DEFAULT_MODEL_ENV,
    MANIFEST,
    SHIPPED_DEFAULT,
    default_model,
    is_shipped_model,
    read_manifest,
)


def publish_default_model(store) -> tuple[str, str]:
    """`k4d up`'s default model (entry point `default_model` of group `k4d.up`): publish the
    model `k4d simulate` runs without `--model` into the cluster's registry (`store`), so that
    `k4d submit` without `--model` runs the same one. Returns (the reference the simulator
    fills into specs without a model, what happened), or ("", why not).

    $K4D_DEFAULT_MODEL when set (`static-world`; a registry reference, published by whoever
    named it; a shipped-model folder), else the shipped default (`default_model`)."""
    chosen = current_settings().models.default_model
    if chosen == STATIC_WORLD:
        return "", f"{DEFAULT_MODEL_ENV}={STATIC_WORLD}"
    if chosen and not Path(chosen).is_dir():
        return chosen, "given"
    ref = default_model()  # the folder named, else the shipped default
    if not ref:
        return "", f"no shipped default model ({SHIPPED_DEFAULT / MANIFEST})"
    folder = Path(ref)
    if not is_shipped_model(folder):
        return "", f"{folder} is not a shipped model folder ({MANIFEST})"
    manifest = read_manifest(folder)
    name, version, weights = manifest["name"], manifest["version"], folder / manifest["weights_dir"]
    # The registry's manifest of the same files must list the shipped sha256s: a damaged or
    # partly checked-out model (a Git LFS pointer) is refused, not served.
    if registry.build_manifest(weights, name, version)["files"] != manifest["files"]:
        raise FailedPrecondition(f"{weights} does not match {folder / MANIFEST} (damaged or a "
                                 "Git LFS pointer?)")
    registry.publish(store, weights, name, version)
    return f"registry:{name}/{version}", "published"
