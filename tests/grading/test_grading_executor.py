"""The grading batch's loop (``batch.Batch``) driven by a fake executor, and the executors'
registry: no notebook, no kernel, no sandbox. The fake counts polls, not seconds, so what
happens in which order is exact: which notebooks start, when each is scored, that its uid and
disk go back once its page is written, that a run's limit is enforced while another notebook's page renders, and what
is killed when the grader is interrupted."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from helpers import runs_at_once
from labkit.grading import run
from labkit.grading.run import batch, executor, runner
from labkit.grading.judge.rubric import load_rubric
from labkit.grading.run.runner import Job, RunResult
from labkit.notebook.record import MIME

RUBRIC = """
[labs.a]
notebook = "a.ipynb"
notebook_timeout = 60
[[labs.a.checks]]
name = "done"
kind = "record"
points = 1
record = "done"
"""


class FakeRun:
    """A run that ends after ``polls`` polls as ``status``; ``limit``: the poll at which the
    executor stops it as over its time (as ``runner._Running`` does with a clock)."""

    def __init__(self, job: Job, polls: int, status: str = "ok", limit: int | None = None):
        self.job, self.polls, self.status, self.limit, self.count = job, polls, status, limit, 0


class FakeExecutor(executor.Executor):
    name = "fake"
    interval = 0.0

    def __init__(self, slots, plan: dict, events: list, interrupt_at: int | None = None, memory_mb=None):
        self.slots, self.plan, self.events, self.interrupt_at, self.polls = slots, plan, events, interrupt_at, 0
        self.memory_mb = memory_mb

    def start(self, jobs):
        self.events += [("start", j.student) for j in jobs]
        return [FakeRun(j, *self.plan[j.student]) for j in jobs]

    def poll(self, run: FakeRun):
        self.polls += 1
        if self.polls == self.interrupt_at:
            raise KeyboardInterrupt("signal 2")  # what grade.main's handler raises on SIGINT or SIGTERM
        run.count += 1
        if run.limit is not None and run.count >= run.limit:
            self.events.append(("stopped", run.job.student))
            return RunResult("timeout", f"the notebook ran past its {run.job.lab.notebook_timeout:g} s limit")
        if run.count < run.polls:
            return None
        _executed(run.job)
        self.events.append(("ended", run.job.student))
        return RunResult(run.status, seconds=float(run.count))

    def kill(self, runs):
        self.events.append(("kill", tuple(sorted(r.job.student for r in runs))))

    def close(self):
        self.events.append(("close",))


class Step:
    """A check or a page that takes ``polls`` polls."""

    memory_mb = 100.0  # a page's limit

    def __init__(self, what: str, student: str, polls: int, events: list, value=True):
        self.what, self.student, self.left, self.events, self.value = what, student, polls, events, value

    def poll(self):
        self.left -= 1
        if self.left > 0:
            return None
        self.events.append((f"{self.what} done", self.student))
        return self.value

    def kill(self):
        self.events.append((f"{self.what} killed", self.student))


class Sink:
    """The batch's sink: records each scored notebook; its page takes ``page_polls[student]`` polls."""

    def __init__(self, events: list, page_polls: dict):
        self.events, self.page_polls, self.scored = events, page_polls, {}

    def notes(self, job):
        return ["a note"]

    def record(self, job, result, scored):
        self.events.append(("scored", job.student))
        self.scored[job.student] = scored
        return _Task(lambda: Step("page", job.student, self.page_polls.get(job.student, 1), self.events))


class _Task:
    def __init__(self, start):
        self.start = start


