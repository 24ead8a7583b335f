"""One loop that takes a grading batch's notebooks from their folders to their pages, whatever
runs them.

Each notebook is a ``Flight`` (``Batch.advance``) through four steps, each polled, none waited
on: ``prepare`` and its run on the executor; what the run left, read once, and the grader's own
checks; ``scoring.score`` and the sink's ``record``; its feedback page, after which its uid and
disk are given back. The executor's ``slots`` bounds the runs; the next notebook starts while
the last one's checks go on, as long as the memory limits of everything in flight fit the
executor's ``memory_mb``. Polling every flight in one loop keeps every run's limits while
another is checked or rendered. Stopping the batch (Ctrl-C, SIGTERM) kills everything in flight
and gives back its uids and disks.

More in docs/internals.md, section labkit.grading (each step, who does it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labkit.grading.judge.postrun import Checking
from labkit.grading.run.executor import Ready
from labkit.grading.judge.rubric import Score
from labkit.grading.run.runner import GraderFault, Job, RunResult, prepare, release
from labkit.grading.judge.scoring import Evidence, examined, notebook_scores, score

MAX_WHY = 300  # characters of an exception's message in a row


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:MAX_WHY]}{'...' if len(text) > MAX_WHY else ''}"


@dataclass(eq=False)
class Flight:
    """One notebook between its start and its page, and the step it waits on."""

    job: Job
    handle: object = None  # the executor's, while the notebook runs
    result: RunResult | None = None
    evidence: Evidence | None = None
    checks: object = None  # checks.Checking (or Ready), while the grader checks it
    page: object = None  # render.Rendering, while its page renders


def held_mb(f: Flight) -> float:
    """The memory limit of the step ``f`` is at: its run's, its checks' or its page's."""
    if f.result is None:
        return f.job.lab.memory_mb
    if f.checks is not None:
        return f.job.lab.check_memory_mb
    return f.page.memory_mb if f.page is not None else 0.0


