"""`k4d train` and its subcommands.

    k4d train --config CFG [--data URI] [--steps N] [--out RUN_URI] [--nproc N]
              [--checkpoint-every N] [--resume] [--nnodes N|MIN:MAX] [--rdzv-endpoint H:P]
    k4d train encode-latents --config CFG [--data URI] [--out LATENTS_URI] [--nproc N]
    k4d train status RUN_URI

With --nproc > 1 (or an elastic --nnodes) the command re-launches itself under torchrun
(`python -m k4d_trainer.lifeline ... -m k4d.cli.main train ...`, torchrun under a
parent-death signal); each rank then runs the same command with torchrun's environment set
and dies with the torchrun agent, which dies with this launcher (`k4d_trainer.lifeline`). The configuration is validated, and the
parallel degrees checked against the world size, before anything is launched.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from k4d.errors import InvalidArgument, NotFound, Unavailable


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train or fine-tune a Kinema4D model (torchrun DDP / FSDP2)",
        description="Run a training recipe (finetune-lora or from-scratch) on a k4d episode "
                    "dataset or the Robo4D-200k layout; checkpoints, metrics and status go to "
                    "the run directory (--out, file:// or s3://).")
    _common(p)
    p.add_argument("--steps", type=int, help="optimizer steps (overrides training.steps)")
    p.add_argument("--out", help="run directory URI (default ./runs/<config name>-<UTC time>)")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint interval in steps "
                                                        "(overrides checkpoint.every)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the run directory's newest committed checkpoint")
    p.set_defaults(handler=run_train)
    sub = p.add_subparsers(dest="train_command", metavar="SUBCOMMAND")

    enc = sub.add_parser("encode-latents", help="pre-encode VAE latents + CLIP embeddings per "
                                                "episode (sharded over --nproc ranks, resumable)")
    _common(enc)
    enc.add_argument("--out", help="latent cache URI (default: data.latents_uri)")
    enc.set_defaults(handler=run_encode)

    st = sub.add_parser("status", help="print a run's status.json and its last metrics line")
    st.add_argument("run", metavar="RUN_URI")
    st.set_defaults(handler=run_status)


def _common(p) -> None:
    p.add_argument("--config", help="recipe file (YAML or JSON); see examples/train/")
    p.add_argument("--data", help="dataset URI (overrides data.uri)")
    p.add_argument("--nproc", type=int, default=1, help="processes per node (torchrun)")
    p.add_argument("--nnodes", help="torchrun --nnodes: N or elastic MIN:MAX "
                                    "(default: parallelism.nnodes)")
    p.add_argument("--rdzv-endpoint", help="torchrun rendezvous HOST:PORT for several nodes")


def _load(args):
    from k4d_trainer.config import load_config_file, with_overrides

    if not args.config:
        raise InvalidArgument.for_field("config", "a recipe file is required (--config CFG)")
    if args.nproc < 1:
        raise InvalidArgument.for_field("nproc", f"must be >= 1, got {args.nproc}")
    config = load_config_file(args.config)
    return with_overrides(config, data=args.data, steps=getattr(args, "steps", None),
                          checkpoint_every=getattr(args, "checkpoint_every", None))


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def _nnodes(args, config) -> str:
    nnodes = args.nnodes or config.parallelism.nnodes
    parts = nnodes.split(":")
    if not (1 <= len(parts) <= 2 and all(p.isdigit() and int(p) >= 1 for p in parts)
            and int(parts[0]) <= int(parts[-1])):
        raise InvalidArgument.for_field("nnodes", f"must be N or MIN:MAX, got {nnodes!r}")
    return nnodes


def _launch(args, config, argv: list[str]) -> int:
    """Re-run this command under torchrun; returns torchrun's exit code."""
    from k4d_trainer.config import resolve_degrees

    nnodes = _nnodes(args, config)
    min_nodes = int(nnodes.split(":")[0])
    if min_nodes == int(nnodes.split(":")[-1]):
        resolve_degrees(config.parallelism, args.nproc * min_nodes)  # one readable error now
    from k4d_trainer.lifeline import LAUNCHER_PID_ENV

    # torchrun itself, run in a process that dies with this one (and tells its workers to).
    command = [sys.executable, "-m", "k4d_trainer.lifeline", f"--nproc-per-node={args.nproc}",
               f"--nnodes={nnodes}", f"--max-restarts={config.parallelism.max_restarts}"]
    if nnodes == "1":
        command.append("--standalone")
    else:
        if not args.rdzv_endpoint:
            raise InvalidArgument.for_field("rdzv-endpoint", "several nodes need a rendezvous "
                                                             "HOST:PORT")
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint={args.rdzv_endpoint}"]
    command += ["-m", "k4d.cli.main", *argv]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    return _run_forwarding_signals(command, env)


