"""Run a grading batch's notebooks as Slurm job arrays: one array task per notebook, on the
cluster's nodes, with the rubric's memory and time as the job's limits.

``SlurmExecutor`` is the ``slurm`` executor (``executor``): the batch (``batch.Batch``)
prepares, checks, scores and reports exactly as for a local run; only where a notebook executes
changes. Here, the executor submits one ``sbatch --array`` per set of limits; on a node, each
array task (``python -m labkit.grading.run.slurm_array BATCH INDEX``) runs its notebook as a
local batch of one (same sandbox, limits and timeouts) and writes its ``RunResult``; here again,
``squeue`` and the result files say which have ended, and a task that left no result becomes its
notebook's row with Slurm's reason. The batch goes on.

Everything in ``<out>`` and the interpreter must be on a filesystem the nodes share with this
machine. Interrupting the grader cancels the array tasks still in flight. More in
docs/cluster.md, section 9 (how to use it) and section 11 (the three steps, the limits).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

from labkit.core import atomic, scratch
from labkit.infra import slurm
from labkit.grading.run.batch import Batch
from labkit.grading.run.executor import Executor, ExecutorError
from labkit.grading.run.runner import KIT_PREFIX, Job, LocalExecutor, RunResult, Setup
from labkit.core.proc import tail

MEMORY_MARGIN_MB = 256  # the array task's own process, over the notebook group's cap
TIME_MARGIN_S = 120  # queueing a node's sandbox and kernel start, over the notebook's limits
RESULT = "slurm-result.json"
LOST_AFTER_S = 5.0  # a task gone from squeue without a result: wait this long for the file (NFS)


def limits(lab) -> tuple[int, int]:
    """(``--mem`` in MB, ``--time`` in minutes) for one notebook of ``lab``."""
    memory = int(math.ceil(lab.memory_mb + MEMORY_MARGIN_MB))
    minutes = int(math.ceil((lab.notebook_timeout + lab.start_timeout + TIME_MARGIN_S) / 60))
    return memory, minutes


def check(partition: str) -> None:
    """A ``SlurmError`` that says what to do unless ``partition`` exists and is up."""
    out = slurm.command("sinfo", "--noheader", f"--partition={partition}", "--format=%a")
    if not out.strip():
        known = slurm.command("sinfo", "--noheader", "--format=%R", check=False).split()
        raise slurm.SlurmError(f"Slurm has no partition {partition!r}; its partitions: {', '.join(known) or 'none'}")
    if "up" not in out.split():
        raise slurm.SlurmError(f"Slurm partition {partition!r} is {out.split()[0]}; pick one that is up (`sinfo`)")


class _Task:
    """One notebook's array task, as the grader follows it."""

    def __init__(self, task: str, job: Job, output: Path):
        self.id, self.job, self.output = task, job, output
        self.started = False  # seen past PENDING
        self.lost: float | None = None  # when squeue first stopped listing it without a result


