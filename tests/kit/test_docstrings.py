"""The code says why in a few lines and nothing of how it came to be: a module's docstring is at most
15 lines (the narrative lives in docs/), and no code or test names an issue or a round of work."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\b[Ii]ssue \d+|\([Ii]ssue|\b[Rr]ound (?:three|four|five|six)\b|round\d")


def python_files():
    return sorted([*(ROOT / "labkit").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])


def test_every_module_docstring_is_at_most_15_lines():
    long = {}
    for path in (ROOT / "labkit").rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc and len(doc.splitlines()) > 15:
            long[str(path.relative_to(ROOT))] = len(doc.splitlines())
    assert long == {}, "cut these to 15 lines; the rest goes to docs/ (docs/internals.md)"


def test_no_code_names_an_issue_or_a_round():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in python_files()
        if p.name != Path(__file__).name
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == [], "history belongs in git: say what the code does and why"


def test_the_pattern_finds_what_it_should():
    assert HISTORY.search("the bound (issue 35)") and HISTORY.search("round four's labs")
    assert HISTORY.search("test_round4_audits")
    assert not HISTORY.search("each round one SGD step") and not HISTORY.search("round(x, 2)")
