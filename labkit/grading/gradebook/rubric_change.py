"""A rubric edited after grading, as the reports and canvas.csv see it.

The class was graded under the copy kept in ``.grader/rubric.toml``; the rubric it names
(``Book.rubric``) may have changed since. Some changes run nothing: a lab's ``late_penalty`` is
applied when the reports are written, from what the LMS said of each file, and its
``canvas_assignment`` is only the export's column. Those are applied at once, and said. Any
other change (a check's points, a check added or removed, a limit) alters what a run scores,
and the gradebook keeps each check's outcome, not what it measured under every rule, so it
cannot be recomputed without running the notebook again: such a lab is stale, and canvas.csv
refuses it, naming what changed and the command that rescores it. A run scored under an
earlier rubric than the copy (its fingerprint's lab hash, ``ledger.lab_hash``) is stale too.
A rubric file moved away is no edit: the copy stands, and that is said.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from labkit.grading.run import ledger

APPLIED = ("late_penalty", "canvas_assignment")  # applied when the reports are written: no run changes
IGNORED = ("checks", "expected_s", "folder", *APPLIED)  # expected_s orders a batch; checks are told apart one by one


def follow(labs: list, path: str) -> tuple[dict, dict, list[str]]:
    """({lab key: its lab under the rubric at ``path`` now}, {lab key: why it is stale}, notes
    on what was applied) for the graded ``labs``; a lab whose runs the change would alter keeps
    its graded form and is stale."""
    from labkit.grading.judge.rubric import RubricError, load_rubric

    if not path:
        return {}, {}, []
    if not Path(path).is_file():  # moved or removed: not an edit; the graded copy stands
        return {}, {}, [f"rubric {path}: not found; the copy the class was graded with (.grader/rubric.toml) is used"]
    try:
        now = load_rubric(Path(path))
    except (RubricError, OSError) as e:
        why = f"the rubric {path} does not load now ({e}); fix it, then export again"
        return {}, {lab.key: why for lab in labs}, []
    follows, stale, notes = {}, {}, []
    for lab in labs:
        new = now.labs.get(lab.key)
        if new is None:
            stale[lab.key] = (
                f"{lab.key} is no longer in the rubric {path}, so its grades are not the rubric's; put it back, "
                f"or grade into a new --out"
            )
        elif ledger.lab_hash(new) != ledger.lab_hash(lab):
            stale[lab.key] = rescore(lab.key, f"the rubric {path} changed since it was graded ({changed(lab, new)})")
        elif applied := _applied(lab, new):
            follows[lab.key] = new
            notes.append(f"rubric {path}: {lab.key}'s {'; '.join(applied)} since it was graded: applied")
    return follows, stale, notes


def stale_runs(jobs: list, stored: dict) -> dict:
    """{lab key: why} for labs with a stored run scored under another rubric section than its job's lab."""
    count = {}
    for job in jobs:
        print_ = (stored.get(job.key) or {}).get("fingerprint") or {}
        if print_.get("lab") and print_["lab"] != ledger.lab_hash(job.lab):
            count[job.lab.key] = count.get(job.lab.key, 0) + 1
    return {
        lab: rescore(lab, f"{n} of its run(s) were scored under an earlier rubric than the one it is graded with")
        for lab, n in count.items()
    }


def rescore(lab: str, why: str) -> str:
    return (
        f"{why}, so its stored scores are the old rubric's: grade the class again with the same submissions "
        f"(make grade SUBMISSIONS=..., or python -m labkit grade DIR --out OUT; only the notebooks of {lab} run "
        f"again), then export"
    )


def changed(old, new) -> str:
    """What differs between two forms of a lab that changes its runs, in a few words."""
    before, after = {c.name: c for c in old.checks}, {c.name: c for c in new.checks}
    parts = [f"check {name!r} added" for name in after if name not in before]
    parts += [f"check {name!r} removed" for name in before if name not in after]
    for name in (n for n in before if n in after and before[n] != after[n]):
        a, b = before[name].points, after[name].points
        parts.append(f"check {name!r}: {a:g} -> {b:g} points" if a != b else f"check {name!r} changed")
    for f in dataclasses.fields(old):
        if f.name not in IGNORED and getattr(old, f.name) != getattr(new, f.name):
            parts.append(f"{f.name}: {getattr(old, f.name)!r} -> {getattr(new, f.name)!r}")
    if old.max_points != new.max_points:
        parts.append(f"{old.max_points:g} -> {new.max_points:g} points in all")
    return "; ".join(parts) or "its section"


def _applied(old, new) -> list[str]:
    out = []
    if old.late_penalty != new.late_penalty:
        out.append(f"late penalty changed ({_policy(old.late_penalty)} -> {_policy(new.late_penalty)})")
    if old.canvas_assignment != new.canvas_assignment:
        out.append(
            f"Canvas column changed ({old.canvas_assignment or 'none'!r} -> {new.canvas_assignment or 'none'!r})"
        )
    return out


def _policy(policy) -> str:
    return "none" if policy is None else policy.describe()
