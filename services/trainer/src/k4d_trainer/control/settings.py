"""Trainer control-plane settings: the `trainer` section of k4d.settings (the K4D_TRAINER_*
variables, docs/configuration.md), read once at start-up. Only the default namespace, the
pod's own, is resolved here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from k4d.settings import TrainerSettings
from k4d.settings import current as current_settings

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "k4d"


def _pod_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def load_settings(env: Mapping[str, str] | None = None) -> TrainerSettings:
    """K4D_TRAINER_* of `env` (os.environ unless given); an empty namespace becomes the
    pod's own, else `k4d`. A malformed value raises InvalidArgument naming its variable."""
    settings = current_settings(env).trainer
    if settings.namespace:
        return settings
    return dataclasses.replace(settings, namespace=_pod_namespace())
