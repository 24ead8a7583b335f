"""The grading tests' shared class: five labs' reference notebooks, their released versions and
the previous release's notebooks, graded once a run by the real grader at test size."""

import json
import time

import nbformat
import pytest

from helpers import LABS, NOTEBOOKS, once_per_run, read_csv, runs_at_once, small_rubric

EARLIER = NOTEBOOKS.parent / "tests" / "fixtures" / "release-0.1.0"  # the release before the lab folders


def _students(subs) -> None:
    """reference: every lab's notebook; released: what ``make release`` gives a student; earlier:
    the previous release's reference notebooks, Lab 1 stamped with that release's version."""
    from labkit.grading.kit.release import release

    for name in ("reference", "released", "earlier"):
        (subs / name).mkdir(parents=True)
    for nb in sorted(LABS.glob("lab*/*.ipynb")):
        (subs / "reference" / nb.name).write_bytes(nb.read_bytes())
    for released, _ in release(NOTEBOOKS, subs.parent / "release", log=lambda m: None):
        if released.suffix == ".ipynb":
            (subs / "released" / released.name).write_bytes(released.read_bytes())
    for key, lab in json.loads((EARLIER / "checks.json").read_text()).items():
        nb = nbformat.read(str(EARLIER / lab["notebook"]), as_version=4)
        if key == "lab1":
            nb.metadata["labkit"] = {"version": "0.1.0", "api": 0}
        nbformat.write(nb, str(subs / "earlier" / lab["notebook"]))


def _grade(folder) -> None:
    from labkit.grading.grade import GradeOptions, grade

    _students(folder / "subs")
    rubric = small_rubric(folder)
    t0 = time.monotonic()
    grade(GradeOptions(rubric, folder / "subs", folder / "out", parallel=runs_at_once(2)), log=lambda m: None)
    (folder / "seconds").write_text(f"{time.monotonic() - t0:.1f}")


@pytest.fixture(scope="session")
def reference_class():
    """The class's folder (``subs``, ``rubric.toml``, ``out``), its rows by (student, lab, check)
    and the grading's seconds; graded once a run, whichever test asks first."""
    from labkit.grading.run.sandbox import SANDBOXES

    if SANDBOXES["bwrap"].unavailable():
        pytest.skip(SANDBOXES["bwrap"].unavailable())
    folder = once_per_run("reference-class", _grade)
    rows = {(r["student"], r["lab"], r["check"]): r for r in read_csv(folder / "out" / "grades.csv")}
    return {"folder": folder, "rows": rows, "seconds": float((folder / "seconds").read_text())}