class Batch:
    """Runs ``jobs`` on ``executor`` (see the module docstring). ``sink``: ``notes(job)`` ->
    the notes for its execution row; ``record(job, result, scored)`` -> its page's
    ``render.Task`` or None. ``setup``: what the grader's checks run in (``runner.Setup``)."""

    def __init__(self, executor, setup, sink=None):
        self.executor, self.setup, self.sink = executor, setup, sink
        self.pending: list[Job] = []
        self.flights: list[Flight] = []
        self.results: dict[tuple, RunResult] = {}

    def run(self, jobs: list[Job]) -> dict[tuple, RunResult]:
        """{job.key: RunResult} once every notebook's flight is over."""
        self.pending = list(jobs)
        try:
            while self.pending or self.flights:
                self.fill()
                if self.flights:
                    time.sleep(self.executor.interval)
                for flight in list(self.flights):
                    if self.advance(flight):
                        self.flights.remove(flight)
        finally:
            self.stop()
        return self.results

    def fill(self) -> None:
        """Prepare the next notebooks while there are slots, and start those that can run."""
        ready = []
        while self.pending and self._room(ready):
            job = self.pending.pop(0)
            early = self.prepared(job)
            if early is None:
                ready.append(job)
            else:  # not run (missing, unreadable, refused): its rows and page all the same
                flight = Flight(job)
                self.flights.append(flight)
                self.ended(flight, early)
        if ready:  # in flight before they start: a start that fails halfway still releases them all
            flights = [Flight(job) for job in ready]
            self.flights += flights
            for flight, handle in zip(flights, self.executor.start(ready)):
                flight.handle = handle

    @staticmethod
    def prepared(job: Job) -> RunResult | None:
        """``prepare``, inside the student's boundary: whatever reading their file raises is their row;
        the grader's own failure (``GraderFault``) is the batch's."""
        try:
            return prepare(job)
        except GraderFault:
            raise
        except Exception as e:  # noqa: BLE001 - the boundary: one student's file never stops the class
            return RunResult("unreadable", f"the grader could not read this notebook: {_why(e)}")

    def _room(self, ready: list[Job]) -> bool:
        """Whether the next pending notebook may start, beside ``ready`` (see the module docstring)."""
        slots, budget = self.executor.slots, self.executor.memory_mb
        if slots is not None and sum(f.result is None for f in self.flights) + len(ready) >= slots:
            return False
        if budget is None:
            return True
        held = sum(held_mb(f) for f in self.flights) + sum(job.lab.memory_mb for job in ready)
        return held == 0 or held + self.pending[0].lab.memory_mb <= budget

    def advance(self, f: Flight) -> bool:
        """Take ``f`` as far as it goes now; True once its last step is over (its job released)."""
        if f.result is None:
            result = self.executor.poll(f.handle)
            if result is None:
                return False
            self.ended(f, result)
        if f.checks is not None:
            checked = f.checks.poll()
            if checked is None:
                return False
            f.checks = None
            self.scored(f, checked)
        if f.page is not None:
            if f.page.poll() is None:
                return False
            f.page = None
        release(f.job)
        return True

    def ended(self, f: Flight, result: RunResult) -> None:
        """The run is over: read what it left, and start the grader's checks of it."""
        f.handle, f.result = None, result
        self.results[f.job.key] = result
        if self.sink is None:
            return
        try:
            f.evidence = examined(f.job, result)  # in a child, within that student's limits
        except Exception as e:  # noqa: BLE001 - the boundary: this notebook's rows say why, the batch goes on
            f.evidence = Evidence(
                {},
                {
                    c.name: Score(0.0, c.points, "grader-error", f"the grader could not read this run: {_why(e)}")
                    for c in f.job.lab.checks
                    if not (c.external or c.manual)
                },
                f"the grader could not read this run: {_why(e)}",
            )
        f.checks = self.checking(f.job, f.evidence)

    def checking(self, job: Job, evidence: Evidence):
        """The grader's checks of ``job`` (``poll()``: {check name: Score} once over)."""
        if not evidence.to_check:
            return Ready({})
        try:
            return Checking(
                job, self.setup, evidence.records, dict(job.lab.parameters), evidence.hidden, evidence.verified
            )
        except OSError as e:  # the grader could not start its own checks: they are unverified, and say why
            why = f"the grader could not start its checks: {type(e).__name__}: {e}"
            return Ready(
                {c.name: Score(0.0, c.points, "unverified", why) for c, _ in [*evidence.verified, *evidence.hidden]}
            )

    def scored(self, f: Flight, checked: dict) -> None:
        """The checks are over: score the run, and start its page. Whatever scoring or recording
        raises is recorded as this notebook's row (its answers not read), never the batch's end,
        unless the grader failed to write its own files (``GraderFault``: the batch's error)."""
        try:
            scored = score(f.job, f.result, f.evidence, checked, self.sink.notes(f.job))
            task = self.sink.record(f.job, f.result, scored)
        except GraderFault:
            raise
        except Exception as e:  # noqa: BLE001 - the boundary
            f.result = self.results[f.job.key] = RunResult(
                "unreadable", f"the grader could not score this notebook: {_why(e)}", seconds=f.result.seconds
            )
            scored = score(
                f.job, f.result, Evidence({}, notebook_scores(f.job, f.result, None, {})), {}, self.sink.notes(f.job)
            )
            task = self.sink.record(f.job, f.result, scored)
        f.page = task.start() if task is not None else None

    def stop(self) -> None:
        """End every flight still in the air: its run, its checks, its page; release its job."""
        running = [f.handle for f in self.flights if f.result is None and f.handle is not None]
        try:
            if running:
                self.executor.kill(running)
        finally:
            for f in self.flights:
                for step in (f.checks, f.page):
                    if step is not None:
                        step.kill()
                release(f.job)
            self.flights = []
