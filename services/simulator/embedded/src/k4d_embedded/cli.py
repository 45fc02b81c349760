"""CLI: `k4d simulate` (embedded), `k4d view`, and the cluster commands `k4d submit`,
`k4d jobs` (against a SimulatorService address)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from k4d.sampling import add_sampling_flags, sampling_layer_from_flags

DEFAULT_ADDRESS = "127.0.0.1:50054"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="run a rollout in this process (kinematics -> projection -> generation)",
        description="Embedded mode: the stage cores run in-process, no servers. Without --model "
                    "the static-world backend composites the robot onto the unchanged scene "
                    "(labelled as such everywhere).")
    _add_spec_arguments(p)
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--fps", type=float, default=24.0, help="video frame rate (default 24)")
    p.add_argument("--viewer-points", type=int, default=None,
                   help="at most this many points per frame in viewer.html, on a regular pixel "
                        "grid (default: every pixel)")
    p.add_argument("--no-recording", action="store_true",
                   help="do not write rollout.rrd (the Rerun recording; docs/viewing.md)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_run_simulate)

    p = subparsers.add_parser(
        "view", help="open a rollout, episode or evaluation in the Rerun viewer",
        description="Opens PATH's Rerun recording(s) in the native Rerun viewer where a display "
                    "exists, else serves the Rerun web viewer (from the installed wheel, no "
                    "network) on 127.0.0.1 and prints its URL. --html uses the rollout's "
                    "zero-install viewer.html instead (docs/viewing.md).")
    p.add_argument("dir", type=Path, metavar="PATH",
                   help="a `k4d simulate`/`k4d generate`/`k4d eval` output directory, an episode "
                        "directory (<dataset>/episodes/<id>) or a .rrd file")
    p.add_argument("--web", action="store_true",
                   help="serve the Rerun web viewer even where a display exists")
    p.add_argument("--html", action="store_true",
                   help="viewer.html instead of Rerun: print its path (--serve: serve it)")
    p.add_argument("--serve", action="store_true",
                   help="with --html (implied): serve the directory on loopback until Ctrl-C")
    p.add_argument("--port", type=int, default=0,
                   help="port of the served viewer (default: any free)")
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.set_defaults(handler=_run_view)

    p = subparsers.add_parser("submit", help="submit a simulation job to a SimulatorService",
                              description="Cluster mode: sends the same spec `k4d simulate` runs "
                                          "to the simulator's gRPC API and prints the job id.")
    _add_spec_arguments(p)
    p.add_argument("--address", default=DEFAULT_ADDRESS, help=f"simulator (default {DEFAULT_ADDRESS})")
    p.add_argument("--idempotency-key", default="", help="resubmitting with it returns the same job")
    p.add_argument("--wait", action="store_true", help="watch the job until it is terminal")
    _add_security_arguments(p)
    p.set_defaults(handler=_run_submit)

    p = subparsers.add_parser("jobs", help="list simulation jobs, or show / watch one")
    p.add_argument("job_id", nargs="?", help="show this job (default: list jobs)")
    p.add_argument("--address", default=DEFAULT_ADDRESS, help=f"simulator (default {DEFAULT_ADDRESS})")
    p.add_argument("--watch", action="store_true", help="stream updates until terminal")
    p.add_argument("--state", default="", help="list only jobs in this state (queued, running, "
                                               "succeeded, failed, cancelled)")
    p.add_argument("--limit", type=int, default=50, help="jobs to list (default 50)")
    p.add_argument("--cancel", action="store_true", help="cancel the given job")
    p.add_argument("--json", action="store_true", help="print jobs as JSON lines")
    _add_security_arguments(p)
    p.set_defaults(handler=_run_jobs)


def _add_security_arguments(p) -> None:
    p.add_argument("--tls-ca", type=Path, default=None,
                   help="CA certificate (PEM) the simulator's TLS certificate must chain to "
                        "(default $K4D_TLS_CA; unset = plaintext)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file holding your bearer token (default $K4D_TOKEN)")


def _security(args):
    from k4d.config import load_config
    from k4d.grpc_client import ClientSecurity

    return ClientSecurity.from_config(
        load_config(), tls_ca=str(args.tls_ca) if args.tls_ca else None,
        token_file=str(args.token_file) if args.token_file else None)


def _add_spec_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", required=True, help="builtin robot name (panda, ur5, ...) or URDF path")
    p.add_argument("--actions", required=True, type=Path, help="actions JSON (docs/kinematics.md)")
    p.add_argument("--image", required=True, type=Path, help="initial scene image (PNG/JPEG)")
    p.add_argument("--camera", required=True, type=Path, help="camera JSON (DESIGN.md form)")
    p.add_argument("--model", default="", help="model: [registry:]name[/version] or directory; "
                                               "omitted = $K4D_DEFAULT_MODEL or the shipped "
                                               "default (models/demo-small/manifest.json), "
                                               "else static-world")
    p.add_argument("--steps", type=int, default=0, help="sampler steps (default: the "
                                                        "profile's, else the model's)")
    add_sampling_flags(p)
    p.add_argument("--seed", type=int, default=0, help="random seed (default 42)")
    p.add_argument("--guidance", type=float, default=0.0, help="guidance scale (default: model's)")
    p.add_argument("--backend", default="", help="torch (default), onnx, tensorrt, static-world")
    p.add_argument("--frames", type=int, default=0, help="clip length (default 49)")
    p.add_argument("--downscale", type=int, default=1,
                   help="divide image and camera resolution by this integer (quick previews)")
    p.add_argument("--clip", action="store_true", help="clip out-of-limit joints instead of failing")
    p.add_argument("--depth", type=Path, default=None,
                   help="optional depth of the image (RGB-D): .npy of metres or 16-bit PNG of "
                        "millimetres, 0 = unknown; the rollout keeps these points where the "
                        "scene does not change")


def _inputs(args):
    from k4d_embedded.inputs import SimulationInputs

    return SimulationInputs(robot=args.robot, actions=args.actions, image=args.image,
                            camera=args.camera, model=args.model, steps=args.steps,
                            seed=args.seed, guidance=args.guidance, backend=args.backend,
                            frames=args.frames, downscale=args.downscale,
                            clip_to_limits=args.clip, depth=args.depth,
                            sampling=sampling_layer_from_flags(args))


def _run_simulate(args) -> int:
    from k4d.model_names import STATIC_WORLD

    from k4d_embedded.embedded import simulate_to_directory
    from k4d_embedded.outputs import model_note
    from k4d_embedded.shipped import default_model

    if not args.model and args.backend != STATIC_WORLD:
        args.model = default_model()  # K4D_DEFAULT_MODEL or the shipped default, if any

    paths = simulate_to_directory(_inputs(args), args.out, fps=args.fps,
                                  viewer_points=args.viewer_points,
                                  show_progress=not args.no_progress,
                                  record=not args.no_recording)
    summary = json.loads(paths["summary"].read_text()) if "summary" in paths else {}
    model = summary.get("model", {})
    note = model_note(summary) if model else {}
    print(f"model: {model.get('id', '')}" + (f" ({note['about the model']})" if note else ""))
    print(f"outputs in {args.out}:")
    for name, path in paths.items():
        print(f"  {name:24s} {path}")
    return 0


def _run_view(args) -> int:
    from k4d_embedded.view import view, view_directory

    if args.html or args.serve:
        return view_directory(args.dir, serve=args.serve, port=args.port,
                              open_browser=args.open, out=sys.stdout)
    return view(args.dir, web=args.web, port=args.port, open_browser=args.open, out=sys.stdout)


def _run_submit(args) -> int:
    from k4d_embedded.client import submit_command

    return submit_command(_inputs(args), args.address, args.idempotency_key, args.wait, sys.stdout,
                          security=_security(args))


def _run_jobs(args) -> int:
    from k4d_embedded.client import jobs_command

    return jobs_command(args.address, job_id=args.job_id, watch=args.watch, state=args.state,
                        limit=args.limit, cancel=args.cancel, as_json=args.json, out=sys.stdout,
                        security=_security(args))
