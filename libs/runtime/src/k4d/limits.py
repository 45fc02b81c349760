"""Length bounds for user-supplied names, paths and URIs, checked at the boundary (gRPC,
CLI, events) so that a hostile value is INVALID_ARGUMENT naming its field, never an
`OSError: File name too long` (INTERNAL) from deep inside a service.

Names (robots, models, versions, ids, keys) are short; paths and URIs may be long but stay
below the OS's PATH_MAX (4096 bytes), and each of their components below NAME_MAX (255
bytes, counted in UTF-8 as the kernel counts them).
"""

from __future__ import annotations

from k4d.errors import InvalidArgument

MAX_NAME_CHARS = 256
MAX_URI_CHARS = 2048
MAX_COMPONENT_BYTES = 255  # NAME_MAX of Linux file systems


def check_name(value: str, field: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """`value` unchanged, or InvalidArgument on `field` when longer than `max_chars` or
    holding a NUL (no file system or object store accepts one)."""
    if len(value) > max_chars:
        raise InvalidArgument.for_field(field, f"at most {max_chars} characters, got {len(value)}")
    if "\x00" in value:
        raise InvalidArgument.for_field(field, "must not contain a NUL character")
    return value


def check_uri(value: str, field: str, max_chars: int = MAX_URI_CHARS) -> str:
    """A path or URI: at most `max_chars`, no NUL, every `/`-separated component at most
    MAX_COMPONENT_BYTES in UTF-8."""
    check_name(value, field, max_chars)
    for component in value.split("/"):
        size = len(component.encode("utf-8", "surrogatepass"))
        if size > MAX_COMPONENT_BYTES:
            raise InvalidArgument.for_field(
                field, f"a path component is {size} bytes; at most {MAX_COMPONENT_BYTES}")
    return value
