"""Server interceptors, one concern each: error mapping, tracing, metrics.

Order in the server (outermost first): tracing -> metrics -> errors, so the span and the
metrics see the final status code that the error mapping chose.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace

from k4d.errors import InvalidArgument, K4DError
from k4d.logs import get_logger
from k4d.metrics import begin_work, end_work, runtime_metrics
from k4d.telemetry import extract_trace_context

log = get_logger(__name__)
INTERNAL_MESSAGE = "internal error"

# wrap(behavior, response_streaming) -> behavior
Wrapper = Callable[[Callable, bool], Callable]


def wrap_handler(handler: grpc.RpcMethodHandler | None, wrap: Wrapper):
    """Rebuild a method handler with its behaviour wrapped, whatever its streaming kind."""
    if handler is None:
        return None
    kinds = [("unary_unary", grpc.unary_unary_rpc_method_handler, False),
             ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
             ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
             ("stream_stream", grpc.stream_stream_rpc_method_handler, True)]
    for attr, factory, response_streaming in kinds:
        behavior = getattr(handler, attr)
        if behavior is not None:
            return factory(wrap(behavior, response_streaming),
                           request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
    return handler


def around(behavior: Callable, response_streaming: bool, before, after):
    """Call before(context) -> state, run the behaviour (draining a response stream),
    then after(state, context, exc_or_None)."""
    if response_streaming:
        def streaming(request, context):
            state = before(context)
            try:
                yield from behavior(request, context)
            except BaseException as exc:
                after(state, context, exc)
                raise
            after(state, context, None)
        return streaming

    def unary(request, context):
        state = before(context)
        try:
            response = behavior(request, context)
        except BaseException as exc:
            after(state, context, exc)
            raise
        after(state, context, None)
        return response
    return unary


def status_code_of(context, exc: BaseException | None) -> grpc.StatusCode:
    code = context.code()
    if code is not None:
        return code
    return grpc.StatusCode.OK if exc is None else grpc.StatusCode.UNKNOWN


def bad_request_status(exc: InvalidArgument) -> status_pb2.Status:
    """google.rpc.Status with a BadRequest detail listing every field violation."""
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
        for v in exc.violations]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(exc), details=[detail])


def _abort_for(exc: Exception, context, method: str):
    if context.code() not in (None, grpc.StatusCode.OK):
        raise exc  # the handler already aborted with its own status
    if isinstance(exc, grpc.RpcError) and not context.is_active():
        raise exc  # the client closed its request stream and left: no one to answer, no error
    if isinstance(exc, InvalidArgument):
        context.abort_with_status(rpc_status.to_status(bad_request_status(exc)))
    if isinstance(exc, K4DError):
        code = getattr(grpc.StatusCode, exc.grpc_code_name, grpc.StatusCode.INTERNAL)
        if code is grpc.StatusCode.INTERNAL:
            log.error("internal domain error in %s", method, exc_info=exc)
        context.abort(code, str(exc))
    # Unexpected: full details in the server log, nothing about internals to the client.
    log.error("unhandled exception in %s", method, exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)


class ErrorMappingInterceptor(grpc.ServerInterceptor):
    """K4DError -> its status code (INVALID_ARGUMENT with BadRequest details); any other
    exception -> INTERNAL "internal error" and a server-side log with the traceback."""

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method

        def wrap(behavior, response_streaming):
            if response_streaming:
                def streaming(request, context):
                    try:
                        yield from behavior(request, context)
                    except Exception as exc:
                        _abort_for(exc, context, method)
                return streaming

            def unary(request, context):
                try:
                    return behavior(request, context)
                except Exception as exc:
                    _abort_for(exc, context, method)
            return unary

        return wrap_handler(continuation(handler_call_details), wrap)


# Probes and tooling call these every few seconds; spans for them would bury real traces.
UNTRACED_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class TracingInterceptor(grpc.ServerInterceptor):
    """A SERVER span per RPC, child of the caller's `traceparent` metadata."""

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(UNTRACED_SERVICES):
            return continuation(handler_call_details)
        service, _, name = method.lstrip("/").rpartition("/")
        parent = extract_trace_context(dict(handler_call_details.invocation_metadata or ()))

        def before(context):
            span = trace.get_tracer("k4d.grpc").start_span(
                method.lstrip("/"), context=parent, kind=trace.SpanKind.SERVER,
                attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name})
            token = trace.use_span(span, end_on_exit=False)
            token.__enter__()
            return span, token

        def after(state, context, exc):
            span, token = state
            code = status_code_of(context, exc)
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
            token.__exit__(None, None, None)
            span.end()

        return wrap_handler(continuation(handler_call_details),
                            lambda behavior, streaming: around(behavior, streaming, before, after))


class MetricsInterceptor(grpc.ServerInterceptor):
    """Per method: request count by status code, and histograms of the whole handling time,
    of its queue time (what the handler spent in `k4d.metrics.waiting()`, e.g. the
    generator's sampling lock) and of its compute time (the rest)."""

    def __init__(self, metrics=None):
        self.metrics = metrics or runtime_metrics()

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method

        def before(context):
            return begin_work()

        def after(state, context, exc):
            timing, token = state
            queued, computed = timing.split()
            end_work(token)
            code = status_code_of(context, exc)
            self.metrics.rpc_requests.labels(method, code.name).inc()
            self.metrics.rpc_latency.labels(method).observe(queued + computed)
            self.metrics.rpc_queue.labels(method).observe(queued)
            self.metrics.rpc_compute.labels(method).observe(computed)

        return wrap_handler(continuation(handler_call_details),
                            lambda behavior, streaming: around(behavior, streaming, before, after))
