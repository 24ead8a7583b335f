"""Grading, by stage: ``submissions`` (LMS downloads laid out), ``run`` (notebooks in a sandbox each,
here or as Slurm job arrays, in one ``batch`` loop), ``judge`` (rubric, scoring, the grader's own
checks and hidden checks, the TAs' answer scores), ``pages`` (feedback and statistics, rendered in a
limited process, sanitized last), ``gradebook`` (grades.csv, summary.md, the LMS exports, delivery)
and ``kit`` (the student kit: ``make release``, the public rubric). ``grade`` ties them together.
``python -m labkit grade`` / ``release`` call these. The student kit leaves this package out.
"""

import sys

# rfc3987-syntax, an optional IRI format checker of jsonschema (pulled in by jupyter-events),
# builds an Earley grammar when imported: 2-7 s in every grader process that imports nbformat
# (runners, checks, page renderers). Nothing here checks IRIs, and nbformat's validation does not
# use it. Set here, in the grader's processes only, not in a student's kernel.
sys.modules.setdefault("rfc3987_syntax", None)

from labkit.notebook.record import read_records  # noqa: E402  (the records of an executed notebook)

__all__ = ["read_records"]
