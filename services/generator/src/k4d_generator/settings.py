"""The generator's settings, read once from the environment by the service and its stage
worker (the variables are described in `k4d_generator.server`)."""

from __future__ import annotations

import os


def generator_settings(env=None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {"model": env.get("K4D_GENERATOR_MODEL", ""),
            "backend": env.get("K4D_GENERATOR_BACKEND", "") or "torch",
            "precision": env.get("K4D_GENERATOR_PRECISION", ""),
            "device": env.get("K4D_GENERATOR_DEVICE", "") or "cpu",
            "cache_dir": env.get("K4D_GENERATOR_CACHE_DIR", "")}
