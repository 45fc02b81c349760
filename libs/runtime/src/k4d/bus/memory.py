"""In-process bus with Kafka's group semantics, for the embedded mode and unit tests.

Topics are append-only partition logs kept in memory. Each group has committed offsets
and members; partitions are dealt round-robin to the members in join order, and every
membership change makes the members restart from the committed offsets, exactly like
an eager Kafka rebalance. So a consumer that closes (or is dropped) before committing
leaves its messages to the next member of the group.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from k4d.bus.base import Bus, CommitFailed, Consumer, Message, topic_list

TopicPartition = tuple[str, int]


@dataclass
class _Group:
    members: list[InProcessConsumer] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    generation: int = 0


class InProcessBus(Bus):
    def __init__(self, partitions: int = 1):
        self.partitions = partitions
        self._cond = threading.Condition()
        self._logs: dict[str, list[list[Message]]] = {}
        self._groups: dict[str, _Group] = {}
        self._round_robin = 0

    def ensure_topics(self, topics: Iterable[str]) -> None:
        with self._cond:
            for topic in topics:
                self._logs.setdefault(topic, [[] for _ in range(self.partitions)])

    def _send(self, topic, key, value, headers):
        self.ensure_topics([topic])
        with self._cond:
            logs = self._logs[topic]
            if key is None:
                self._round_robin += 1
                partition = self._round_robin % len(logs)
            else:
                partition = zlib.crc32(key) % len(logs)
            log = logs[partition]
            log.append(Message(topic, partition, len(log), key, value, dict(headers)))
            self._cond.notify_all()

    def consumer(self, topics: str | Sequence[str], group_id: str, *, from_beginning: bool = True):
        topics = topic_list(topics)
        self.ensure_topics(topics)
        with self._cond:
            group = self._groups.setdefault(group_id, _Group())
            member = InProcessConsumer(self, group, topics, from_beginning)
            group.members.append(member)
            group.generation += 1
            self._cond.notify_all()
        return member

    def reader(self, topics: str | Sequence[str]) -> InProcessConsumer:
        topics = topic_list(topics)
        self.ensure_topics(topics)
        with self._cond:
            # A group of its own that nobody else joins: every partition, from offset 0.
            group = _Group()
            member = InProcessConsumer(self, group, topics, True)
            group.members.append(member)
            group.generation += 1
        return member

    def end_offsets(self, topic: str) -> list[int]:
        with self._cond:
            return [len(log) for log in self._logs.get(topic, [])]

    def committed(self, group_id: str, topic: str, partition: int = 0) -> int | None:
        with self._cond:
            group = self._groups.get(group_id)
            return group.committed.get((topic, partition)) if group else None

    # -- called by consumers with self._cond held ---------------------------------

    def _assignment(self, group: _Group, member: InProcessConsumer) -> list[TopicPartition]:
        owned = []
        for topic in member.topics:
            subscribers = [m for m in group.members if topic in m.topics]
            for partition in range(len(self._logs[topic])):
                if subscribers[partition % len(subscribers)] is member:
                    owned.append((topic, partition))
        return owned


class InProcessConsumer(Consumer):
    def __init__(self, bus: InProcessBus, group: _Group, topics: list[str], from_beginning: bool):
        self._bus, self._group, self.topics = bus, group, topics
        self._from_beginning = from_beginning
        self._generation = -1
        self._positions: dict[TopicPartition, int] = {}
        self._closed = False

    def _rebalance_if_needed(self) -> None:
        if self._generation == self._group.generation:
            return
        self._generation = self._group.generation
        self._positions = {}
        for tp in self._bus._assignment(self._group, self):
            start = 0 if self._from_beginning else len(self._bus._logs[tp[0]][tp[1]])
            self._positions[tp] = self._group.committed.get(tp, start)

    def _take(self, max_records: int) -> list[Message]:
        out: list[Message] = []
        for (topic, partition), position in self._positions.items():
            log = self._bus._logs[topic][partition]
            batch = log[position:position + max_records - len(out)]
            self._positions[(topic, partition)] = position + len(batch)
            out.extend(batch)
            if len(out) >= max_records:
                break
        return out

    def poll(self, timeout_s: float, max_records: int = 1) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        with self._bus._cond:
            while not self._closed:
                self._rebalance_if_needed()
                messages = self._take(max_records)
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0:
                    return messages
                self._bus._cond.wait(remaining)
        return []

    def end_offsets(self) -> dict[TopicPartition, int]:
        with self._bus._cond:
            self._rebalance_if_needed()
            return {tp: len(self._bus._logs[tp[0]][tp[1]]) for tp in self._positions}

    def positions(self) -> dict[TopicPartition, int]:
        with self._bus._cond:
            self._rebalance_if_needed()
            return dict(self._positions)

    def commit(self, message: Message) -> None:
        tp = (message.topic, message.partition)
        with self._bus._cond:
            # Like Kafka: only the partition's current owner may commit.
            if self._closed or tp not in self._bus._assignment(self._group, self):
                raise CommitFailed(f"{tp} is no longer assigned to this consumer")
            self._group.committed[tp] = message.offset + 1

    def close(self) -> None:
        with self._bus._cond:
            if self._closed:
                return
            self._closed = True
            self._group.members.remove(self)
            self._group.generation += 1
            self._bus._cond.notify_all()
