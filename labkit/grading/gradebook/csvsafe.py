"""CSV cells a spreadsheet opens as text, never as a formula (OWASP's CSV injection rule).

Every CSV the grader writes goes through ``report.write_csv``, which passes each text cell
through ``escape``: a cell that starts with ``=``, ``+``, ``-``, ``@`` or a tab gets a leading
``'``, so spreadsheets show it as text (an answer written as ``=HYPERLINK(...)`` stays words).
Numbers are left as they are: ``-1`` is a number, never a formula. A cell is also inert
(``labkit.core.inert``): control, bidi and invisible format characters are written as their
escapes (``\\x1b``, ``\\u202e``; a carriage return too), so a CSV shows what the student wrote
and does nothing; newlines and tabs stay.

The grader reads some of its CSVs back (the TAs' answer CSVs, ``ta_scores.csv``): ``read_rows``
undoes ``escape`` exactly (``unescape(escape(v)) == v`` for every text), so a TA's comment comes
back as written, and a score a TA typed (``-1``, say) reaches the range check unchanged.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from labkit.core import inert

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _risky(text: str) -> bool:
    """Whether ``text`` needs the quote: it starts with a trigger, or with quotes before one
    (so that a text that already starts with ``'=`` also comes back as written)."""
    body = text.lstrip("'")
    return body[:1] in TRIGGERS and not _NUMBER.fullmatch(body)


def escape(value):
    """``value`` inert, and as a spreadsheet shows it as text: a leading ``'`` where a formula
    could start."""
    if not isinstance(value, str) or not value:
        return value
    value = inert.escape(value)
    return "'" + value if _risky(value) else value


def unescape(value):
    """The inverse of ``escape``, for cells read back."""
    if not isinstance(value, str):
        return value
    if value.startswith("'") and _risky(value[1:]):
        value = value[1:]
    return inert.unescape(value)


def read_rows(path: Path, encoding: str = "utf-8") -> list[dict]:
    """A CSV's rows as dicts, every cell unescaped (``csv`` and ``OSError`` errors propagate)."""
    with open(path, newline="", encoding=encoding) as f:
        return [{k: unescape(v) for k, v in row.items()} for row in csv.DictReader(f)]
