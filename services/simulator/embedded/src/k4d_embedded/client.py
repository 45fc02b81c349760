"""`k4d submit` and `k4d jobs`: the cluster path, over the SimulatorService gRPC API."""

from __future__ import annotations

import json

import grpc
from google.protobuf import json_format
from k4d.errors import (
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from k4d.grpc_client import ClientSecurity, create_channel, field_violations
from k4d_simulator import is_terminal, warnings_of
from kinema4d.v1 import simulator_pb2, simulator_pb2_grpc

from k4d_embedded.inputs import SimulationInputs, build_spec

S = simulator_pb2.JobState
STATE_NAMES = {"queued": S.JOB_STATE_QUEUED, "running": S.JOB_STATE_RUNNING,
               "succeeded": S.JOB_STATE_SUCCEEDED, "failed": S.JOB_STATE_FAILED,
               "cancelled": S.JOB_STATE_CANCELLED}


def _stub(address: str, security: ClientSecurity | None) -> simulator_pb2_grpc.SimulatorServiceStub:
    return simulator_pb2_grpc.SimulatorServiceStub(create_channel(address, security=security))


def _raise_domain(error: grpc.RpcError, address: str, security: ClientSecurity | None = None):
    """gRPC status -> the domain error the CLI prints as one line."""
    code = error.code()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        raise Unauthenticated(f"simulator at {address} refused the call: {error.details()} "
                              "(UNAUTHENTICATED)") from None
    if code == grpc.StatusCode.PERMISSION_DENIED:
        raise PermissionDenied(f"simulator at {address} refused the call: {error.details()} "
                               "(PERMISSION_DENIED)") from None
    if code == grpc.StatusCode.UNAVAILABLE and _tls_failure(error.details() or ""):
        hint = "set K4D_TLS_CA or --tls-ca to the CA" if not (security and security.tls_ca) \
            else "is --tls-ca / K4D_TLS_CA the CA that signed it"
        raise Unavailable(f"simulator at {address}: TLS connection failed ({hint}); "
                          f"{_last_error(error.details())}") from None
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        violations = field_violations(error) or [FieldViolation("", error.details() or "")]
        raise InvalidArgument(error.details() or "invalid argument", violations) from None
    if code == grpc.StatusCode.NOT_FOUND:
        raise NotFound(error.details() or "not found") from None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise Unavailable(f"simulator at {address} is unavailable: {error.details()}") from None
    raise Unavailable(f"simulator at {address}: {code.name}: {error.details()}") from None


def _tls_failure(details: str) -> bool:
    """A plaintext client at a TLS port sees the socket closed; a TLS one with the wrong CA
    a failed handshake."""
    return "Socket closed" in details or "handshake" in details.lower() or "SSL" in details


def _last_error(details: str) -> str:
    return details.rsplit("last error: ", 1)[-1].splitlines()[0][:200]


def state_name(state: int) -> str:
    return S.Name(state).removeprefix("JOB_STATE_").lower()


def format_job(job: simulator_pb2.Job, details: bool = False) -> str:
    """One line: id, state, progress, and the error or result video (and how many stage
    warnings). details: one more line per stage outcome (seconds, failed frames, warnings)."""
    line = f"{job.job_id}  {state_name(job.state):9s}"
    if job.progress.stage:
        p = job.progress
        line += f"  {p.stage} {p.step}/{p.total or '?'}"
    if job.error.code:
        line += f"  {job.error.code}: {job.error.message}"
    elif job.result.rgb_video_uri:
        line += f"  {job.result.rgb_video_uri}"
    if job.cancel_requested and not is_terminal(job.state):
        line += "  (cancel requested)"
    warnings = warnings_of(job.result.stages)
    if warnings:
        line += f"  ({len(warnings)} warning{'s' * (len(warnings) > 1)})"
    if details:
        for outcome in job.result.stages:
            failed = f", {outcome.failed_frames} failed frames" if outcome.failed_frames else ""
            line += f"\n  {outcome.stage:10s} {outcome.seconds:8.2f} s{failed}"
            line += "".join(f"\n    warning: {w}" for w in outcome.warnings)
    return line


def _print(job, as_json: bool, out, details: bool = False) -> None:
    if as_json:
        print(json.dumps(json_format.MessageToDict(job)), file=out, flush=True)
    else:
        print(format_job(job, details and is_terminal(job.state)), file=out, flush=True)


def watch_job(stub, job_id: str, out, as_json: bool = False) -> simulator_pb2.Job:
    job = None
    for update in stub.Watch(simulator_pb2.WatchRequest(job_id=job_id)):
        job = update.job
        _print(job, as_json, out, details=True)
    return job


def submit_command(inputs: SimulationInputs, address: str, idempotency_key: str, wait: bool,
                   out, security: ClientSecurity | None = None) -> int:
    spec = build_spec(inputs)
    stub = _stub(address, security)
    try:
        response = stub.Submit(simulator_pb2.SubmitRequest(spec=spec,
                                                           idempotency_key=idempotency_key))
        print(response.job_id + ("  (existing job for this idempotency key)"
                                 if response.deduplicated else ""), file=out, flush=True)
        if not wait:
            return 0
        job = watch_job(stub, response.job_id, out)
    except grpc.RpcError as error:
        _raise_domain(error, address, security)
    return 0 if job is not None and job.state == S.JOB_STATE_SUCCEEDED else 1


def jobs_command(address: str, *, job_id: str | None = None, watch: bool = False,
                 state: str = "", limit: int = 50, cancel: bool = False, as_json: bool = False,
                 out=None, security: ClientSecurity | None = None) -> int:
    if state and state not in STATE_NAMES:
        raise InvalidArgument.for_field("--state", f"expected one of {sorted(STATE_NAMES)}")
    if limit < 1:
        raise InvalidArgument.for_field("--limit", f"must be >= 1, got {limit}")
    if (watch or cancel) and not job_id:
        raise InvalidArgument.for_field("job_id", "--watch and --cancel need a job id")
    stub = _stub(address, security)
    try:
        if job_id and cancel:
            _print(stub.Cancel(simulator_pb2.CancelRequest(job_id=job_id)).job, as_json, out)
            return 0
        if job_id and watch:
            watch_job(stub, job_id, out, as_json)
            return 0
        if job_id:
            _print(stub.Get(simulator_pb2.GetRequest(job_id=job_id)).job, as_json, out,
                   details=True)
            return 0
        token, shown = "", 0
        while shown < limit:
            response = stub.ListJobs(simulator_pb2.ListJobsRequest(
                page_size=min(limit - shown, 500), page_token=token,
                state=STATE_NAMES.get(state, S.JOB_STATE_UNSPECIFIED)))
            for job in response.jobs:
                _print(job, as_json, out)
            shown += len(response.jobs)
            token = response.next_page_token
            if not token:
                break
    except grpc.RpcError as error:
        _raise_domain(error, address, security)
    return 0
