"""Grading: run notebooks in a sandbox each (``sandbox``, ``limits``, ``runner``), here or on Slurm
(``executor``: ``runner.LocalExecutor``, ``slurm_array.SlurmExecutor``), score them against the
rubric (``rubric``, ``scoring``), check them with the grader's own evidence in sandboxed processes
(``checks``: ``verify``'s verifiers and ``hidden`` checks, whose student side is ``probe``), in one
loop (``batch``), write the reports (``report``, ``publish``), tie it together (``grade``), and
make the student kit (``release``).
``python -m labkit grade`` / ``release`` call these. The student kit leaves this package out.
"""
from labkit.notebook.record import read_records  # the records of an executed notebook

__all__ = ["read_records"]
