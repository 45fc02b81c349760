"""Inspect and replay dead-letter topics (`<topic>.dlq`), the runbook tool of docs/operations.md.

A stage worker (k4d.bus.worker.StageWorker) sends a message to `<topic>.dlq` after its last
failed attempt, with the original bytes and the headers k4d-error, k4d-error-type,
k4d-original-topic and k4d-original-offset. Stages are idempotent (deterministic output
keys), so once the cause is fixed the message can simply be published to its topic again.

  python infra/tools/dlq.py show k4d.sim.projected.dlq [--max 20]
  python infra/tools/dlq.py replay k4d.sim.projected.dlq [--max N] [--dry-run]

`show` reads without committing anything. `replay` republishes each message to its original
topic with `k4d-attempt: 1` and the error headers removed (job id and traceparent are kept,
so the replay joins the job's trace), committing in the group `k4d-dlq-replay` so a message
is replayed once even if the tool runs again. In a cluster, run it inside any k4d pod:
  kubectl -n k4d exec -i deploy/simulator -- python - show k4d.sim.projected.dlq < infra/tools/dlq.py
The broker address comes from --bootstrap or K4D_KAFKA_BOOTSTRAP.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator

from k4d.bus.base import (
    HEADER_ATTEMPT,
    HEADER_ERROR,
    HEADER_ERROR_TYPE,
    HEADER_JOB_ID,
    HEADER_ORIGINAL_OFFSET,
    HEADER_ORIGINAL_TOPIC,
    Bus,
    Consumer,
    Message,
)
from k4d.settings import current as current_settings

REPLAY_GROUP = "k4d-dlq-replay"
DLQ_SUFFIX = ".dlq"
_DEAD_LETTER_HEADERS = (HEADER_ERROR, HEADER_ERROR_TYPE, HEADER_ORIGINAL_TOPIC, HEADER_ORIGINAL_OFFSET)


def original_topic(message: Message) -> str:
    """Where a dead letter came from: its header, else the DLQ name without `.dlq`."""
    return message.header(HEADER_ORIGINAL_TOPIC) or message.topic.removesuffix(DLQ_SUFFIX)


def replay_headers(message: Message) -> dict[str, bytes]:
    """The dead letter's headers for a fresh first attempt: error headers dropped."""
    headers = {k: v for k, v in message.headers.items() if k not in _DEAD_LETTER_HEADERS}
    headers[HEADER_ATTEMPT] = b"1"
    return headers


def _messages(consumer: Consumer, limit: int | None, idle_s: float,
              join_timeout_s: float = 120.0) -> Iterator[Message]:
    """Messages until `limit` or until the topic stays quiet for `idle_s` seconds once the
    consumer has its partitions (the group join itself can take longer than `idle_s`)."""
    seen, started = 0, time.monotonic()
    quiet_since = started
    while limit is None or seen < limit:
        batch = consumer.poll(0.5, max_records=1)
        if not batch:
            now = time.monotonic()
            if not consumer.has_assignment():
                if now - started > join_timeout_s:
                    raise TimeoutError(f"no partitions assigned within {join_timeout_s:.0f} s")
                quiet_since = now
            elif now - quiet_since > idle_s:
                return
            continue
        quiet_since = time.monotonic()
        for message in batch:
            seen += 1
            yield message


def describe(message: Message) -> str:
    return (f"{message.topic}[{message.partition}]@{message.offset} "
            f"job={message.header(HEADER_JOB_ID) or '-'} "
            f"from={original_topic(message)}@{message.header(HEADER_ORIGINAL_OFFSET) or '?'} "
            f"attempts={message.header(HEADER_ATTEMPT) or '1'} "
            f"error={message.header(HEADER_ERROR_TYPE) or '-'}: {message.header(HEADER_ERROR) or ''}")


def show(bus: Bus, dlq_topic: str, *, limit: int | None = 20, idle_s: float = 15.0) -> list[Message]:
    """Read dead letters without committing (a throwaway group), print one line each."""
    group = f"k4d-dlq-show-{os.getpid()}-{time.time_ns()}"
    with bus.consumer(dlq_topic, group) as consumer:
        messages = list(_messages(consumer, limit, idle_s))
    for message in messages:
        print(describe(message))
    return messages


def replay(bus: Bus, dlq_topic: str, *, limit: int | None = None, idle_s: float = 15.0,
           dry_run: bool = False) -> int:
    """Republish dead letters to their original topics; returns how many were replayed."""
    replayed = 0
    with bus.consumer(dlq_topic, REPLAY_GROUP) as consumer:
        for message in _messages(consumer, limit, idle_s):
            target = original_topic(message)
            print(f"{'would replay' if dry_run else 'replay'} -> {target}: {describe(message)}")
            if dry_run:
                continue
            bus.publish(target, message.key, message.value, replay_headers(message))
            consumer.commit(message)  # after the publish: a crash in between replays it again
            replayed += 1
    return replayed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=current_settings().runtime.kafka_bootstrap,
                        help="Kafka bootstrap host:port (default: $K4D_KAFKA_BOOTSTRAP)")
    parser.add_argument("--idle-s", type=float, default=15.0,
                        help="stop after this many seconds without a new message")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("show", "replay"):
        p = sub.add_parser(name)
        p.add_argument("topic", help="a dead-letter topic, e.g. k4d.sim.projected.dlq")
        p.add_argument("--max", type=int, default=20 if name == "show" else None)
        if name == "replay":
            p.add_argument("--dry-run", action="store_true", help="print, publish nothing")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("no broker: pass --bootstrap or set K4D_KAFKA_BOOTSTRAP")
    if not args.topic.endswith(DLQ_SUFFIX):
        parser.error(f"{args.topic!r} is not a dead-letter topic (expected a name ending in .dlq)")

    from k4d.bus.kafka import KafkaBus

    with KafkaBus(args.bootstrap, client_id="k4d-dlq-tool") as bus:
        if args.command == "show":
            show(bus, args.topic, limit=args.max, idle_s=args.idle_s)
        else:
            count = replay(bus, args.topic, limit=args.max, idle_s=args.idle_s, dry_run=args.dry_run)
            print(f"replayed {count} message(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