class SlurmExecutor(Executor):
    """The ``slurm`` executor: each notebook an array task on ``partition`` (see the module
    docstring). How many run at once is Slurm's to decide (``slots`` None: the batch starts
    them all); ``sbatch_args`` go to every ``sbatch`` (such as ``--cpus-per-task=2`` or
    ``--exclude=node7``); the batch files go to ``folder``."""

    name = "slurm"
    slots = None
    interval = 0.5

    def __init__(self, setup: Setup, partition: str, rubric, folder, sbatch_args=(), log=print):
        try:
            check(partition)
        except slurm.SlurmError as e:
            raise ExecutorError(f"cannot grade on Slurm: {e}") from None
        self.setup, self.partition, self.rubric, self.log = setup, partition, rubric, log
        self.folder, self.sbatch_args = Path(folder).absolute(), list(sbatch_args)
        self.arrays = 0
        self.live: dict[str, _Task] = {}  # task id -> task whose end is not known yet
        self.listed: dict[str, str] = {}
        self.listed_at = self.retry_at = -math.inf

    def describe(self) -> str:
        return "on Slurm"

    def start(self, jobs: list[Job]) -> list:
        """One ``sbatch --array`` per set of limits (``limits``); the tasks in ``jobs``' order."""
        self.folder.mkdir(parents=True, exist_ok=True)
        groups: dict[tuple, list[Job]] = {}
        for job in jobs:
            groups.setdefault(limits(job.lab), []).append(job)
        tasks, submitted = {}, []
        try:
            for (memory, minutes), group in groups.items():
                base = self.folder / f"batch-{self.arrays}"
                self.arrays += 1
                array = _submit(group, self.setup, self.partition, self.rubric, base, memory, minutes, self.sbatch_args)
                submitted.append(array)
                tasks.update(
                    {id(job): _Task(f"{array}_{i}", job, Path(f"{base}-{i}.out")) for i, job in enumerate(group)}
                )
                self.log(
                    f"submitted Slurm array {array}: {len(group)} notebook(s) of {group[0].lab.key}, "
                    f"--mem={memory}M --time={minutes} in partition {self.partition}"
                )
        except BaseException:  # the batch never hears of these: cancel them here
            slurm.cancel(submitted)
            raise
        self.live.update({t.id: t for t in tasks.values()})
        return [tasks[id(job)] for job in jobs]

    def poll(self, task: _Task) -> RunResult | None:
        """Its result file once written; a task gone from Slurm without one, Slurm's reason."""
        listed = self._listing()
        if listed is None:  # squeue failed this time: nothing is known to be gone
            return None
        result = _result(task.job)
        state = _state(task.id, listed)
        if state not in (None, "PENDING"):
            task.started = True
        if result is None and state is None:
            task.lost = task.lost or time.monotonic()
            if time.monotonic() - task.lost < LOST_AFTER_S:
                return None
            result = _why_gone(task.id, task.output, limits(task.job.lab)[1], task.started)
        if result is not None:
            self.live.pop(task.id, None)
        return result

    def _listing(self) -> dict[str, str] | None:
        """squeue's listing of the arrays with tasks in flight, at most once an ``interval``;
        None while squeue fails (said once, tried again after 5 intervals)."""
        now = time.monotonic()
        if now < self.retry_at:
            return None
        if now - self.listed_at >= self.interval:
            try:
                listed = {}
                for array in {task.partition("_")[0] for task in self.live}:
                    listed.update(slurm.jobs(array))
            except slurm.SlurmError as e:
                self.log(f"note: {e}; trying again")
                self.retry_at = now + 5 * self.interval
                return None
            self.listed, self.listed_at = listed, now
        return self.listed

    def kill(self, tasks: list) -> None:
        """``scancel`` these array tasks, in one call (a task's node stops its notebook's group)."""
        for task in tasks:
            self.live.pop(task.id, None)
        slurm.cancel([task.id for task in tasks])

    def close(self) -> None:
        if self.live:  # tasks nobody waited for to the end
            slurm.cancel(list(self.live))
            self.live = {}


def _submit(
    group: list[Job], setup: Setup, partition: str, rubric, base: Path, memory: int, minutes: int, sbatch_args
) -> str:
    """Write one array's batch file and script, submit it; its job id."""
    batch = {
        "rubric": str(Path(rubric).absolute()),
        "sandbox": setup.sandbox.name,
        "package": str(setup.package),
        "data": [str(d) for d in setup.data],
        "data_env": dict(setup.data_env),
        "jobs": [
            {
                "student": j.student,
                "lab": j.lab.key,
                "source": str(j.source.absolute()),
                "executed": str(j.executed.absolute()),
                "workdir": str(j.workdir.absolute()),
                "log": str(j.log.absolute()),
                "private": str(j.private.absolute()),
            }
            for j in group
        ],
    }
    base.with_suffix(".json").write_text(json.dumps(batch, indent=1))
    script = base.with_suffix(".sh")
    script.write_text(
        "#!/bin/sh\n# one notebook of a labkit grading batch; see labkit/grading/run/slurm_array.py\n"
        f"exec {shlex.quote(sys.executable)} -m labkit.grading.run.slurm_array "
        f'{shlex.quote(str(base.with_suffix(".json")))} "$SLURM_ARRAY_TASK_ID"\n'
    )
    out = slurm.command(
        "sbatch",
        "--parsable",
        f"--array=0-{len(group) - 1}",
        f"--partition={partition}",
        f"--job-name=labkit-grade-{group[0].lab.key}",
        f"--mem={memory}M",
        f"--time={minutes}",
        "--ntasks=1",
        f"--output={base}-%a.out",
        f"--chdir={Path.cwd()}",
        *map(str, sbatch_args),
        str(script),
    )
    return out.strip().split(";")[0]


def _result(job: Job) -> RunResult | None:
    path = job.private / RESULT
    try:
        return RunResult(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError) as e:
        return RunResult("crashed", f"the Slurm job wrote an unreadable result ({type(e).__name__}: {e})")


def _state(task: str, listed: dict[str, str]) -> str | None:
    """The array task's state in squeue's listing, None when it is not listed (pending tasks
    may be listed together, as ``ID_[3-7]``)."""
    if task in listed:
        return listed[task]
    array, _, index = task.partition("_")
    for job, state in listed.items():
        m = re.fullmatch(rf"{re.escape(array)}_\[([^\]]+)\]", job)
        if m and any(_in_range(int(index), part) for part in m.group(1).split("%")[0].split(",")):
            return state
    return None


