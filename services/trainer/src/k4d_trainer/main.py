"""The thin entry points: parse -> build -> train -> close, `close()` on every exit path.

`run_training` is what `k4d train` runs in each process (alone, or once per rank under
torchrun); `run_encode_latents` is `k4d train encode-latents`.
"""

from __future__ import annotations

import logging

from k4d.errors import InvalidArgument

from k4d_trainer.config import TrainConfig
from k4d_trainer.runs import RunDir, RunStatus

log = logging.getLogger("k4d.trainer")


def _bus_for(config: TrainConfig, env_config):
    """A Kafka bus when one is configured (K4D_KAFKA_BOOTSTRAP) and events are wanted."""
    if env_config is None or not env_config.kafka_bootstrap:
        return None
    if not (config.observability.bus_events or config.publish.name):
        return None
    from k4d.bus import open_bus

    return open_bus(env_config)


def run_training(config: TrainConfig, run_uri: str, *, resume: bool = False, env_config=None,
                 job_id: str | None = None) -> RunStatus:
    """Train one run to its end (succeeded, cancelled, or failed on SIGTERM); any other
    failure is written to status.json as `failed` and re-raised."""
    from k4d_trainer.parallel import deterministic_algorithms

    bus = _bus_for(config, env_config)
    try:
        with deterministic_algorithms(config.training.deterministic):
            return _build_and_train(config, run_uri, resume, env_config, job_id, bus)
    finally:
        if bus is not None:
            bus.close()


def _build_and_train(config: TrainConfig, run_uri: str, resume: bool, env_config,
                     job_id: str | None, bus) -> RunStatus:
    import os

    from k4d_trainer.parallel import close_distributed
    from k4d_trainer.trainer import Trainer, env_job_id

    trainer = None
    try:
        trainer = Trainer.build(config, run_uri, resume=resume, env_config=env_config,
                                job_id=job_id or env_job_id(), bus=bus)
        return trainer.train()
    except BaseException as exc:
        if trainer is not None:
            trainer.fail(exc)
        elif int(os.environ.get("RANK", "0")) == 0:
            _write_failed(run_uri, config, exc, env_config)
        raise
    finally:
        if trainer is not None:
            trainer.close()
        else:
            close_distributed()


def _write_failed(run_uri: str, config: TrainConfig, exc: BaseException, env_config) -> None:
    try:
        RunDir(run_uri, env_config).write_status(RunStatus(
            state="failed", total_steps=config.training.steps, error=str(exc)[:2000]
            or type(exc).__name__))
    except Exception as inner:  # the original error matters more than the status file
        log.warning("could not write the failed status: %s", inner)


def run_encode_latents(config: TrainConfig, out_uri: str | None, env_config=None) -> dict:
    """Encode every episode of `data.uri` into the latent cache (sharded over torchrun ranks,
    skipping what exists). Returns {"uri", "episodes", "encoded", "fingerprint"}."""
    import torch
    from k4d_model.options import LATENT_TARGET_TRACKS

    from k4d_trainer import model as model_lib
    from k4d_trainer.data import encode_missing, open_source, select_episodes
    from k4d_trainer.latents import LatentCache, SampleEncoder
    from k4d_trainer.parallel import (
        all_reduce_mean,
        barrier,
        close_distributed,
        init_distributed,
        stage_dtype,
    )

    if config.recipe == "from-scratch":
        raise InvalidArgument.for_field("recipe", "from-scratch trains its own VAE first; its "
                                                  "latents are encoded inside `k4d train`")
    uri = out_uri or config.data.latents_uri
    if not uri:
        raise InvalidArgument.for_field("out", "where to write the latents: --out URI or "
                                               "data.latents_uri")
    dist = init_distributed(lambda world: (world, 1))
    try:
        torch.manual_seed(config.seed)
        components = model_lib.load_components(config.recipe, config.model, config.seed)
        clip = model_lib.clip_of(components)
        dataset = open_source(config.data, env_config)
        episode_ids = select_episodes(dataset, config.data, clip)
        encoder = SampleEncoder(components, dist.device,
                                stage_dtype(config.model.precision, dist.device),
                                tracks=config.training.latent_target == LATENT_TARGET_TRACKS)
        cache = LatentCache(uri, encoder.fingerprint, env_config)
        encoded = encode_missing(dataset, episode_ids, encoder, cache, clip, dist.rank,
                                 dist.world_size)
        total = int(round(all_reduce_mean(float(encoded), dist) * dist.world_size))
        barrier(dist)
        if dist.is_main:
            cache.write_index(episode_ids, clip)
        return {"uri": cache.uri, "episodes": len(episode_ids), "encoded": total,
                "fingerprint": encoder.fingerprint}
    finally:
        close_distributed()