def _executed(job: Job) -> None:
    nb = nbformat.read(str(job.clean_input), as_version=4)
    nb.cells[0].outputs = [new_output("display_data", data={MIME: {"name": "done", "value": 1}})]
    nbformat.write(nb, str(job.executed))


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """Five students' jobs (eve submitted nothing); ``release`` is recorded, not run."""
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    lab = load_rubric(tmp_path / "rubric.toml").labs["a"]
    out = []
    for student in ("ann", "bob", "cat", "dan", "eve"):
        src = tmp_path / "subs" / student / "a.ipynb"
        src.parent.mkdir(parents=True)
        if student != "eve":
            nbformat.write(new_notebook(cells=[new_code_cell("record('done', 1)")]), str(src))
        out.append(
            Job(
                student,
                lab,
                src,
                tmp_path / "out" / student / "a.ipynb",
                tmp_path / "work" / student,
                tmp_path / "out" / student / "a.log",
                tmp_path / "grader" / student,
            )
        )
    events = []
    monkeypatch.setattr(batch, "release", lambda job: events.append(("release", job.student)))
    return out, events


def _most_at_once(events: list, begin=("start",), end=("ended", "stopped")) -> int:
    """The most notebooks between a ``begin`` and an ``end`` event at once (default: running)."""
    flying, most = set(), 0
    for what, *who in events:
        if what in begin:
            flying.add(who[0])
        if what in end:
            flying.discard(who[0])
        most = max(most, len(flying))
    return most


def test_the_batch_prepares_runs_scores_and_renders_each_notebook_within_its_slots(jobs):
    jobs, events = jobs
    plan = {"ann": (3,), "bob": (1, "error"), "cat": (2,), "dan": (1,)}
    sink = Sink(events, {"bob": 4})
    with FakeExecutor(2, plan, events) as fake:
        results = batch.Batch(fake, setup=None, sink=sink).run(jobs)
    assert [who[0] for what, *who in events if what == "start"] == ["ann", "bob", "cat", "dan"]
    assert _most_at_once(events) == 2
    # eve's notebook is missing: she never starts, yet has her rows and page; nothing is killed
    assert results[("eve", "a")].status == "not-submitted" and "eve" in sink.scored
    assert not any(what in ("kill", "page killed") for what, *_ in events) and events[-1] == ("close",)
    for student in ("ann", "bob", "cat", "dan", "eve"):
        mine = [what for what, *who in events if who and who[0] == student]
        assert mine[-3:] == ["scored", "page done", "release"], (student, mine)  # uid and disk back after the page
    rows = {s: {r["check"]: r for r in got.rows} for s, got in sink.scored.items()}
    assert rows["ann"]["done"]["status"] == "pass" and rows["ann"]["execution"]["reason"] == "a note"
    assert rows["bob"]["execution"]["status"] == "error" and rows["eve"]["done"]["status"] == "not-run"
    # bob's page (4 polls) does not hold his slot: cat starts as bob's run ends, before his page is done
    assert events.index(("ended", "bob")) < events.index(("start", "cat")) < events.index(("page done", "bob"))


def test_without_a_sink_a_flight_ends_with_its_run(jobs):
    """What a Slurm node runs: no checks, no page; each job is released as its run ends."""
    jobs, events = jobs
    with FakeExecutor(1, {"ann": (2,), "bob": (1, "error")}, events) as fake:
        results = batch.Batch(fake, setup=None).run([jobs[0], jobs[1], jobs[4]])
    assert {k: r.status for k, r in results.items()} == {
        ("ann", "a"): "ok",
        ("bob", "a"): "error",
        ("eve", "a"): "not-submitted",
    }
    assert events == [
        ("start", "ann"),
        ("ended", "ann"),
        ("release", "ann"),
        ("start", "bob"),
        ("ended", "bob"),
        ("release", "bob"),
        ("release", "eve"),
        ("close",),
    ]


def test_a_runs_limit_is_enforced_while_another_page_renders(jobs):
    jobs, events = jobs
    plan = {"ann": (1,), "bob": (10**6, "ok", 5), "cat": (1,), "dan": (1,)}
    with FakeExecutor(4, plan, events) as fake:
        results = batch.Batch(fake, None, Sink(events, {"ann": 50})).run(jobs[:2])
    assert results[("bob", "a")].status == "timeout"
    assert events.index(("stopped", "bob")) < events.index(("page done", "ann"))
    assert events.index(("scored", "bob")) < events.index(("page done", "ann"))


