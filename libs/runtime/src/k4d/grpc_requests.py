"""Admission of every gRPC request before its servicer sees it: the bytes must parse, and
every string must be of a sane length (k4d.limits), or the call is INVALID_ARGUMENT naming
the field.

- Decoding: grpcio calls a method's request deserializer before any interceptor runs the
  handler and answers INTERNAL "Exception deserializing request!" when it raises. Garbage
  bytes, truncated messages and nesting past the parser's recursion limit are the
  client's error, so the interceptor swaps in a deserializer that returns an `Undecodable`
  marker, and the handler raises InvalidArgument on field "request" when it meets one.
- Strings, by field-name convention (any service, present and future): `uri`, `path`,
  `*_uri(s)`, `*_path(s)` are paths or URIs (k4d.limits.check_uri: PATH_MAX and NAME_MAX
  bounds); `*_json` fields are documents bounded by the message size; names (`name`,
  `version`, `*_name(s)`, `*_id`, `*_key`) are at most MAX_NAME_CHARS; any other string at
  most MAX_TEXT_CHARS.

Install `RequestCheckInterceptor` inside (after) the ErrorMappingInterceptor, which turns
the InvalidArgument into the status with its field violation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from k4d.errors import InvalidArgument
from k4d.limits import MAX_NAME_CHARS, check_name, check_uri

MAX_DETAIL_CHARS = 200
MAX_TEXT_CHARS = 1024
_URI_NAMES = ("uri", "path")
_URI_SUFFIXES = ("_uri", "_uris", "_path", "_paths")
_NAME_NAMES = ("name", "version")
_NAME_SUFFIXES = ("_name", "_names", "_id", "_key")


class Undecodable:
    """Stands in for a request message whose bytes did not parse."""

    def __init__(self, error: Exception):
        self.error = error

    def invalid(self) -> InvalidArgument:
        return InvalidArgument.for_field(
            "request", f"not a valid message of this method's request type: "
                       f"{str(self.error)[:MAX_DETAIL_CHARS]}")


def check_strings(message: Message, prefix: str = "") -> None:
    """InvalidArgument naming the first string field of `message` (recursively) that breaks
    its length bound."""
    for fd, value in message.ListFields():
        path = prefix + fd.name
        if fd.message_type is not None:
            if fd.message_type.GetOptions().map_entry:
                _check_map(fd, value, path)
            elif fd.is_repeated:
                for i, item in enumerate(value):
                    check_strings(item, f"{path}[{i}].")
            else:
                check_strings(value, path + ".")
        elif fd.type == FieldDescriptor.TYPE_STRING:
            for i, item in enumerate(value) if fd.is_repeated else ((None, value),):
                _check_string(fd.name, path if i is None else f"{path}[{i}]", item)


def _check_map(fd: FieldDescriptor, value, path: str) -> None:
    value_fd = fd.message_type.fields_by_name["value"]
    for key, item in value.items():
        if isinstance(key, str):
            check_name(key, f"{path}[key]")
        if value_fd.message_type is not None:
            check_strings(item, f"{path}[{key!r:.40}].")
        elif value_fd.type == FieldDescriptor.TYPE_STRING:
            check_name(item, f"{path}[{key!r:.40}]", MAX_TEXT_CHARS)


def _check_string(name: str, path: str, value: str) -> None:
    if name.endswith("_json"):
        return
    if name in _URI_NAMES or name.endswith(_URI_SUFFIXES):
        check_uri(value, path)
    elif name in _NAME_NAMES or name.endswith(_NAME_SUFFIXES):
        check_name(value, path, MAX_NAME_CHARS)
    else:
        check_name(value, path, MAX_TEXT_CHARS)


def _lenient(deserializer: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def parse(data: bytes):
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, RecursionError, ...: all the client's bytes
            return Undecodable(exc)
    return parse


def _checked(request):
    if isinstance(request, Undecodable):
        raise request.invalid()
    if isinstance(request, Message):
        check_strings(request)
    return request


def _checked_stream(requests: Iterator) -> Iterator:
    for request in requests:
        yield _checked(request)


class RequestCheckInterceptor(grpc.ServerInterceptor):
    """Undecodable request bytes or an over-long string -> InvalidArgument naming it."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        options = {"request_deserializer": _lenient(handler.request_deserializer),
                   "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            unary_unary = handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: unary_unary(_checked(request), context), **options)
        if handler.unary_stream is not None:
            unary_stream = handler.unary_stream

            def streaming(request, context):
                yield from unary_stream(_checked(request), context)
            return grpc.unary_stream_rpc_method_handler(streaming, **options)
        if handler.stream_unary is not None:
            stream_unary = handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(
                lambda requests, context: stream_unary(_checked_stream(requests), context),
                **options)
        stream_stream = handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(
            lambda requests, context: stream_stream(_checked_stream(requests), context),
            **options)