def _run_forwarding_signals(command: list[str], env: dict) -> int:
    """Run torchrun and pass SIGTERM / SIGINT / SIGHUP on to it (torchrun passes them to
    its workers, which checkpoint and stop). Without this, stopping `k4d train --nproc N`
    (a Kubernetes pod stop, a `kill`) ended only this launcher and left the workers
    training, unowned, into the same run directory."""
    child = subprocess.Popen(command, env=env)
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:  # SIGINT goes to `forward` too, so no KeyboardInterrupt interrupts the wait
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _die_with_torchrun() -> None:
    """A rank started by torchrun (in a session of its own) ends when the agent ends."""
    if _under_torchrun():
        from k4d_trainer.lifeline import worker_start

        worker_start()


def _default_out(config_path: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return str(Path("runs") / f"{Path(config_path).stem}-{stamp}")


def _train_argv(args, out: str) -> list[str]:
    # No --nproc: torchrun would take it for an abbreviation of its own --nproc-per-node.
    argv = ["train", "--config", args.config, "--out", out]
    for flag, value in (("--data", args.data), ("--steps", args.steps),
                        ("--checkpoint-every", args.checkpoint_every)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--resume"] if args.resume else [])


def _setup_logging() -> None:
    if not logging.getLogger().handlers:
        rank = os.environ.get("RANK", "0")
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format=f"%(asctime)s rank{rank} %(levelname)s %(message)s")


def run_train(args) -> int:
    from k4d.config import load_config

    from k4d_trainer.main import run_training
    from k4d_trainer.runs import read_status

    config = _load(args)
    env_config = load_config("trainer")
    out = args.out or _default_out(args.config)
    if args.steps is not None and args.steps < 1:
        raise InvalidArgument.for_field("steps", f"must be >= 1, got {args.steps}")
    _setup_logging()
    _die_with_torchrun()
    if (args.nproc > 1 or _nnodes(args, config) != "1") and not _under_torchrun():
        code = _launch(args, config, _train_argv(args, out))
        try:
            status = read_status(out, env_config)
        except NotFound:
            raise Unavailable(f"torchrun exited {code} before the run wrote {out}/status.json; "
                              "see the ranks' output above") from None
        return _report(status, code)
    status = run_training(config, out, resume=args.resume, env_config=env_config)
    if _under_torchrun():  # the launching process reports for the whole run
        return 0 if status.state in ("succeeded", "cancelled") else 1
    return _report(status, 0)


def _report(status, launcher_code: int) -> int:
    """One summary line on stdout; the exit code follows the run's state."""
    print(json.dumps({"state": status.state, "step": status.step, "loss": status.loss,
                      "checkpoint_uri": status.checkpoint_uri,
                      "published_model": status.published_model, "error": status.error}))
    if status.state in ("succeeded", "cancelled"):
        return 0
    if status.state == "running":  # the launcher died before the ranks reported an end
        sys.stderr.write(f"k4d train: error: torchrun exited {launcher_code} while the run was "
                         f"at step {status.step}\n")
        return launcher_code or 1
    sys.stderr.write(f"k4d train: error: {status.error}\n")
    return 1


def run_encode(args) -> int:
    from k4d.config import load_config

    from k4d_trainer.main import run_encode_latents

    config = _load(args)
    env_config = load_config("trainer")
    _setup_logging()
    _die_with_torchrun()
    if args.nproc > 1 and not _under_torchrun():
        argv = ["train", "encode-latents", "--config", args.config]
        for flag, value in (("--data", args.data), ("--out", args.out)):
            if value is not None:
                argv += [flag, str(value)]
        return _launch(args, config, argv)
    result = run_encode_latents(config, args.out, env_config)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result))
    return 0


def run_status(args) -> int:
    from k4d.config import load_config

    from k4d_trainer.runs import RunDir, sample_lines, step_lines

    run = RunDir(args.run, load_config("trainer"))
    status = run.read_status()
    lines = run.read_metrics()
    metrics, samples = step_lines(lines), sample_lines(lines)
    print(json.dumps({**status.to_dict(), "last_metrics": metrics[-1] if metrics else None,
                      "last_sample": samples[-1] if samples else None}, indent=2))
    return 0
