"""Where a grading batch's notebooks run: one small interface, one class per way, found by name.

The batch (``labkit.grading.run.batch``) owns everything around a run: its folder (``prepare``),
the grader's checks, its score, its stored outcome, its page, and ending what is in flight when
the grader is stopped. An *executor* owns only where the notebook itself runs:

======== ============================================================== ===================
name     where a notebook runs                                          how many at once
======== ============================================================== ===================
local    a runner process here, in its sandbox and limits               ``parallel``
         (``runner.LocalExecutor``)
slurm    an array task on a Slurm node, one array per set of limits     Slurm's to decide
         (``slurm_array.SlurmExecutor``)
======== ============================================================== ===================

The interface is ``Executor``:

- ``slots``: how many notebooks run at once; None: all;
- ``memory_mb``: the memory the limits of what the batch has in flight here may add up to (runs,
  the grader's checks, pages); None: no bound;
- ``start(jobs)`` -> one handle per job, in order; the batch has ``prepare``d each. A run that
  cannot start is a handle whose ``poll`` says why (a ``RunResult``), never an exception;
- ``poll(handle)`` -> its ``RunResult`` once the run has ended (by itself, or stopped at one of
  its limits: the executor enforces them), else None; called every ``interval`` seconds;
- ``kill(handles)``: stop these runs now, all at once (the batch's teardown: Ctrl-C, SIGTERM);
- ``close()``: give back what the executor holds once no run is left (it is a context manager);
- ``describe()``: how it runs notebooks, for the batch's first line ("2 at a time").

An executor is made as ``get(name)(setup, log=..., **options)``; options are its own
(``parallel``; ``partition``, ``rubric``, ``folder``, ``sbatch_args``). One that cannot run here
raises ``ExecutorError`` with what to do. The executors are a ``labkit.core.registry.Registry``
(``labkit.grading.run.EXECUTORS``, in the package above the executors it names, as the launchers'
is): a new one is a subclass with a ``name``, registered with ``register`` (a class decorator).
"""

from __future__ import annotations


class ExecutorError(ValueError):
    """The executor cannot run notebooks here; the message says what to do."""


class Executor:
    """Runs prepared jobs somewhere and says how each run ended (see the module docstring)."""

    name = ""
    slots: int | None = None
    memory_mb: float | None = None
    interval = 0.25  # seconds between the batch's polls

    def describe(self) -> str:
        return f"with the {self.name} executor"

    def start(self, jobs: list) -> list:
        raise NotImplementedError

    def poll(self, handle):
        raise NotImplementedError

    def kill(self, handles: list) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Ready:
    """A step that is already over, for the loop that polls steps: ``poll()`` is ``value``.
    An executor's handle of a run that could not start, or checks with nothing to run."""

    def __init__(self, value):
        self.value = value

    def poll(self):
        return self.value

    def kill(self) -> None:
        pass
