"""Models shipped inside the repository (issue 13: `models/demo-small/`): a folder with
`manifest.json` (the registry's manifest: every file's path, size and sha256, plus
`weights_dir`, `label`, `description`, `clip`, `training`) next to the k4d-layout model
directory it names. Loading one verifies every listed file's sha256 first, so a damaged or
partly checked-out model (e.g. a Git LFS pointer) is one clear error, never a model that
silently generates garbage.

Which model `k4d simulate` uses without `--model`: `K4D_DEFAULT_MODEL` (a model reference
as `--model` takes, or `static-world`) when set; otherwise models/demo-small when its
manifest says `"default": true` (set by `demo_model.py export --default` once the model is
worth showing); otherwise static-world.
"""

from __future__ import annotations

import json
from pathlib import Path

from k4d.errors import InvalidArgument
from k4d.model_names import STATIC_WORLD
from k4d.settings import current as current_settings
from k4d.tensor_io import sha256_file

MANIFEST = "manifest.json"
DEFAULT_MODEL_ENV = "K4D_DEFAULT_MODEL"


def is_shipped_model(path: Path) -> bool:
    return (path / MANIFEST).is_file() and not (path / "k4d_model.json").exists()


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        manifest["files"], manifest["weights_dir"]  # noqa: B018 (required keys)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument.for_field("--model", f"{path / MANIFEST} is not a model manifest: "
                                                   f"{type(exc).__name__}: {exc}") from None
    return manifest


def verify_shipped_model(path: Path) -> tuple[Path, dict]:
    """Check every file of the manifest (present, size, sha256); returns (the k4d model
    directory to load, the manifest)."""
    manifest = read_manifest(path)
    weights = path / manifest["weights_dir"]
    for entry in manifest["files"]:
        target = weights / entry["path"]
        if not target.is_file():
            raise InvalidArgument.for_field("--model", f"{target} is missing (listed in "
                                                       f"{path / MANIFEST})")
        if target.stat().st_size != entry["size_bytes"] or sha256_file(target) != entry["sha256"]:
            raise InvalidArgument.for_field("--model", f"{target} does not match the sha256 in "
                                                       f"{path / MANIFEST} (damaged or a Git LFS "
                                                       "pointer?)")
    return weights, manifest


# The repository's models/ folder (an editable install, as `make setup` makes).
REPO_MODELS = Path(__file__).resolve().parents[5] / "models"
SHIPPED_DEFAULT = REPO_MODELS / "demo-small"


def default_model(shipped: Path = SHIPPED_DEFAULT) -> str:
    """The model reference `k4d simulate` uses when `--model` is omitted ('' = static-world):
    $K4D_DEFAULT_MODEL when set, else the shipped model when its manifest says
    `"default": true`, else static-world."""
    value = current_settings().models.default_model
    if value:
        return "" if value == STATIC_WORLD else value
    if is_shipped_model(shipped) and read_manifest(shipped).get("default") is True:
        return str(shipped)
    return ""


def shipped_notice(ref: str) -> dict | None:
    """{"label", "description", "manifest"} of a shipped model reference, else None: what
    the terminal, summary.json and the viewer say about the model that made a rollout."""
    if not ref or "://" in ref or not is_shipped_model(Path(ref)):
        return None
    manifest = read_manifest(Path(ref))
    training = manifest.get("training") or {}
    return {"label": str(manifest.get("label", "")),
            "description": str(manifest.get("description", "")),
            "training_step": training.get("step"),
            "manifest": str((Path(ref) / MANIFEST).resolve())}


def heldout_line(shipped: Path = SHIPPED_DEFAULT) -> str:
    """One line of the shipped model's held-out figures (its manifest's `heldout`, written
    by the recipe's `k4d eval run`), the static-world floor's beside each; '' without."""
    if not is_shipped_model(shipped):
        return ""
    manifest = read_manifest(shipped)
    h = manifest.get("heldout")
    if not isinstance(h, dict):
        return ""

    def pair(key: str, fmt: str, unit: str = "") -> str:
        ours, floor = h.get(key), h.get(f"{key}_floor")
        if ours is None:
            return "-"
        text = format(ours, fmt) + unit
        return text + (f" (floor {format(floor, fmt)}{unit})" if floor is not None else "")

    return (f"{manifest.get('name')} {manifest.get('version')} on {h.get('episodes')} held-out "
            f"episodes ({h.get('given', 'first frame RGB')} given): frame 0 "
            f"{pair('frame0_psnr_min', '.1f', ' dB')} worst; generated frames: static region "
            f"{pair('static_psnr', '.1f', ' dB')}, changed-region RGB MSE "
            f"{pair('changed_mse', '.0f')}, robot {pair('robot_psnr', '.1f', ' dB')}, depth AbsRel "
            f"{pair('depth_absrel', '.3f')}, success agreement {pair('success_agreement', '.2f')}"
            f" (models/demo-small/README.md)")
