"""Names that carry their maker's pid (``<prefix><pid>-...``), so that what a killed process left
behind (a cgroup, a host folder, a quota group) is told from what a live one is using: the leftover
is the one whose maker has ended. Imports nothing from labkit."""

from __future__ import annotations

import os


def maker(name: str, prefix: str) -> int | None:
    """The pid in ``name`` (``<prefix><pid>-...``), or None for a name of another form."""
    head = name[len(prefix) :].split("-", 1)[0] if name.startswith(prefix) else ""
    return int(head) if head.isdigit() else None


def ended(pid: int) -> bool:
    """Whether no process ``pid`` is running here."""
    return not os.path.exists(f"/proc/{pid}")
