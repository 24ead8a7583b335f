"""Which kit a notebook was written against: stamped by ``make release``, read by the grader.

A student's notebook keeps the stamp of the kit they were given (``metadata.labkit``). When the
course updates the kit mid-term, the grader records the stamp with the run and the feedback says
which kit the notebook was written against and which graded it; names that moved between them
still work (``labkit.compat``). The stamp is the student's file, so it only informs: it decides
nothing.
"""

from __future__ import annotations

import re

KEY = "labkit"  # the notebook-level metadata key
UNSTAMPED = ""  # a notebook with no stamp: from a kit before stamps, or not from a release at all
_VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){1,3}")


def current() -> dict:
    import labkit
    from labkit.labs.surface import API_VERSION

    return {"version": labkit.__version__, "api": API_VERSION}


def stamp(nb) -> None:
    """Mark nbformat node ``nb`` as written against this kit."""
    nb.metadata[KEY] = current()


def written_for(nb) -> str:
    """The kit version ``nb`` carries; ``UNSTAMPED`` when it carries none (an earlier kit, a
    notebook from elsewhere, or removed), "unreadable" when what it carries is not a version."""
    found = (nb.get("metadata") or {}).get(KEY)
    if found is None:
        return UNSTAMPED
    version = found.get("version") if isinstance(found, dict) else None
    return version if isinstance(version, str) and _VERSION.fullmatch(version) else "unreadable"


def note(written: str) -> str:
    """The feedback's line when the notebook says it was written against another kit than the
    grader's ('' when the same, or when it says nothing readable: no guess is shown as a fact)."""
    graded_by = current()["version"]
    if not _VERSION.fullmatch(written or "") or written == graded_by:
        return ""
    return (
        f"written against labkit {written}, graded by labkit {graded_by}: names that moved between them still "
        f"work (a KitDeprecationWarning in the executed notebook names the new place)"
    )