def _in_range(i: int, part: str) -> bool:
    lo, _, hi = part.partition("-")
    return int(lo) <= i <= int(hi or lo)


def _why_gone(task: str, output: Path, minutes_of: int, started: bool) -> RunResult:
    """The row of an array task that ended without a result: Slurm's view of how it ended.
    A pending array task that is cancelled leaves no record at all (``scontrol`` no longer
    knows it), which ``started`` tells apart from a record Slurm has since dropped."""
    try:
        text = slurm.command("scontrol", "show", "job", task, check=False)
        forgotten = "JobState=" not in text  # scontrol says "Job 12_3 not found", or nothing
    except slurm.SlurmError as e:
        text, forgotten = str(e), False
    state = re.search(r"JobState=(\S+)", text)
    reason = re.search(r"Reason=(\S+)", text)
    state, reason = (state.group(1) if state else ""), (reason.group(1) if reason else "")
    why = f" ({reason})" if reason and reason != "None" else ""
    if state == "TIMEOUT":
        return RunResult("timeout", f"the Slurm job {task} reached its {minutes_of} min time limit and was stopped")
    if state == "OUT_OF_MEMORY":
        return RunResult("memory", f"the Slurm job {task} went over its memory limit and was stopped")
    if state == "CANCELLED":
        return RunResult("crashed", f"the Slurm job {task} was cancelled{why} before its notebook finished")
    if forgotten and not started:
        return RunResult(
            "crashed", f"the Slurm job {task} was cancelled while it waited to start, before its notebook ran"
        )
    last = [ln for ln in tail(output, 5).splitlines() if ln.strip()][-1:]
    said = f"; its output ({output}) ends: {last[0].strip()[:200]}" if last else ""
    how = f"ended {state}{why}" if state else "ended (Slurm no longer says how)"
    return RunResult("crashed", f"the Slurm job {task} {how} without a result{said}")


# ---------------------------------------------------------------------------------------------
# On the node: one array task.


def run_task(batch: dict, index: int) -> RunResult:
    """Run notebook ``index`` of ``batch`` here, as a local batch of one."""
    from labkit.grading.run import limits as cgroups
    from labkit.grading.kit.release import student_package
    from labkit.grading.judge.rubric import load_rubric
    from labkit.grading.run.sandbox import SANDBOXES

    spec = batch["jobs"][index]
    lab = load_rubric(batch["rubric"]).labs[spec["lab"]]
    job = Job(
        spec["student"],
        lab,
        Path(spec["source"]),
        Path(spec["executed"]),
        Path(spec["workdir"]),
        Path(spec["log"]),
        Path(spec["private"]),
    )
    sandbox = SANDBOXES[batch["sandbox"]]
    why = sandbox.unavailable()
    if why:
        return RunResult(
            "crashed",
            f"node {socket.gethostname()} cannot run the sandbox ({why}); the notebook did "
            f"not run: install it on every node, or exclude this one (SLURM_ARGS=--exclude=...)",
        )
    kit = scratch.make(KIT_PREFIX)
    try:
        setup = Setup(
            sandbox=sandbox,
            backend=cgroups.best_backend(),
            package=Path(batch["package"]),
            data=[Path(d) for d in batch["data"]],
            data_env=dict(batch["data_env"]),
            keep_work=True,
        )  # the grader checks the work folder from its own machine
        if sandbox.confined:
            kit.chmod(0o755)  # the run's user reads it
            setup.student_kit = student_package(kit)
        with LocalExecutor(setup, 1) as here:
            return Batch(here, setup).run([job])[job.key]
    finally:
        scratch.release(kit)


def main(argv=None) -> int:
    """``python -m labkit.grading.run.slurm_array BATCH INDEX``: what an array task runs."""
    from labkit.core.proc import unwind_on_signals

    batch_path, index = (argv or sys.argv[1:])[:2]
    batch = json.loads(Path(batch_path).read_text())
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        del os.environ[name]  # the notebook runs as it would locally, not as part of this job
    unwind_on_signals()  # scancel and the time limit send SIGTERM: unwind, stopping the notebook's group
    private = Path(batch["jobs"][int(index)]["private"])
    try:
        result = run_task(batch, int(index))
    except KeyboardInterrupt as e:
        print(f"[slurm-array] stopped: {e}", file=sys.stderr)
        return 143
    atomic.write_text(private / RESULT, json.dumps(asdict(result)))
    print(
        f"[slurm-array] {batch['jobs'][int(index)]['student']}/{batch['jobs'][int(index)]['lab']} on "
        f"{socket.gethostname()}: {result.status} {result.reason}".rstrip()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
