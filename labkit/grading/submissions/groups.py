"""Canvas's group set: who handed in a group assignment's file with whom.

Canvas's "Download Submissions" of a group assignment holds one file per group, named after the
group and carrying the user id of the member who handed it in (canvas-lms ``ContentZipper``
takes the assignment's ``representatives``). Nothing in it names the other members, so the
instructor gives the group set as Canvas exports it (People > the group set's tab > Import >
"Download Course Roster CSV", or the group categories export API): one row per member, with
``canvas_user_id`` and ``group_name`` (``name``, ``login_id``, ``user_id``, ``canvas_group_id``
when there). The intake then lays the file out for every member, and the grader runs it once
and credits them all.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("canvas_user_id", "group_name")


@dataclass(frozen=True)
class Member:
    user_id: str  # Canvas's user id: the ID column of the gradebook export
    name: str
    login_id: str
    group: str  # Canvas's group id, else the group's name: what makes two rows one group
    group_name: str


def read_group_set(path) -> dict[str, Member]:
    """{Canvas user id: its member row} from Canvas's group set CSV."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"groups {path}: cannot read it as a CSV file: {e}") from None
    missing = [c for c in REQUIRED if not rows or c not in rows[0]]
    if missing:
        raise ValueError(
            f"groups {path}: no {', '.join(missing)} column; give Canvas's group set CSV (People > the group "
            f"set's tab > Import > Download Course Roster CSV), one row per member"
        )
    out = {}
    for row in rows:
        uid, group = (row.get("canvas_user_id") or "").strip(), (row.get("group_name") or "").strip()
        if not uid or not group:  # a student of the course in no group
            continue
        out[uid] = Member(
            uid,
            (row.get("name") or "").strip(),
            (row.get("login_id") or "").strip(),
            (row.get("canvas_group_id") or "").strip() or group,
            group,
        )
    return out


def mates(members: dict[str, Member], user_id: str) -> list[Member]:
    """Everyone in ``user_id``'s group, ``user_id`` included ([] when in none)."""
    me = members.get(user_id)
    return [] if me is None else sorted((m for m in members.values() if m.group == me.group), key=lambda m: m.user_id)
