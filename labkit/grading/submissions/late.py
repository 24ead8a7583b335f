"""Late work: the rubric's late-penalty policy and the ``late`` row it adds to a lab's grades.

The LMS says what is late (``intake``: Canvas's ``LATE`` file-name marker, or Gradescope's
``:created_at`` after the due date given with ``--due``); the rubric says what it costs. A lab
(or ``[defaults]``) may set ``late_penalty``:

    late_penalty = { per_day = 0.1, max = 0.5 }   # 10% of the lab's points per day or part of one, at most 50%
    late_penalty = { flat = 0.2, grace_hours = 1 }   # 20% off any late work, the first hour free

Fractions are of the lab's points, and a penalty never takes a lab below 0. Late work always
gets a ``late`` row that says how late it was, costing nothing without ``late_penalty``.
Canvas's marker says only *that* a file was late: a ``per_day`` penalty then counts one day, and
the row says so. The policy is applied when the reports are written (``publish``), from the
batch's intake record and the TAs' scores, so changing it re-runs no notebook.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.grading.gradebook.report import LATE as CHECK  # the check name (and status) of the row late work gets

KEYS = {"per_day", "flat", "max", "grace_hours"}
DAY = 86400.0


class PolicyError(ValueError):
    """A late_penalty the rubric cannot use; the message says what to write."""


@dataclass(frozen=True)
class Policy:
    per_day: float = 0.0  # fraction of the lab's points per day late (a started day counts)
    flat: float = 0.0  # fraction of the lab's points off any late work
    max: float = 1.0  # the most a penalty takes, as a fraction of the lab's points
    grace_hours: float = 0.0

    def describe(self) -> str:
        what = (
            f"{self.flat:.0%} of the lab's points"
            if self.flat
            else f"{self.per_day:.0%} of the lab's points per day late"
        )
        return (
            what
            + (f", at most {self.max:.0%}" if self.max < 1 else "")
            + (f", after {self.grace_hours:g} hour(s) of grace" if self.grace_hours else "")
        )

    def fraction(self, seconds: float | None) -> tuple[float, str]:
        """(share of the lab's points taken, how it was counted) for work ``seconds`` late
        (None: late by the LMS's marker, by an unknown time)."""
        if seconds is not None and seconds <= self.grace_hours * 3600:
            return 0.0, f"within the {self.grace_hours:g} hour(s) of grace"
        if self.flat:
            return min(self.flat, self.max), "flat"
        if seconds is None:
            return min(self.per_day, self.max), "1 day (the LMS marks it late without saying by how much)"
        days = math.ceil((seconds - self.grace_hours * 3600) / DAY)
        return min(self.per_day * days, self.max), f"{days} day(s)"


def parse(value, where: str) -> Policy | None:
    """The Policy a rubric's ``late_penalty`` gives (None: no penalty); PolicyError says why not."""
    if value is None:
        return None
    example = "write late_penalty = { per_day = 0.1, max = 0.5 } or { flat = 0.2 }"
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: late_penalty must be a table; {example}")
    unknown = set(value) - KEYS
    if unknown:
        raise PolicyError(
            f"{where}: late_penalty has unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(KEYS))}"
        )
    for k, v in value.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise PolicyError(f"{where}: late_penalty.{k} must be a number >= 0, not {v!r}")
    for k in ("per_day", "flat", "max"):
        if value.get(k, 0) > 1:
            raise PolicyError(f"{where}: late_penalty.{k} is a fraction of the lab's points, 0 to 1, not {value[k]!r}")
    if ("per_day" in value) == ("flat" in value):
        raise PolicyError(f"{where}: late_penalty needs exactly one of per_day and flat; {example}")
    if "max" in value and value["max"] == 0:
        raise PolicyError(f"{where}: late_penalty.max = 0 takes nothing; leave late_penalty out instead")
    return Policy(**{k: float(v) for k, v in value.items()})


def how_late(info: dict) -> str:
    """How late, in words, from an intake record (``late_seconds``, ``marker``)."""
    seconds = info.get("late_seconds")
    by = f" by {_duration(seconds)}" if isinstance(seconds, (int, float)) else ""
    return f"submitted late{by} ({info.get('marker') or 'the LMS marks it late'})"


def row(student: str, lab, info: dict, earned: float) -> dict | None:
    """The ``late`` row of ``lab`` for work the intake record ``info`` marks late (None: on time).
    ``earned``: the lab's points before the penalty, which it never takes below 0."""
    if not info.get("late"):
        return None
    policy = getattr(lab, "late_penalty", None)
    reason = how_late(info)
    points = 0.0
    if policy is None:
        reason += "; the rubric sets no late penalty"
    else:
        share, counted = policy.fraction(info.get("late_seconds"))
        points = min(share * lab.max_points, max(earned, 0.0))
        reason += f"; the late penalty ({policy.describe()}) counts {counted}: -{points:g} points"
    return {
        "student": student,
        "lab": lab.key,
        "check": CHECK,
        "points": -points if points else 0.0,
        "max": 0.0,
        "status": CHECK,
        "reason": reason,
        "seconds": "",
    }


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(seconds, 0) / 60:.0f} min"
    if seconds < 2 * DAY:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / DAY:.1f} days"
