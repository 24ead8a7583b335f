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
    base=Executor,
)
register = EXECUTORS.add_subclass  # a class decorator: an Executor subclass, found by its ``name``
names = EXECUTORS.names
get = EXECUTORS.__getitem__  # the executor class called NAME; a ValueError that lists the known ones otherwise
