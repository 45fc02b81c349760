"""Actions JSON (k4d.actions.ActionSpec) -> the ActionSequence proto: the conversion lives
in the runtime with its inverse (`k4d.action_proto`, one tested pair)."""

from k4d.action_proto import spec_to_proto  # noqa: F401 - re-exported (inputs)
