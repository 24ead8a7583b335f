"""docs/checks.md has a row for every check the lab folders declare: each hidden check and verifier
(``labkit.labs.declare`` discovery) and each self-check a lab's API gives its notebook (its
``selfcheck`` namespace, and any ``self_check`` it exports), so the table cannot fall behind."""

import re
from pathlib import Path

from labkit.labs import api, declare, names
from labkit.labs.surface import Surface

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "checks.md"
COLUMNS = 5


def _rows() -> dict[tuple[str, str], list[str]]:
    """``{(lab, check): cells}`` of every table row of the doc."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == COLUMNS and re.fullmatch(r"\d+", cells[0]):
            rows[(f"lab{cells[0]}", cells[1].strip("`"))] = cells
    return rows


def _declared() -> set[tuple[str, str]]:
    found = {(name.split("_")[0], name) for name in declare.discover("checks")}
    verifiers = declare.discover("verifiers")  # the engine's own (labkit.grading.judge.verify's) is no lab's
    found |= {(name.split("_")[0], name) for name, fn in verifiers.items() if fn.__module__.startswith("labkit.labs.")}
    for lab in names():
        for key, entry in api(lab).API.items():
            if isinstance(entry, Surface):
                found |= {(lab, f"{key}.{n}") for n in entry.names if key == "selfcheck" or n == "self_check"}
    return found


def test_every_declared_check_has_a_row_that_names_its_property_place_and_test():
    rows = _rows()
    declared = _declared()
    assert len(declared) > 40
    missing = sorted(declared - set(rows))
    assert not missing, f"docs/checks.md has no row for {missing}"
    for key in declared:
        lab, check, prop, where, wrong = rows[key]
        assert prop and where and wrong, key
        assert "(`test_" in wrong or wrong.startswith("none yet"), f"{key}: name the test that gives the wrong answers"


def test_every_test_the_table_names_exists():
    tests = {p.name for p in ROOT.glob("tests/**/test_*.py")} | {p.name for p in ROOT.glob("labkit/**/test_*.py")}
    named = set(re.findall(r"`(test_\w+\.py)(?:::\w+)?`", DOC.read_text(encoding="utf-8")))
    assert named and not named - tests, sorted(named - tests)
