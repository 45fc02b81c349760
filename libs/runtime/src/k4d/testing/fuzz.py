"""Reflection-driven fuzzing of a running gRPC server: every method of every service it
registers, with hostile values of every field type.

The server's own reflection service names the services and hands out their descriptors,
so a new service or RPC is fuzzed without touching the test. Each request is built from
the method's input descriptor:

- floats and doubles: NaN, +-inf, +-max, denormals, -0.0; integers: 0, -1, the type's
  minimum and maximum; unknown enum values (proto3 enums are open);
- strings: empty, paths and URIs longer than any OS allows, traversal (`../`), NUL bytes,
  format specifiers, lone surrogates' neighbours; bytes: empty to hundreds of KiB;
- repeated fields: empty to 10,000 elements; maps with hostile keys;
- nested messages down to the descriptor's depth (recursive types: deep), partially set;
- deep nesting on the wire: unknown groups nested past the parser's recursion limit, and
  plain garbage bytes (undecodable requests).

Usage (what tests/integration/test_fuzz_all_services.py does for every service):

    report = fuzz_server("127.0.0.1:50051", calls_per_method=40, seed=0)
    report.assert_clean()      # 0 UNKNOWN/INTERNAL/UNAVAILABLE, 0 calls past the deadline
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

# Infrastructure services every k4d server registers; fuzzing them tests grpcio, not us.
INFRA_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                  "grpc.reflection.v1.ServerReflection")
# A client error is a fine answer to garbage; these are not.
BAD_CODES = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                       grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
                       grpc.StatusCode.DEADLINE_EXCEEDED})
LONG = 5000  # longer than PATH_MAX (4096) and NAME_MAX (255)
LONG_REPEATED = 10_000
DEADLINE_SLACK_S = 2.0
WARM_UP_DEADLINE_S = 120.0

_I32 = (0, 1, -1, 2, 3, 7, 49, 2**31 - 1, -(2**31), 1_000_000)
_I64 = _I32 + (2**63 - 1, -(2**63), 2**53 + 1)
_U32 = (0, 1, 2, 3, 7, 49, 2**31, 2**32 - 1, 65_536)
_U64 = _U32 + (2**63, 2**64 - 1)
_DOUBLES = (math.nan, math.inf, -math.inf, 1.7e308, -1.7e308, 5e-324, -0.0, 0.0, 1.0, -1.0,
            0.5, 1e-9, 3.0)
_FLOATS = (math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, 1e-45, -0.0, 0.0, 1.0, -1.0, 0.5)
_STRINGS = (
    "", " ", "panda", "a" * LONG, "\u00e9" * (LONG // 2), "../../../../etc/passwd", "/etc/passwd",
    "file:///etc/passwd", "s3://k4d/" + "k" * LONG, "s3://", "registry:" + "m" * LONG,
    "registry:tiny/../../x", "jobs/../../x", "x\x00y", "%s%s%n{0}{}", "\ufffe\uffff",
    "/" + "d/" * (LONG // 2), "job-1", "tiny", "http://169.254.169.254/latest/meta-data",
    "z" * 200_000, "n" * 300, "\u00e9" * 200,
)
_BYTES_SIZES = (0, 1, 16, 1000, 256 * 1024)
_REPEATED_COUNTS = (0, 1, 2, 5, LONG_REPEATED)
_SCALARS = {
    FieldDescriptor.CPPTYPE_INT32: _I32, FieldDescriptor.CPPTYPE_INT64: _I64,
    FieldDescriptor.CPPTYPE_UINT32: _U32, FieldDescriptor.CPPTYPE_UINT64: _U64,
    FieldDescriptor.CPPTYPE_DOUBLE: _DOUBLES, FieldDescriptor.CPPTYPE_FLOAT: _FLOATS,
}


@dataclass
class Failure:
    method: str
    code: str
    details: str
    seconds: float
    request: str

    def __str__(self) -> str:
        return (f"{self.method}: {self.code} after {self.seconds:.1f} s: {self.details[:300]!r} "
                f"(request: {self.request})")


@dataclass
class FuzzReport:
    calls: int = 0
    codes: dict[str, dict[str, int]] = field(default_factory=dict)  # method -> code -> n
    slowest_s: dict[str, float] = field(default_factory=dict)  # method -> longest call
    failures: list[Failure] = field(default_factory=list)
    health_before: dict[str, str] = field(default_factory=dict)
    health_after: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, method: str, code: str, seconds: float = 0.0) -> None:
        self.calls += 1
        self.slowest_s[method] = max(self.slowest_s.get(method, 0.0), seconds)
        per_method = self.codes.setdefault(method, {})
        per_method[code] = per_method.get(code, 0) + 1

    def problems(self) -> list[str]:
        out = [str(f) for f in self.failures]
        if self.health_after != self.health_before:
            out.append(f"health changed: before {self.health_before}, after {self.health_after}")
        if self.health_after.get("") != "SERVING":
            out.append(f"server not SERVING after the fuzz run: {self.health_after}")
        return out

    def assert_clean(self) -> None:
        problems = self.problems()
        assert not problems, f"{len(problems)} problems in {self.calls} calls:\n" + "\n".join(
            problems[:40])

    def summary(self) -> str:
        lines = [f"{self.calls} calls in {self.seconds:.1f} s"]
        for method, codes in sorted(self.codes.items()):
            lines.append(f"  {method}: " + ", ".join(f"{c} {n}" for c, n in sorted(codes.items()))
                         + f" (slowest {self.slowest_s.get(method, 0.0):.2f} s)")
        return "\n".join(lines)


class HostileMessages:
    """Builds hostile instances of any message type from its descriptor."""

    def __init__(self, rng: random.Random, *, max_depth: int = 6, deep_depth: int = 60,
                 extra_strings: Sequence[str] = ()):
        self.rng, self.max_depth, self.deep_depth = rng, max_depth, deep_depth
        self.strings = _STRINGS + tuple(extra_strings)

    def build(self, cls: type[Message]) -> Message:
        message = cls()
        deep = self.rng.random() < 0.1
        self._fill(message, 0, self.deep_depth if deep else self.max_depth)
        return message

    def mutate(self, seed: Message) -> Message:
        """A copy of a valid `seed` with one to three of its fields, anywhere in it, given
        hostile values: the rest stays valid, so the request gets past the first checks
        and reaches deeper code."""
        message = type(seed)()
        message.CopyFrom(seed)
        for _ in range(self.rng.choice((1, 1, 2, 3))):
            parent, fd = self.rng.choice(_field_slots(message))
            parent.ClearField(fd.name)
            self._fill_field(parent, fd, 0, self.max_depth)
        return message

    def _fill(self, message: Message, depth: int, max_depth: int) -> None:
        density = self.rng.choice((0.2, 0.5, 0.9, 1.0))
        for fd in message.DESCRIPTOR.fields:
            if self.rng.random() > density:
                continue
            if fd.message_type is not None and depth >= max_depth:
                continue
            self._fill_field(message, fd, depth, max_depth)

    def _fill_field(self, message: Message, fd: FieldDescriptor, depth: int,
                    max_depth: int) -> None:
        if _is_map(fd):
            self._fill_map(getattr(message, fd.name), fd, depth, max_depth)
        elif fd.is_repeated:
            self._fill_repeated(message, fd, depth, max_depth)
        elif fd.message_type is not None:
            self._fill(getattr(message, fd.name), depth + 1, max_depth)
            getattr(message, fd.name).SetInParent()
        else:
            setattr(message, fd.name, self.scalar(fd))

    def _fill_repeated(self, message: Message, fd: FieldDescriptor, depth: int,
                       max_depth: int) -> None:
        container = getattr(message, fd.name)
        count = self.rng.choice(_REPEATED_COUNTS)
        if fd.message_type is not None:
            for _ in range(min(count, 64)):
                self._fill(container.add(), depth + 1, max_depth)
        elif count == LONG_REPEATED:
            value = self.scalar(fd)  # one value, many times: cheap to build, big on the wire
            if fd.cpp_type == FieldDescriptor.CPPTYPE_STRING:
                value = value[:64]
            container.extend([value] * count)
        else:
            container.extend(self.scalar(fd) for _ in range(count))

    def _fill_map(self, container, fd: FieldDescriptor, depth: int, max_depth: int) -> None:
        key_fd, value_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        for _ in range(self.rng.choice((0, 1, 3, 200))):
            key = self.scalar(key_fd)
            if value_fd.message_type is not None:
                self._fill(container[key], depth + 1, max_depth)
            else:
                container[key] = self.scalar(value_fd)

    def scalar(self, fd: FieldDescriptor):
        cpp = fd.cpp_type
        if cpp == FieldDescriptor.CPPTYPE_BOOL:
            return self.rng.random() < 0.5
        if cpp == FieldDescriptor.CPPTYPE_ENUM:
            known = [v.number for v in fd.enum_type.values]
            return self.rng.choice(known + [max(known) + 1, 999, -1, 2**31 - 1])
        if cpp == FieldDescriptor.CPPTYPE_STRING:
            if fd.type == FieldDescriptor.TYPE_BYTES:
                return self.rng.randbytes(self.rng.choice(_BYTES_SIZES))
            return self.rng.choice(self.strings)
        return self.rng.choice(_SCALARS[cpp])


def _field_slots(message: Message, limit: int = 8) -> list[tuple[Message, FieldDescriptor]]:
    """(message, field) for every field of `message` and of the sub-messages it holds (the
    first `limit` items of repeated ones): where a mutation may land."""
    slots = [(message, fd) for fd in message.DESCRIPTOR.fields]
    for fd, value in message.ListFields():
        if fd.message_type is None or _is_map(fd):
            continue
        for item in (value[:limit] if fd.is_repeated else [value]):
            slots += _field_slots(item, limit)
    return slots


def _is_map(fd: FieldDescriptor) -> bool:
    return (fd.is_repeated and fd.message_type is not None
            and fd.message_type.GetOptions().map_entry)


def nested_groups(depth: int, field_number: int = 15_000) -> bytes:
    """Wire bytes of an unknown group nested `depth` deep (parsers recurse on groups)."""
    start = _varint(field_number << 3 | 3)
    end = _varint(field_number << 3 | 4)
    return start * depth + end * depth


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def request_bytes(hostile: HostileMessages, cls: type[Message],
                  seeds: Sequence[Message] = ()) -> tuple[bytes, str]:
    """One hostile request for `cls`, serialized, with a short description for reports:
    mostly a mutated seed when valid seed requests are given, else built from scratch."""
    if seeds and hostile.rng.random() < 0.7:
        message = hostile.mutate(hostile.rng.choice(seeds))
        return message.SerializeToString(), "mutated seed: " + _describe(message)
    roll = hostile.rng.random()
    if roll < 0.04:
        data = hostile.rng.randbytes(hostile.rng.randint(1, 300))
        return data, f"{len(data)} random bytes"
    if roll < 0.08:
        depth = hostile.rng.choice((50, 5000))
        return nested_groups(depth), f"unknown group nested {depth} deep"
    message = hostile.build(cls)
    return message.SerializeToString(), _describe(message)


def _describe(message: Message, limit: int = 400) -> str:
    parts = []
    for fd, value in message.ListFields():
        if fd.message_type is not None and not fd.is_repeated:
            parts.append(f"{fd.name}{{{_describe(value, 120)}}}")
        elif fd.is_repeated:
            parts.append(f"{fd.name}[{len(value)}]")
        elif isinstance(value, str | bytes) and len(value) > 24:
            parts.append(f"{fd.name}={value[:16]!r}...({len(value)})")
        else:
            parts.append(f"{fd.name}={value!r}")
    text = " ".join(parts)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class Method:
    path: str                 # /package.Service/Method
    descriptor: MethodDescriptor
    input_class: type[Message]
    seeds: tuple[Message, ...] = ()  # valid requests to mutate (input_class instances)


def discover_methods(channel: grpc.Channel, services: Iterable[str] | None = None) -> list[Method]:
    """Every method of every service the server's reflection lists (less INFRA_SERVICES),
    or only those of `services`."""
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    names = [n for n in database.get_services() if n not in INFRA_SERVICES]
    if services is not None:
        names = [n for n in names if n in set(services)]
    methods = []
    for name in sorted(names):
        service = pool.FindServiceByName(name)
        for method in service.methods:
            methods.append(Method(f"/{service.full_name}/{method.name}", method,
                                  message_factory.GetMessageClass(method.input_type)))
    return methods


def health(channel: grpc.Channel, services: Iterable[str], timeout_s: float = 5.0) -> dict[str, str]:
    """Health status name of "" (the server) and each service."""
    stub = health_pb2_grpc.HealthStub(channel)
    out = {}
    for name in ["", *services]:
        try:
            status = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=timeout_s).status
            out[name] = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        except grpc.RpcError as exc:
            out[name] = exc.code().name
    return out


def _call(channel: grpc.Channel, method: Method, hostile: HostileMessages,
          deadline_s: float) -> tuple[grpc.StatusCode, str, float, str, int]:
    """One call -> (code, details, seconds, request description, responses received)."""
    desc = method.descriptor
    identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
    received = 0
    if desc.client_streaming:
        requests = [request_bytes(hostile, method.input_class, method.seeds)
                    for _ in range(hostile.rng.choice((0, 1, 2, 4)))]
        payload, what = iter([r[0] for r in requests]), "; ".join(r[1] for r in requests)[:400]
    else:
        payload, what = request_bytes(hostile, method.input_class, method.seeds)
    kind = ("stream" if desc.client_streaming else "unary") + "_" + (
        "stream" if desc.server_streaming else "unary")
    callable_ = getattr(channel, kind)(method.path, request_serializer=identity,
                                       response_deserializer=identity)
    started = time.monotonic()
    try:
        if desc.server_streaming:
            for _ in callable_(payload, timeout=deadline_s):
                received += 1
        else:
            callable_(payload, timeout=deadline_s)
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    return code, details, time.monotonic() - started, what, received


def fuzz_channel(channel: grpc.Channel, *, calls_per_method: int = 40, seed: int = 0,
                 deadline_s: float = 10.0, services: Iterable[str] | None = None,
                 seeds: Mapping[str, Sequence[Message]] | None = None,
                 extra_strings: Sequence[str] = ()) -> FuzzReport:
    """Fuzz every discovered method `calls_per_method` times; a report of what came back.
    `seeds` maps a method path ("/kinema4d.v1.KinematicsService/ForwardKinematics") to
    valid requests (any message class of that type): most calls of that method then mutate
    one of them. A server stream that delivered messages and was still open at the
    deadline is a live stream (Watch of a running job), not a failure."""
    methods = discover_methods(channel, services)
    unknown = sorted(set(seeds or {}) - {m.path for m in methods})
    if unknown:
        raise ValueError(f"seeds for methods the server does not have: {unknown}")
    methods = [dataclasses.replace(m, seeds=tuple(
        m.input_class.FromString(s.SerializeToString()) for s in (seeds or {}).get(m.path, ())))
        for m in methods]
    names = sorted({m.path.split("/")[1] for m in methods})
    report = FuzzReport(health_before=health(channel, names))
    _warm_up(channel, methods, report, WARM_UP_DEADLINE_S)
    hostile = HostileMessages(random.Random(seed), extra_strings=extra_strings)
    started = time.monotonic()
    for _ in range(calls_per_method):
        for method in methods:
            code, details, seconds, what, received = _call(channel, method, hostile, deadline_s)
            report.count(method.path, code.name, seconds)
            live_stream = (method.descriptor.server_streaming and received
                           and code is grpc.StatusCode.DEADLINE_EXCEEDED)
            if (code in BAD_CODES and not live_stream) or seconds > deadline_s + DEADLINE_SLACK_S:
                report.failures.append(Failure(method.path, code.name, details, seconds, what))
    report.seconds = time.monotonic() - started
    report.health_after = health(channel, names)
    return report


def _warm_up(channel: grpc.Channel, methods: Sequence[Method], report: FuzzReport,
             deadline_s: float) -> None:
    """One empty request per method before the measured calls: a first call may import
    what the service loads lazily (the generator's registry pulls in torch), start-up
    cost that a loaded CI machine can stretch past the per-call deadline. Its answer is
    still checked, under a longer deadline; it is not counted."""
    identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
    for method in methods:
        desc = method.descriptor
        kind = ("stream" if desc.client_streaming else "unary") + "_" + (
            "stream" if desc.server_streaming else "unary")
        call = getattr(channel, kind)(method.path, request_serializer=identity,
                                      response_deserializer=identity)
        started = time.monotonic()
        try:
            payload = iter([]) if desc.client_streaming else b""
            if desc.server_streaming:
                for _ in call(payload, timeout=deadline_s):
                    pass
            else:
                call(payload, timeout=deadline_s)
        except grpc.RpcError as exc:
            if exc.code() in BAD_CODES:
                report.failures.append(Failure(method.path, exc.code().name, exc.details() or "",
                                               time.monotonic() - started, "warm-up: empty"))


def fuzz_server(address: str, security=None, **kwargs) -> FuzzReport:
    """`fuzz_channel` on a fresh channel to `address` (host:port), with TLS and a token
    as `security` (a `k4d.grpc_client.ClientSecurity`; default: plaintext, no token)."""
    from k4d.grpc_client import create_channel

    with create_channel(address, tracing=False, security=security) as channel:
        return fuzz_channel(channel, **kwargs)
