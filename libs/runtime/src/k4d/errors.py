"""Typed domain errors raised by stage cores and mapped to gRPC codes in one place.

Cores raise these; the gRPC error interceptor (`k4d.grpc_server`) maps them to
status codes, and the CLI maps them to one line on stderr and an exit code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldViolation:
    """One bad input field: `field` is a dotted path (`camera.fx`, `joints[3]`)."""

    field: str
    description: str


class K4DError(Exception):
    """Base of every domain error; the message is safe to show to a client."""

    grpc_code_name = "INTERNAL"
    cli_exit_code = 1


class InvalidArgument(K4DError, ValueError):
    """Bad input. Carries field violations (google.rpc.BadRequest on gRPC)."""

    grpc_code_name = "INVALID_ARGUMENT"
    cli_exit_code = 2

    def __init__(self, message: str, violations: list[FieldViolation] | None = None):
        self.violations = list(violations or [])
        if not self.violations:
            self.violations = [FieldViolation(field="", description=message)]
        super().__init__(message)

    @classmethod
    def for_field(cls, field: str, description: str) -> InvalidArgument:
        return cls(f"{field}: {description}" if field else description,
                   [FieldViolation(field, description)])


class NotFound(K4DError, LookupError):
    grpc_code_name = "NOT_FOUND"
    cli_exit_code = 2


class FailedPrecondition(K4DError):
    grpc_code_name = "FAILED_PRECONDITION"
    cli_exit_code = 2


class ResourceExhausted(K4DError):
    grpc_code_name = "RESOURCE_EXHAUSTED"
    cli_exit_code = 2


class Unavailable(K4DError):
    grpc_code_name = "UNAVAILABLE"
    cli_exit_code = 1


class Cancelled(K4DError):
    grpc_code_name = "CANCELLED"
    cli_exit_code = 1


class IntegrityError(K4DError):
    """Stored bytes do not match their recorded sha256 (corruption or tampering)."""

    grpc_code_name = "DATA_LOSS"
    cli_exit_code = 1


class Unauthenticated(K4DError):
    """No credentials, or credentials no server token matches."""

    grpc_code_name = "UNAUTHENTICATED"
    cli_exit_code = 1


class PermissionDenied(K4DError):
    """Known caller, but its role may not make this call."""

    grpc_code_name = "PERMISSION_DENIED"
    cli_exit_code = 1
