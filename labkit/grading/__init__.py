"""Grading: run notebooks in a sandbox each (``sandbox``, ``limits``, ``runner``), score them against
the rubric (``rubric``), check them with the grader's own evidence in sandboxed processes
(``checks``: ``verify``'s verifiers and ``hidden`` checks, whose student side is ``probe``), write
the reports (``report``), tie it together (``grade``), and make the student kit (``release``).
``python -m labkit grade`` / ``release`` call these. The student kit leaves this package out.
"""
from labkit.record import read_records  # the records of an executed notebook

__all__ = ["read_records"]