@pytest.mark.parametrize("room", [True, False])
def test_the_next_run_starts_during_the_checks_when_memory_allows(jobs, monkeypatch, room):
    """One slot: bob's run starts as ann's ends, while ann's checks and page go on, when the
    memory limits of both fit in the executor's memory; else only once ann's page is written.
    Either way ann's uid and disk go back once her page is written."""
    jobs, events = jobs
    lab = jobs[0].lab
    checks = {"ann": 4, "bob": 1}
    monkeypatch.setattr(
        batch.Batch,
        "checking",
        lambda self, job, evidence: Step("checks", job.student, checks[job.student], events, {}),
    )
    memory = lab.memory_mb + lab.check_memory_mb + Step.memory_mb if room else lab.memory_mb
    with FakeExecutor(1, {"ann": (1,), "bob": (1,)}, events, memory_mb=memory) as fake:
        batch.Batch(fake, None, Sink(events, {})).run(jobs[:2])
    ann = [what for what, *who in events if who == ["ann"]]
    assert ann == ["start", "ended", "checks done", "scored", "page done", "release"]
    assert _most_at_once(events) == 1
    if room:
        assert events.index(("ended", "ann")) < events.index(("start", "bob")) < events.index(("checks done", "ann"))
    else:
        assert events.index(("start", "bob")) > events.index(("page done", "ann"))


def test_interrupting_the_batch_kills_every_run_check_and_page_in_flight(jobs, monkeypatch):
    """Ctrl-C (or SIGTERM, which grade.main raises the same way) while notebooks run, one is
    checked and one renders: every one is stopped, each job is released, the executor closed."""
    jobs, events = jobs
    monkeypatch.setattr(
        batch.Batch,
        "checking",
        lambda self, job, evidence: Step("checks", job.student, 10**6 if job.student == "bob" else 1, events, {}),
    )
    plan = {"ann": (1,), "bob": (1,), "cat": (10**6,), "dan": (10**6,)}
    with pytest.raises(KeyboardInterrupt):
        with FakeExecutor(4, plan, events, interrupt_at=12) as fake:
            batch.Batch(fake, None, Sink(events, {"ann": 10**6})).run(jobs[:4])
    assert ("kill", ("cat", "dan")) in events
    assert {("checks killed", "bob"), ("page killed", "ann")} <= set(events)
    assert {who[0] for what, *who in events if what == "release"} == {"ann", "bob", "cat", "dan"}
    assert events[-1] == ("close",)


def test_an_interrupted_start_still_releases_every_job_it_was_given(jobs):
    jobs, events = jobs

    class Interrupted(FakeExecutor):
        def start(self, jobs):
            raise KeyboardInterrupt("signal 15")

    with pytest.raises(KeyboardInterrupt):
        with Interrupted(3, {}, events) as fake:
            batch.Batch(fake, None, Sink(events, {})).run(jobs)
    assert events == [("release", "ann"), ("release", "bob"), ("release", "cat"), ("close",)]


def test_a_run_that_cannot_start_is_its_notebooks_row(jobs, monkeypatch):
    """Here: no cgroup, uid or disk left for a run is its crashed row, never the batch's end."""
    from labkit.grading.run.sandbox import SANDBOXES

    jobs, events = jobs
    ann = jobs[0]

    def refuse(job, setup, holder):
        raise OSError("all 1000 sandbox uids from 60000 are in use")

    monkeypatch.setattr(runner, "_Running", refuse)
    assert runner.prepare(ann) is None
    with runner.LocalExecutor(runner.Setup(SANDBOXES["none"], "rlimit"), parallel=runs_at_once(2)) as local:
        (handle,) = local.start([ann])
        got = local.poll(handle)
    assert (got.status, got.reason) == (
        "crashed",
        "the grader could not start the run: OSError: all 1000 sandbox uids from 60000 are in use",
    )
    assert local.holder is None and local.describe() == f"{runs_at_once(2)} at a time"


