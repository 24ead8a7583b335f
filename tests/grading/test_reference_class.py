"""The reference class (``conftest.py``), graded once: every lab's reference notebook earns every
automatic point, timing checks included, beside the class's other notebooks; every released notebook
fails where its solutions were removed; and the previous release's notebooks, graded by this kit,
earn every point they earned then and are told which kit they were written for."""

import json
import re

import pytest

from helpers import LABS
from labkit.grading.judge.rubric import load_rubric

pytestmark = [pytest.mark.notebook, pytest.mark.slow, pytest.mark.timeout(1800)]
EARLIER_CHECKS = LABS.parents[1] / "tests" / "fixtures" / "release-0.1.0" / "checks.json"


def _labs(reference_class):
    return load_rubric(reference_class["folder"] / "rubric.toml").labs


def test_every_reference_notebook_earns_every_automatic_point(reference_class):
    rows, failed = reference_class["rows"], []
    for key, lab in _labs(reference_class).items():
        assert rows[("reference", key, "execution")]["status"] == "ok", rows[("reference", key, "execution")]
        for check in lab.checks:
            r = rows[("reference", key, check.name)]
            if check.manual:
                assert r["status"] == "pending", (key, check.name, r)  # a TA scores it
            elif r["status"] != "pass" or float(r["points"]) != float(r["max"]):
                failed.append(f"{key} {check.name}: {r['status']} {r['points']}/{r['max']} ({r['reason']})")
    print(f"\nthe class of 15 notebooks graded in {reference_class['seconds']:.0f} s")
    assert failed == [], failed


def test_every_released_notebook_stops_at_its_first_exercise_and_earns_nothing_it_feeds(reference_class):
    rows = reference_class["rows"]
    for key, lab in _labs(reference_class).items():
        status, reason = rows[("released", key, "execution")]["status"], rows[("released", key, "execution")]["reason"]
        assert status == "error" and "NotImplementedError" in reason, (key, status, reason)
        automatic = [c for c in lab.checks if not c.manual]
        earned = sum(float(rows[("released", key, c.name)]["points"]) for c in automatic)
        assert earned < sum(float(rows[("reference", key, c.name)]["points"]) for c in automatic), key
        for check in (c for c in lab.checks if c.manual):
            assert rows[("released", key, check.name)]["status"] == "fail", (key, check.name)  # the placeholder


def test_the_previous_releases_notebooks_earn_every_point_they_earned(reference_class):
    """Every automatic check of that release's rubric that this rubric still has passes (its
    timings aside: that release's notebooks time wall clocks); a notebook carrying that release's
    stamp is told which kit it was written against (that release stamped none: Lab 1 has one here),
    and one without a stamp is told nothing."""
    rows = reference_class["rows"]
    earlier = json.loads(EARLIER_CHECKS.read_text())
    for key, lab in earlier.items():
        assert rows[("earlier", key, "execution")]["status"] == "ok", rows[("earlier", key, "execution")]["reason"]
        for check in lab["automatic"]:
            if ("earlier", key, check) in rows and not re.search(r"faster|speed|rate", check):
                assert rows[("earlier", key, check)]["status"] == "pass", (key, check, rows[("earlier", key, check)])
    assert "written against labkit 0.1.0, graded by labkit" in rows[("earlier", "lab1", "execution")]["reason"]
    assert "written against" not in rows[("earlier", "lab2", "execution")]["reason"]  # no stamp, no guess
    executed = (reference_class["folder"] / "out" / "earlier" / earlier["lab2"]["notebook"]).read_text()
    assert "KitDeprecationWarning" in executed  # its imports of moved modules, named
