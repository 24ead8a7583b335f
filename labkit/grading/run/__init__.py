"""Grading, stage 2: run notebooks, each in a sandbox with limits, here or as Slurm job arrays; one batch
loop over the executors, and the ledger a later batch resumes from."""
