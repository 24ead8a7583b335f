"""What a task tells whoever watches it, typed: its events, one JSON object a line.

A task's log is for people; its events are for programs (progress bars, the live view, a lab's
printouts, a fault demo that kills a worker after its first epoch), so rewording a log line
changes nothing here. A task emits them on a channel of their own (``Channel``: a
``.events.jsonl`` file in its run directory, or the descriptor ``$LABKIT_EVENTS`` names, which
the ssh launcher carries home); ``labkit.distributed.launch.Cluster`` reads them as they come
(``Tail``) and hands them to its subscribers.

Each line carries ``v`` (``VERSION``; a reader refuses another), ``kind`` (the dataclass, from
``KINDS``: ``started``, ``epoch``, ``eval``, ``done``, ``ended`` ...), who (``task``, ``chief``),
when (``t``) and the shared cluster's ``config``. Imports nothing from labkit but the registry:
tasks and the launcher both import it.

More in docs/internals.md, section labkit.wire (an example line, every kind).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from labkit.core.registry import Registry

VERSION = 1
KINDS = Registry("event kind")
ENV = "LABKIT_EVENTS"  # a task's channel, when the launcher names one: a path, or "fd:N"
SUFFIX = ".events.jsonl"


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has: who (``task``; ``chief``: the task that leads the training,
    ``protocol.chief_of``), when (``t``, the task's ``time.time()``) and in which configuration of
    a shared cluster (``config``, None outside one)."""

    kind: ClassVar[str] = ""
    task: str = ""
    chief: bool = False
    t: float = 0.0
    config: str | None = None

    def to_json(self) -> str:
        return json.dumps({"v": VERSION, "kind": self.kind, **asdict(self)}, separators=(",", ":"), default=str)


def kind(name: str):
    """Register an ``Event`` dataclass as kind ``name`` (a class decorator)."""

    def register(cls):
        cls.kind = name
        return KINDS.add(name, dataclass(frozen=True, kw_only=True)(cls))

    return register


@kind("started")
class Started(Event):
    pid: int
    host: str
    program: str


@kind("mark")
class Mark(Event):
    label: str


@kind("config_started")
class ConfigStarted(Event):
    index: int
    count: int
    name: str


@kind("config_done")
class ConfigDone(Event):
    index: int
    count: int
    name: str
    status: str


@kind("resumed")
class Resumed(Event):
    start_epoch: int
    epochs: int


@kind("epoch")
class Epoch(Event):
    epoch: int
    epochs: int
    train_loss: float
    images_per_s: float
    seconds: float
    val_loss: float | None = None
    val_accuracy: float | None = None


@kind("step")
class Step(Event):
    step: int
    seconds: float
    loss: float
    slices_on: list = field(default_factory=list)


@kind("eval")
class Eval(Event):
    run: str | None
    global_step: int
    samples: int | None = None
    metrics: dict = field(default_factory=dict)


@kind("done")
class Done(Event):
    run: str | None
    local_steps: int
    global_steps: int | None = None
    seconds: float | None = None
    metrics: dict = field(default_factory=dict)


@kind("peer_failure")
class PeerFailure(Event):
    error: str
    message: str


@kind("tf_error")
class TfError(Event):
    message: str


@kind("ended")
class Ended(Event):
    status: str
    shutdown: str
    code: int


class UnknownEvent(Event):
    """An event of a kind this kit does not know (a newer task's): kept, its fields in ``data``."""

    def __init__(self, kind: str, data: dict, **common):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "data", data)
        super().__init__(**common)


def parse(line: str) -> Event:
    """The event of one line; a ValueError that says why for a line that is none."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg}): {line.strip()[:120]!r}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str):
        raise ValueError(f"not an event (no kind): {line.strip()[:120]!r}")
    if raw.get("v") != VERSION:
        raise ValueError(f"event format {raw.get('v')!r}, this kit reads {VERSION}: {line.strip()[:120]!r}")
    name = raw.pop("kind")
    raw.pop("v")
    if name not in KINDS:
        common = {f.name: raw.pop(f.name) for f in fields(Event) if f.name in raw}
        return UnknownEvent(name, raw, **common)
    cls = KINDS[name]
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in raw.items() if k in known})
    except TypeError as e:
        raise ValueError(f"an event of kind {name!r} without its fields ({e}): {line.strip()[:120]!r}") from None


# ------------------------------------------------------------------------------ the task's side


class Channel:
    """Where a task writes its events: ``target`` is a path (appended to) or ``"fd:N"`` (an open
    descriptor). Each event is one ``write`` of one line, so threads never interleave; a channel
    nobody reads any more (a closed pipe: the launcher is gone) drops events, never the task."""

    def __init__(self, target: str):
        if target.startswith("fd:"):
            self.fd = int(target[3:])
        else:
            self.fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.target = target

    def write(self, event: Event) -> None:
        data = (event.to_json() + "\n").encode()
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:  # EPIPE, EBADF: nobody reads this channel any more
            pass


def channel_for(run_dir: Path, task_type: str, index: int, environ=None) -> Channel:
    """The task's channel: ``$LABKIT_EVENTS`` when the launcher named one, else its file in ``run_dir``."""
    target = (os.environ if environ is None else environ).get(ENV) or str(
        Path(run_dir) / f"{task_type}-{index}{SUFFIX}"
    )
    return Channel(target)


def stamped(event: Event, task: str, chief: bool, config: str | None) -> Event:
    """``event`` with its task, chief flag, time and configuration filled in where it left them empty."""
    values = {
        "task": event.task or task,
        "chief": event.chief or chief,
        "t": event.t or time.time(),
        "config": event.config if event.config is not None else config,
    }
    if isinstance(event, UnknownEvent):
        return UnknownEvent(event.kind, event.data, **values)
    return type(event)(**{**{f.name: getattr(event, f.name) for f in fields(event)}, **values})


# ------------------------------------------------------------------------------ the reader's side


class Tail:
    """The events appended to ``path`` since the last read: whole lines only (a line being
    written waits for its end). A line that is no event is counted in ``bad``, with the first
    reason in ``problem``, and skipped: the stream goes on."""

    def __init__(self, path: Path):
        self.path, self.offset = Path(path), 0
        self.bad, self.problem = 0, ""

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            if not line.strip():
                continue
            try:
                out.append(parse(line))
            except ValueError as e:
                self.bad += 1
                self.problem = self.problem or f"{self.path.name}: {e}"
        return out


def read_all(path: Path) -> list[Event]:
    """Every event of a finished task's file (a run's, read back)."""
    return Tail(path).read()
