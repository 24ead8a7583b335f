"""A notebook's self-checks: properties of a student's function, tested on the student's own cases.

A self-check names the function it tests and each property it tried; a failure says which property
failed, never an expected value. ``verdict`` shows the result in the cell (text for the reader, and
a labkit MIME part that ``make check`` reads back with ``read_verdicts``). Where someone is reading
(a live JupyterLab session) a failed self-check raises ``SelfCheckFailed``, so Run All stops at the
function to fix. In a headless run (``make check``, the grader, papermill) it only shows its verdict,
so the run goes on as the grader's does: a failed self-check costs no point the grader's own checks
would not take, and ``make check`` reports every failed self-check of the run, not only the first.
Imports nothing from labkit but the live-session test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.notebook.record import show

MIME = "application/vnd.labkit.self-check+json"


class SelfCheckFailed(AssertionError):
    """A function failed a property of its self-check; the message names both, and no value."""


@dataclass
class Verdict:
    """What a self-check of ``subject`` tried (``checked``) and which of those properties failed."""

    subject: str
    checked: list = field(default_factory=list)
    failed: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failed

    def expect(self, ok: bool, prop: str) -> bool:
        """Note that property ``prop`` (a phrase: what a right function does) was checked, and failed
        unless ``ok``."""
        self.checked.append(prop)
        if not ok:
            self.failed.append(prop)
        return bool(ok)

    def values(self, fn, cases, convert=float, what: str = "a number") -> list | None:
        """``fn(case)`` converted by ``convert`` for every case; None, and a failed property, when
        one raises or gives no such value (the error's type is named, not what it was called with)."""
        try:
            return [convert(fn(c)) for c in cases]
        except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as e:
            self.expect(False, f"{what} for every case tried, without an error (it raised {type(e).__name__})")
            return None

    def text(self) -> str:
        if self.passed:
            return f"{self.subject} passes its self-check: " + "; ".join(self.checked)
        return f"{self.subject} fails its self-check on: " + "; ".join(self.failed)


def verdict(v: Verdict) -> Verdict:
    """Show ``v`` in the cell; in a live session raise ``SelfCheckFailed`` when a property failed."""
    show(bundle(v))
    if not v.passed and _live():
        raise SelfCheckFailed(v.text())
    return v


def bundle(v: Verdict) -> dict:
    """``v`` as the cell shows it: a line for the reader, and the MIME part ``read_verdicts`` reads."""
    return {
        MIME: {"subject": v.subject, "checked": list(v.checked), "failed": list(v.failed)},
        "text/plain": ("ok: " if v.passed else "SELF-CHECK FAILED: ") + v.text(),
    }


def _live() -> bool:
    from labkit.measure.progress import is_live

    return is_live()


def read_verdicts(cell) -> list[Verdict]:
    """The self-check verdicts an executed code cell showed; a payload of the wrong shape is skipped."""
    found = []
    for out in cell.get("outputs") or []:
        payload = (out.get("data") or {}).get(MIME) if isinstance(out, dict) else None
        if not isinstance(payload, dict) or not isinstance(payload.get("subject"), str):
            continue
        checked, failed = payload.get("checked"), payload.get("failed")
        if isinstance(checked, list) and isinstance(failed, list):
            found.append(Verdict(payload["subject"], [str(p) for p in checked], [str(p) for p in failed]))
    return found
