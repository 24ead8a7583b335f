"""Faults injected into a running cluster, and what TensorFlow did about them, from the chief's events.

The chief of a synchronous ParameterServerStrategy run traces its steps (``strategy_train
--trace-steps``): a ``step`` event per step with the worker that ran each slice, and a
``tf_error`` event for each error TensorFlow's coordinator logs. ``inject`` follows those events,
kills tasks once the chief has made given steps (``Cluster.kill(..., expected=True)``, so what
happens next is TensorFlow's doing) and notes every step, kill and error on this process's
clock; ``Trace.summary()`` says, per kill, how long the coordinator took to report it and how
many steps ran after it, on which workers. (A lost worker's closures are retried on the others;
a lost ps ends training in the chief.)

Imports nothing from the layers above it (it is given the ``Cluster``; tasks import ``step_line``).
More in docs/internals.md, section labkit.wire (what ``ClusterCoordinator`` does on each fault).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from labkit.wire import events
from labkit.wire.protocol import TaskFailed


def step_line(step: dict) -> str:
    """The chief's log line, for people, of one traced step (``labkit.learning.epochs.SyncPSEpochs``'s dict)."""
    on = " ".join(str(w) for w in step["slices_on"])
    return f"step {step['step']}: {step['seconds']:.3f} s, loss {step['loss']:.4f}, slices on workers {on}"


@dataclass
class Trace:
    """What ``inject`` saw: times are ``time.time()`` on this process's clock."""

    steps: list = field(default_factory=list)  # {"step", "seconds", "loss", "slices_on", "t" (when it came)}
    kills: list = field(default_factory=list)  # {"task", "after_step", "t"}
    events: list = field(default_factory=list)  # {"t", "message"}: the errors the coordinator logged
    failure: dict | None = None  # the TaskFailed that ended the run, if one did
    result: object = None  # the cluster's result, if it finished

    def summary(self) -> list[dict]:
        """Per kill: the task, the step it came after; the coordinator's first error after it
        (``error_s`` later; ``error_names_task``: whether that line names the task: a lost ps
        shows first as workers' closures failing); the failure that ended the run, if it
        ended after this kill (``run_failed_s``); the steps completed after it (before the next
        kill), the workers their slices ran on, and the median step time before and after. The
        first step after a kill was in flight when it landed (a slice may have finished on the
        task just killed): ``first_step_after_s`` is its time, and the workers and step times
        after it are those of the steps that followed."""
        out = []
        bounds = [k["t"] for k in self.kills[1:]] + [float("inf")]
        for kill, until in zip(self.kills, bounds):
            before = [s for s in self.steps if s["t"] < kill["t"]]
            after = [s for s in self.steps if kill["t"] <= s["t"] < until]
            errors = [e for e in self.events if kill["t"] <= e["t"] < until]
            naming = [e for e in errors if _names(e["message"], kill["task"])]
            first = (naming or errors or [None])[0]
            failed = self.failure is not None and kill["t"] <= self.failure["t"] < until
            out.append(
                {
                    "task": kill["task"],
                    "after_step": kill["after_step"],
                    "error_s": first["t"] - kill["t"] if first else None,
                    "error": first["message"][:200] if first else None,
                    "error_names_task": bool(naming),
                    "run_failed_s": self.failure["t"] - kill["t"] if failed else None,
                    "run_failed": f"{self.failure['task']}: {self.failure['error'] or 'see its log'}"
                    if failed
                    else None,
                    "steps_after": len(after),
                    "slices_on_after": sorted({w for s in after[1:] for w in s["slices_on"]}),
                    "slices_per_step_after": sorted({len(s["slices_on"]) for s in after[1:]}),
                    "step_s_before": statistics.median(s["seconds"] for s in before[-10:]) if before else None,
                    "step_s_after": statistics.median(s["seconds"] for s in after[1:]) if after[1:] else None,
                    "first_step_after_s": after[0]["seconds"] if after else None,
                }
            )
        return out


def _names(message: str, task: str) -> bool:
    """Whether a coordinator message is about ``task`` (``worker:1`` -> ``/job:worker/replica:0/task:1``)."""
    job, index = task.split(":")
    return f"/job:{job}/replica:0/task:{index}" in message or f"/job:{job}/task:{index}" in message


def inject(cluster, kills) -> Trace:
    """Follow ``cluster`` (started if new) and kill each ``(after_step, task)`` of ``kills`` once
    the chief has made that step; return the ``Trace`` when the run ends, by finishing or by a
    ``TaskFailed`` (kept in ``Trace.failure``, with the error and the time TensorFlow stopped the
    failed task: its ``peer_failure`` event, else when it wrote its result)."""
    trace = Trace()
    pending = sorted(kills)
    stopped: dict[str, events.PeerFailure] = {}

    def note(e: events.Event) -> None:
        if isinstance(e, events.PeerFailure):
            stopped[e.task] = e
        if not e.chief:
            return
        if isinstance(e, events.Step):
            trace.steps.append(
                {"step": e.step, "seconds": e.seconds, "loss": e.loss, "slices_on": list(e.slices_on), "t": time.time()}
            )
        elif isinstance(e, events.TfError):
            trace.events.append({"t": time.time(), "message": e.message})

    def kill_due() -> bool:
        while pending and trace.steps and trace.steps[-1]["step"] >= pending[0][0]:
            after, task = pending.pop(0)
            cluster.kill(task, expected=True)
            trace.kills.append({"task": task, "after_step": trace.steps[-1]["step"], "t": time.time()})
        return False  # never stop following: the run ends by itself, or fails

    try:
        trace.result = cluster.follow(note, until=kill_due)
    except TaskFailed as e:
        met = stopped.get(e.task)
        trace.failure = {
            "task": e.task,
            "returncode": e.returncode,
            "error": met.error if met else None,
            "message": str(e).splitlines()[0],
            "log_tail": e.log_tail,
            "t": met.t if met else _ended_epoch(cluster, e.task) or time.time(),
        }
    return trace


def _ended_epoch(cluster, task: str) -> float | None:
    """When ``task`` wrote its result (``ended_epoch``), from what the stopped cluster gathered."""
    result = getattr(cluster, "result", None)
    if result is None:
        return None
    for t in result:
        if t.name == task and t.result:
            return t.result.get("ended_epoch")
    return None
