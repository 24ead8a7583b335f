"""Grading: run notebooks in isolation (``runner``), score them against the rubric (``rubric``),
re-check their claims (``verify``), write the reports (``report``), tie it together (``grade``),
and make the student versions (``release``). ``python -m labkit grade`` / ``release`` call these.
"""
import sys

# rfc3987-syntax, an optional IRI format checker of jsonschema (pulled in by jupyter-events),
# builds an Earley grammar when imported: 2-7 s in every process that imports nbformat, which
# is every grading runner. Nothing here validates IRIs, so the grader's processes skip it.
sys.modules.setdefault("rfc3987_syntax", None)

from labkit.record import read_records  # noqa: E402  (the records of an executed notebook)

__all__ = ["read_records"]