def test_executors_are_found_by_name():
    from labkit.grading.run.slurm_array import SlurmExecutor

    assert run.get("local") is runner.LocalExecutor and run.get("slurm") is SlurmExecutor
    with pytest.raises(ValueError, match="unknown executor 'nope'; choose one of local, slurm"):
        run.get("nope")

    @run.register
    class Elsewhere(executor.Executor):
        name = "elsewhere"

    try:
        assert run.get("elsewhere") is Elsewhere and "elsewhere" in run.names()
    finally:
        del run.EXECUTORS["elsewhere"]
    with pytest.raises(ValueError, match="Executor subclass with a name"):
        run.register(FakeRun)
    with pytest.raises(ValueError, match="parallel must be at least 1"):
        runner.LocalExecutor(None, parallel=0)


def test_the_slurm_executor_asks_squeue_once_an_interval_and_cancels_in_one_call(jobs, tmp_path, monkeypatch):
    """Slurm stands in here: squeue is asked once a poll interval for every task, a squeue that
    fails is said once and nothing counts as gone meanwhile, a task gone without a result gets
    Slurm's reason, and the batch's kill is one scancel of the tasks still in flight."""
    import json

    from labkit.grading.run import slurm_array

    jobs, _ = jobs
    asked, cancelled, said = [], [], []
    listing = {"77_0": "RUNNING", "77_[1-3]": "PENDING"}

    def squeue(array):
        asked.append(array)
        if listing is None:
            raise slurm_array.slurm.SlurmError("squeue did not answer within 60 s")
        return dict(listing)

    monkeypatch.setattr(slurm_array, "check", lambda partition: None)
    monkeypatch.setattr(slurm_array, "_submit", lambda group, *args: "77")
    monkeypatch.setattr(slurm_array.slurm, "jobs", squeue)
    monkeypatch.setattr(slurm_array.slurm, "cancel", lambda ids: cancelled.append(list(ids)))
    monkeypatch.setattr(slurm_array.slurm, "command", lambda *argv, **kw: "JobId=77_3 JobState=TIMEOUT Reason=None")
    monkeypatch.setattr(slurm_array, "LOST_AFTER_S", 0.0)
    with slurm_array.SlurmExecutor(None, "debug", "rubric.toml", tmp_path / "slurm", log=said.append) as slurm:
        slurm.interval = 3600.0  # one listing serves every poll below until it is renewed by hand
        tasks = slurm.start(jobs[:4])
        assert [t.id for t in tasks] == ["77_0", "77_1", "77_2", "77_3"] and slurm.slots is None
        assert [slurm.poll(t) for t in tasks] == [None] * 4 and asked == ["77"]
        jobs[0].private.mkdir(parents=True)
        (jobs[0].private / slurm_array.RESULT).write_text(json.dumps({"status": "ok", "seconds": 12.5}))
        assert slurm.poll(tasks[0]).status == "ok"
        listing, slurm.listed_at = None, -1e9  # squeue fails: said once, nothing is gone
        assert [slurm.poll(t) for t in tasks[1:]] == [None] * 3 and len(said) == 2  # (1: the submission)
        assert said[-1] == "note: squeue did not answer within 60 s; trying again"
        listing, slurm.retry_at, slurm.listed_at = {"77_[1-2]": "PENDING"}, 0.0, -1e9  # 77_3 is gone
        gone = slurm.poll(tasks[3])
        minutes = slurm_array.limits(jobs[3].lab)[1]
        assert (gone.status, gone.reason) == (
            "timeout",
            f"the Slurm job 77_3 reached its {minutes} min time limit and was stopped",
        )
        slurm.kill(tasks[1:3])
    assert cancelled == [["77_1", "77_2"]]  # and close() found nothing left to cancel
