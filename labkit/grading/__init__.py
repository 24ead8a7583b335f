"""Grading: run notebooks in isolation (``runner``), score them against the rubric (``rubric``),
re-check their claims (``verify``), write the reports (``report``), tie it together (``grade``),
and make the student versions (``release``). ``python -m labkit grade`` / ``release`` call these.
"""
from labkit.record import read_records  # the records of an executed notebook

__all__ = ["read_records"]
