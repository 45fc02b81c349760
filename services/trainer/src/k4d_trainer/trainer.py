"""The training loop: `Trainer.build(config, run_uri)` -> `train()` -> `close()`.

`build` wires the components from the recipe (model, data, latent cache, parallelism,
optimizer, checkpoints, reporting); `train` is a short linear loop whose details live in
`train_step`; everything resumable is one state dict of Stateful parts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import resource
import signal
import time
from dataclasses import dataclass, field

import torch
from k4d.errors import K4DError
from k4d.settings import current as current_settings
from k4d_model.options import LATENT_TARGET_TRACKS

from k4d_trainer import model as model_lib
from k4d_trainer.checkpoint import Checkpointer, ModelOptimizerState, RngState
from k4d_trainer.clips import ClipSpec
from k4d_trainer.config import TrainConfig, resolve_degrees
from k4d_trainer.data import EpisodeSampler, collate, encode_missing, open_source, select_episodes
from k4d_trainer.ema import STATE_KEY as EMA_KEY
from k4d_trainer.ema import EmaState
from k4d_trainer.latents import LatentCache, SampleEncoder
from k4d_trainer.objective import (
    coherence_loss,
    flow_matching_loss,
    loss_weights,
    moving_cells,
    noise_batch,
    training_schedule,
)
from k4d_trainer.observe import NullReporter, RunReporter
from k4d_trainer.parallel import (
    DistInfo,
    all_reduce_max,
    all_reduce_mean,
    autocast,
    autocast_dtype,
    barrier,
    close_distributed,
    init_distributed,
    parallelize,
    stage_dtype,
)
from k4d_trainer.progress import SampleProgress, sampling_transformer
from k4d_trainer.runs import RunDir, RunStatus
from k4d_trainer.schedule import lr_lambda
from k4d_trainer.tool_condition import TOOL_KEY, tool_conditions

log = logging.getLogger("k4d.trainer")


@dataclass
class TrainState:
    """Step counters (Stateful)."""

    step: int = 0
    losses: list[float] = field(default_factory=list)

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])


class _Stateful:
    """Adapts an object with state_dict/load_state_dict (sampler, lr schedule) to DCP."""

    def __init__(self, obj):
        self.obj = obj

    def state_dict(self):
        return self.obj.state_dict()

    def load_state_dict(self, state):
        self.obj.load_state_dict(state)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated GPU memory, or the process's peak resident set size on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "fp32" if dtype is None else str(dtype).removeprefix("torch.")


class Trainer:
    def __init__(self, config: TrainConfig, run: RunDir, dist: DistInfo, components, model,
                 trainable: list[torch.nn.Parameter], optimizer, scheduler, sampler,
                 cache: LatentCache, clip: ClipSpec, checkpointer: Checkpointer, reporter,
                 job_id: str, env_config=None, bus=None, progress: SampleProgress | None = None,
                 no_robot: torch.Tensor | None = None,
                 tools: dict[str, torch.Tensor] | None = None):
        self.config, self.run, self.dist = config, run, dist
        self.no_robot = no_robot  # the robot condition condition dropout puts in
        self.tools = tools  # each episode's tool features when the transformer reads them
        self.progress = progress
        self.env_config, self.bus = env_config, bus
        self.components, self.model, self.trainable = components, model, trainable
        self.optimizer, self.lr_scheduler, self.sampler = optimizer, scheduler, sampler
        self.cache, self.clip = cache, clip
        self.checkpointer, self.reporter, self.job_id = checkpointer, reporter, job_id
        self.state = TrainState()
        self.schedule = training_schedule(config.training.timestep_shift)
        self.compute_dtype = autocast_dtype(config.model.precision, dist.device)
        self.mask_channels = components.transformer.mask_channels
        self.status = RunStatus(state="running", total_steps=config.training.steps)
        self._terminate = False
        self._previous_sigterm = None
        # the moving average of the weights (training.ema_decay), what the run publishes
        self.ema = EmaState({n: p for n, p in components.transformer.named_parameters()
                             if p.requires_grad}, config.training.ema_decay,
                            config.training.ema_warmup) \
            if config.training.ema_decay else None

    # ------------------------------------------------------------------ build

    @classmethod
    def build(cls, config: TrainConfig, run_uri: str, *, resume: bool = False,
              env_config=None, job_id: str | None = None, bus=None) -> Trainer:
        dist = init_distributed(lambda ws: resolve_degrees(config.parallelism, ws))
        run = RunDir(run_uri, env_config)
        job_id = job_id or config.run_name or run.uri.rstrip("/").rsplit("/", 1)[-1]
        if dist.is_main and not resume and run.exists("checkpoints/latest.json"):
            from k4d.errors import FailedPrecondition

            raise FailedPrecondition(f"{run.uri} already holds a run with checkpoints; pass "
                                     "--resume to continue it or choose another --out")
        if config.publish.name:  # a bad version must fail now, not after the training
            dataclasses.replace(config.publish, version=config.publish.version or job_id).validate()
        dataset = open_source(config.data, env_config)
        torch.manual_seed(config.seed)  # identical initial replicas on every rank
        components = model_lib.load_components(config.recipe, config.model, config.seed)
        model_lib.record_recipe(components, config)
        clip = model_lib.clip_of(components)
        episode_ids = select_episodes(dataset, config.data, clip)
        progress = SampleProgress(config, components, clip, dist, run, env_config)

        # the stages before the transformer, and the transformer's
        stages = stage_dtype(config.model.precision, dist.device)
        compute = autocast_dtype(config.model.precision, dist.device)
        if dist.is_main:  # bf16-if-native resolves per machine: say what it chose
            log.info("precision %s on %s: stages %s, transformer %s", config.model.precision,
                     dist.device, _dtype_name(stages), _dtype_name(compute))
        if config.recipe == "from-scratch" and not config.model.init:
            from k4d_trainer.vae import vae_stage

            vae_stage(components, dataset, episode_ids, clip, config.vae, dist, run, config.seed,
                      log=log.info, compute_dtype=stages)
        if config.refiner.steps:
            from k4d_trainer.refiner_stage import refiner_stage

            refiner_stage(components, dataset, episode_ids, clip, config.refiner, dist, run,
                          config.seed, log=log.info, compute_dtype=stages)

        encoder = SampleEncoder(components, dist.device, stages,
                                tracks=config.training.latent_target == LATENT_TARGET_TRACKS)
        cache = LatentCache(config.data.latents_uri or run.child("latents"), encoder.fingerprint,
                            env_config)
        encode_missing(dataset, episode_ids, encoder, cache, clip, dist.rank, dist.world_size)
        barrier(dist)
        if dist.is_main:
            cache.write_index(episode_ids, clip)
        no_robot = encoder.no_robot_arm_cond(clip.num_frames, clip.height, clip.width) \
            if config.training.condition_dropout else None
        tools = tool_conditions(dataset, episode_ids, clip, encoder.pipe.temporal_stride,
                                components.transformer.config.tool_features) \
            if config.model.tool_condition else None
        components.vae.cpu()
        components.image_encoder.cpu()

        transformer = components.transformer
        if config.recipe == "finetune-lora":
            torch.manual_seed(config.seed)
            model_lib.add_lora(transformer, config.model.lora_rank, config.model.lora_alpha)
        model_lib.set_trainable(transformer, config.recipe)
        transformer.train().to(dist.device)
        model = parallelize(transformer, dist, compute, config.model.activation_checkpointing)
        trainable = [p for p in transformer.parameters() if p.requires_grad]
        t = config.training
        optimizer = torch.optim.AdamW(trainable, lr=t.lr, betas=tuple(t.betas), eps=t.eps,
                                      weight_decay=t.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_lambda(t.warmup_steps, t.steps, t.lr_schedule, t.decay_steps))
        sampler = EpisodeSampler(episode_ids, config.seed, t.global_batch_size, dist.rank,
                                 dist.world_size)
        checkpointer = Checkpointer(run, dist.rank, config.checkpoint.keep)
        reporter = NullReporter()
        if dist.is_main:
            obs = config.observability
            reporter = RunReporter(run, t.steps, job_id=job_id, tensorboard=obs.tensorboard,
                                   prometheus_port=obs.prometheus_port,
                                   bus=bus if obs.bus_events else None,
                                   event_every=obs.event_every, progress_bar=obs.progress_bar)
        trainer = cls(config, run, dist, components, model, trainable, optimizer, scheduler,
                      sampler, cache, clip, checkpointer, reporter, job_id, env_config, bus,
                      progress, no_robot, tools)
        if resume:
            trainer.restore()
        return trainer

    # ------------------------------------------------------------------ state

    def state_dict(self, with_ema: bool = True) -> dict:
        state = {"model_optim": ModelOptimizerState(self.model, self.optimizer),
                 "lr_schedule": _Stateful(self.lr_scheduler), "data": _Stateful(self.sampler),
                 "train_state": self.state, "rng": RngState()}
        if self.ema is not None and with_ema:
            state[EMA_KEY] = self.ema
        return state

    def restore(self) -> None:
        latest = self.checkpointer.latest()
        if latest is None:
            log.info("resume: no committed checkpoint in %s; starting at step 0", self.run.uri)
            return
        # A run that turns training.ema_decay on when it resumes starts the average there.
        restart_ema = self.ema is not None and not self.checkpointer.holds(latest, EMA_KEY)
        self.checkpointer.load(latest, self.state_dict(with_ema=not restart_ema))
        if restart_ema:
            self.ema.restart_from_weights()
            log.info("resume: %s holds no weight average; training.ema_decay starts it at "
                     "step %d", latest.uri, self.state.step)
        self.status.checkpoint_uri = latest.uri
        log.info("resumed from %s (step %d)", latest.uri, self.state.step)

    def save_checkpoint(self) -> None:
        info = self.checkpointer.save(self.state.step, self.state_dict(),
                                      barrier=lambda: barrier(self.dist))
        self.status.checkpoint_uri = info.uri

    # ------------------------------------------------------------------ loop

    def train(self) -> RunStatus:
        self._install_sigterm()
        self.status.step = self.state.step
        self.reporter.start(self.status, self.state.step)
        every = self.config.checkpoint.every
        while self.state.step < self.config.training.steps:
            if self._should_stop():
                return self._stop()
            metrics = self.train_step()
            self.status.step, self.status.loss = self.state.step, metrics["loss"]
            self.reporter.step(metrics)
            if self.progress is not None and self.progress.due(self.state.step):
                self.measure_samples()
            self.reporter.status(self.status)
            if every and self.state.step % every == 0:
                self.save_checkpoint()
        if self.status.checkpoint_uri != self.checkpointer.uri_for(self.state.step):
            self.save_checkpoint()
        if self.ema is not None:  # the rollouts and the published model are the average's
            self.ema.copy_to_weights()
        if self.config.cascade.steps:
            self.train_cascade()
        self.status.published_model = self.publish()
        self.status.state = "succeeded"
        return self.status

    def train_step(self) -> dict:
        started = time.perf_counter()
        items = self.sampler.next_batch()
        batch = collate([self.load_sample(episode_id) for _, episode_id in items])
        noised = noise_batch(batch, [number for number, _ in items], self.config.seed,
                             self.schedule, self.config.training.soft_mask_ratio,
                             self.mask_channels, self.config.training.latent_target,
                             self.config.training.condition_dropout, self.no_robot,
                             self.config.training.motion_scale,
                             self.config.training.high_noise_share,
                             self.config.training.high_noise_min_sigma)
        device = self.dist.device
        with autocast(self.compute_dtype, device):
            tool = {} if TOOL_KEY not in batch else {"tool_cond": batch[TOOL_KEY].to(device)}
            prediction = self.model(noised.model_input.to(device), noised.timestep.to(device),
                                    batch["image_embeds"].to(device), noised.arm_cond.to(device),
                                    return_dict=False, **tool)[0]
        t = self.config.training
        weights = loss_weights(batch, t.changed_loss_weight, t.robot_loss_weight,
                               t.moving_loss_weight, noised.clean) if t.weighted_loss else None
        target = noised.target.to(device)
        loss = flow_matching_loss(prediction, target, weights)
        coherence = None
        if t.coherence_loss_weight > 0:
            coherence = coherence_loss(prediction, target, noised.sigma.to(device),
                                       moving_cells(batch["change"], noised.clean))
            loss = loss + t.coherence_loss_weight * coherence
        loss.backward()
        max_norm = self.config.training.max_grad_norm or float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, max_norm)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update()
        self.state.step += 1
        loss_value = all_reduce_mean(float(loss.detach()), self.dist)
        extra = {} if coherence is None else {
            "coherence_loss": all_reduce_mean(float(coherence.detach()), self.dist)}
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss is {loss_value} at step {self.state.step}")
        elapsed = time.perf_counter() - started
        peaks = all_gather_int(peak_memory_bytes(device), self.dist)
        return {"step": self.state.step, "loss": loss_value, "lr": lr,
                "grad_norm": float(grad_norm), "samples_per_s":
                    self.config.training.global_batch_size / elapsed,
                "peak_mem_bytes": max(peaks), "peak_mem_bytes_per_rank": peaks,
                "step_time_s": elapsed,
                "epoch": self.sampler.position.epoch, **extra}

    def load_sample(self, episode_id: str) -> dict[str, torch.Tensor]:
        """An episode's training sample: the cached one, with its tool features when the
        transformer reads them (k4d_trainer.tool_condition)."""
        sample = self.cache.load(episode_id)
        if self.tools is not None:
            sample[TOOL_KEY] = self.tools[episode_id]
        return sample

    def measure_samples(self) -> None:
        """The sample-based progress figures of the current weights (k4d_trainer.progress):
        every rank takes part in gathering sharded weights, rank 0 samples and reports, the
        others wait at a barrier so the data-parallel ranks stay in step. With
        training.ema_decay, the figures are the weight average's (what the run publishes)."""
        with self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext():
            self._measure_samples()
        barrier(self.dist)

    def _measure_samples(self) -> None:
        transformer = sampling_transformer(self.components, self.dist,
                                           self.config.model.lora_alpha)
        if not self.dist.is_main:
            return
        figures = self.progress.measure(transformer, self.state.step)
        self.reporter.sample(figures)
        static = figures["sample_static_psnr_db"]
        log.info("samples at step %d: PSNR %.2f dB against the VAE's reconstruction "
                 "(static pixels %s), x0 error at sigma 1 %.4f (predicting zero %.4f); "
                 "%d episodes in %.1f s", self.state.step, figures["sample_psnr_db"],
                 "none" if static is None else f"{static:.2f} dB",
                 figures["x0_error_sigma1"], figures["x0_error_sigma1_zero"],
                 figures["episodes"], figures["seconds"])

    def train_cascade(self) -> None:
        """The cascade stage on the trained weights (k4d_trainer.cascade_stage): rollouts
        sampled by every rank that holds the whole transformer, then the sample refiner."""
        from k4d_trainer.cascade_stage import cascade_stage

        transformer = sampling_transformer(self.components, self.dist,
                                           self.config.model.lora_alpha)
        cascade_stage(self.components, transformer, self.state.step, self.clip,
                      self.config.cascade, self.dist, self.run, self.config.seed,
                      self.compute_dtype,
                      self.config.data.max_upscale, self.env_config, log=log.info)

    # ------------------------------------------------------------------ stopping

    def _install_sigterm(self) -> None:
        def on_sigterm(signum, frame):
            self._terminate = True

        self._previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)

    def _should_stop(self) -> bool:
        cancel = self.dist.is_main and self.run.cancel_requested()
        self._cancel = all_reduce_max(cancel, self.dist)
        self._terminate = all_reduce_max(self._terminate, self.dist)
        return self._cancel or self._terminate

    def _stop(self) -> RunStatus:
        """Checkpoint at this step boundary and end: `cancelled` on a cancel request;
        `failed` (resumable) on SIGTERM, e.g. a preempted node."""
        if self.state.step > 0:
            self.save_checkpoint()
        if self._cancel:
            self.status.state = "cancelled"
            self.status.error = f"cancelled at step {self.state.step}"
        else:
            self.status.state = "failed"
            self.status.error = (f"terminated (SIGTERM) at step {self.state.step}; checkpoint "
                                 "saved, continue with --resume")
        return self.status

    # ------------------------------------------------------------------ publish

    def publish(self) -> dict | None:
        from k4d_trainer.publish import publish_run

        return publish_run(self)

    # ------------------------------------------------------------------ close

    def fail(self, exc: BaseException) -> RunStatus:
        self.status.state = "failed"
        message = str(exc) if isinstance(exc, K4DError) else f"{type(exc).__name__}: {exc}"
        self.status.error = message[:2000]
        return self.status

    def close(self) -> None:
        self.reporter.close(self.status)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        close_distributed()


def all_gather_int(value: int, dist: DistInfo) -> list[int]:
    """[value of rank 0, rank 1, ...] on every rank."""
    if not dist.distributed:
        return [value]
    tensor = torch.tensor([value], dtype=torch.int64, device=dist.device)
    gathered = [torch.zeros_like(tensor) for _ in range(dist.world_size)]
    torch.distributed.all_gather(gathered, tensor)
    return [int(t.item()) for t in gathered]


def env_job_id() -> str | None:
    return current_settings().train.job_id or None
