"""Grading, stage 2: run notebooks, each in a sandbox with limits, here or as Slurm job arrays; one batch
loop over the executors, and the ledger a later batch resumes from."""

from labkit.core.registry import Registry
from labkit.grading.run.executor import Executor

# Built in, imported when first used (the Slurm one only where Slurm is asked for).
EXECUTORS = Registry(
    "executor",
    builtin={
        "local": "labkit.grading.run.runner:LocalExecutor",
        "slurm": "labkit.grading.run.slurm_array:SlurmExecutor",
    },
)


def register(cls: type) -> type:
    """Make an ``Executor`` subclass available by its ``name`` (a class decorator)."""
    return EXECUTORS.add_subclass(cls, Executor)


def names() -> list[str]:
    return sorted(EXECUTORS)


def get(name: str) -> type:
    """The executor class called ``name``; a ValueError that lists the known ones otherwise."""
    return EXECUTORS[name]
