"""Publishing a finished run through the generator's registry.

The model directory is our layout (`k4d_model.checkpoints.save_k4d`: transformer with
the trained Kinema4D parameters, VAE, CLIP, scheduler; the LoRA unfused under lora/ with
scale alpha/r, which is exactly the trainer's peft scaling). LoRA recipes add the official
layout under official/kinema4d/: `added_weights.safetensors` + `pytorch_lora_weights.
safetensors` readable by the official inference, which loads the LoRA without alpha metadata
(scale 1) and fuses it at 0.5; lora_B is pre-scaled by (alpha/r)/0.5 so that this gives
the trained model. When the run started from a model whose base differs from a plain Wan
base (a fused earlier LoRA), official/base/ holds that base too.

`registry.publish` uploads the files first and the manifest (with each sha256) last; the
version is then announced on `k4d.model.published`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tempfile
from pathlib import Path

import torch
from k4d_model import checkpoints, registry
from k4d_model.lora import LORA_FILE_NAME, OFFICIAL_LORA_SCALE, write_lora
from k4d_model.model.transformer import ADDED_PARAMETER_PREFIXES
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from k4d_trainer import model as model_lib

log = logging.getLogger("k4d.trainer")
OFFICIAL_DIR = "official"


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every rank calls this (FSDP2 gathers); full CPU tensors on rank 0."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))


def split_lora(state: dict[str, torch.Tensor], rank: int
               ) -> tuple[dict[str, torch.Tensor], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """peft names -> (plain transformer state, {module: (lora_A, lora_B)})."""
    plain, down, up = {}, {}, {}
    for name, tensor in state.items():
        tensor = tensor.detach().float().cpu()
        if ".lora_A." in name:
            down[name.split(".lora_A.")[0]] = tensor
        elif ".lora_B." in name:
            up[name.split(".lora_B.")[0]] = tensor
        else:
            plain[name.replace(".base_layer.", ".")] = tensor
    layers = {module: (down[module], up[module]) for module in down}
    return plain, layers


def write_model_dir(components, state: dict[str, torch.Tensor], out_dir: Path, *,
                    lora_rank: int | None, lora_alpha: float | None, official_layout: bool,
                    base_is_plain_wan: bool, name: str, version: str) -> Path:
    """Our layout (+ official for LoRA) from a full state dict of the trained transformer."""
    plain, layers = split_lora(state, lora_rank or 0)
    exported = model_lib.unwrapped(components, plain)
    exported.info = dataclasses.replace(components.info, name=name, version=version,
                                        layout="k4d", source=f"k4d-train:{name}/{version}")
    scale = (lora_alpha / lora_rank) if layers else OFFICIAL_LORA_SCALE
    checkpoints.save_k4d(exported, out_dir, lora=layers or None, lora_scale=scale)
    if layers and official_layout:
        official = out_dir / OFFICIAL_DIR
        added = {k: v.contiguous() for k, v in plain.items()
                 if k.startswith(ADDED_PARAMETER_PREFIXES)}
        # Official semantics: no alpha metadata (scale 1), fused at 0.5.
        factor = scale / OFFICIAL_LORA_SCALE
        official_lora = {m: (a, b * factor) for m, (a, b) in layers.items()}
        if base_is_plain_wan:
            (official / "kinema4d").mkdir(parents=True, exist_ok=True)
            save_file(added, str(official / "kinema4d" / checkpoints.ADDED_WEIGHTS_FILE))
            write_lora(official / "kinema4d" / LORA_FILE_NAME, official_lora)
        else:
            checkpoints.save_official(exported, official / "base", official / "kinema4d",
                                      lora=official_lora)
    return out_dir


def publish_run(trainer) -> dict | None:
    """Every rank: gather the model; rank 0 writes, publishes and announces.
    Returns {"name", "version", "uri", "manifest_sha256"} or None when not publishing."""
    section = trainer.config.publish
    if not section.name:
        return None
    state = full_model_state(trainer.components.transformer)
    result = None
    if trainer.dist.is_main:
        version = section.version or trainer.job_id
        with tempfile.TemporaryDirectory(prefix="k4d-publish-") as tmp:
            lora = trainer.config.recipe == "finetune-lora"
            model_dir = write_model_dir(
                trainer.components, state, Path(tmp) / "model",
                lora_rank=trainer.config.model.lora_rank if lora else None,
                lora_alpha=trainer.config.model.lora_alpha if lora else None,
                official_layout=section.official_layout,
                base_is_plain_wan=_starts_from_plain_wan(trainer.config),
                name=section.name, version=version)
            from k4d.store import open_store

            store = open_store(section.store_uri, trainer.env_config)
            manifest = registry.publish(store, model_dir, section.name, version)
        digest = hashlib.sha256(json.dumps(manifest, indent=2).encode()).hexdigest()
        result = {"name": section.name, "version": version,
                  "uri": f"registry:{section.name}/{version}", "manifest_sha256": digest}
        announce(trainer, result)
        log.info("published %s", result["uri"])
    from k4d_trainer.parallel import barrier

    barrier(trainer.dist)
    return result


def _starts_from_plain_wan(config) -> bool:
    base = Path(config.model.base or "")
    return (config.recipe == "finetune-lora" and not config.model.kinema4d
            and (base / "transformer" / "config.json").exists()
            and not (base / checkpoints.K4D_MODEL_FILE).exists())


def announce(trainer, published: dict) -> None:
    """ModelPublished on `k4d.model.published` when a bus is configured."""
    bus = trainer.bus
    if bus is None:
        return
    from k4d.model_events import announce_model_published

    announce_model_published(bus, published["name"], published["version"], published["uri"],
                             manifest_sha256=published["manifest_sha256"],
                             variant=trainer.components.transformer.config.variant)
