"""Where a grading batch's notebooks run: one small interface, one class per way, found by name.

The batch (``labkit.grading.run.batch``) owns everything around a run: its folder, the grader's
checks, its score, its stored outcome, its page, and ending what is in flight when the grader is
stopped. An *executor* owns only where the notebook itself runs: ``local`` (a runner process
here, ``runner.LocalExecutor``) or ``slurm`` (an array task on a Slurm node,
``slurm_array.SlurmExecutor``). The interface is ``Executor``: ``slots``, ``memory_mb``,
``start``, ``poll``, ``kill``, ``close``, ``describe``; a run that cannot start is a handle whose
``poll`` says why, never an exception.

An executor is made as ``get(name)(setup, log=..., **options)``; one that cannot run here raises
``ExecutorError`` with what to do. A new one is a subclass with a ``name``, registered with
``register``. More in docs/internals.md, section labkit.grading (each method's contract).
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
