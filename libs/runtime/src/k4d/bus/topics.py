"""Topic names (DESIGN.md, "Contracts"); payloads are kinema4d.v1 event protos."""

SIM_REQUESTED = "k4d.sim.requested"
SIM_KINEMATICS = "k4d.sim.kinematics"
SIM_PROJECTED = "k4d.sim.projected"
SIM_COMPLETED = "k4d.sim.completed"
SIM_FAILED = "k4d.sim.failed"
SIM_PROGRESS = "k4d.sim.progress"  # ADR 000: per-step progress for Watch
TRAIN_REQUESTED = "k4d.train.requested"
TRAIN_EVENTS = "k4d.train.events"
MODEL_PUBLISHED = "k4d.model.published"

ALL_TOPICS = (SIM_REQUESTED, SIM_KINEMATICS, SIM_PROJECTED, SIM_COMPLETED, SIM_FAILED,
              SIM_PROGRESS, TRAIN_REQUESTED, TRAIN_EVENTS, MODEL_PUBLISHED)


def dlq(topic: str) -> str:
    """Dead-letter topic of `topic`: messages that failed every attempt land there."""
    return f"{topic}.dlq"
