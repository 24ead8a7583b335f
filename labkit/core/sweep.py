"""What a killed process left behind (a cgroup, a folder, a network link), found and removed.

A process ended by SIGKILL runs no cleanup: what it made outlives it. A resource is stale when
the process that made it is gone, and only then: one of a process still running is never
removed, however unused it looks (a cgroup is empty from its making until its process enters
it). A ``Sweeper`` says how to list its resources, whether a resource's maker is gone, and how
to remove one; ``sweep()`` removes the stale ones, and one it cannot remove yet (busy, not
empty) stays for a later sweep. Most resources carry their maker's pid in their name
(``<prefix><pid>-...``: ``maker``, ``maker_gone``); a scratch folder holds its maker's lock
instead (``labkit.core.scratch``). Each module that makes such resources registers its sweeper
in ``SWEEPERS`` and runs it where it starts making them (a batch, a network, a folder).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from labkit.core.registry import Registry

SWEEPERS = Registry("sweeper", hint="each is registered by the module that makes its resources")


@dataclass(frozen=True)
class Sweeper:
    """One kind of resource: ``resources()`` lists them, ``maker_gone(r)`` says whether the
    process that made ``r`` has ended, ``remove(r)`` removes it (an ``OSError``: not now)."""

    name: str
    resources: Callable[[], Iterable]
    maker_gone: Callable[[object], bool]
    remove: Callable[[object], object]

    def stale(self) -> list:
        """The resources whose maker has ended, removed or not."""
        return [r for r in self.resources() if self.maker_gone(r)]

    def sweep(self) -> list:
        """Remove the stale resources; returns those removed."""
        removed = []
        for r in self.resources():
            if not self.maker_gone(r):
                continue
            try:
                self.remove(r)
            except OSError:  # busy or not empty (still being left), or removed meanwhile by another sweep
                continue
            removed.append(r)
        return removed


def register(sweeper: Sweeper) -> Sweeper:
    """Add ``sweeper`` to ``SWEEPERS`` under its name; returns it."""
    return SWEEPERS.add(sweeper.name, sweeper)


def maker(name: str, prefix: str) -> int | None:
    """The pid in ``name`` (``<prefix><pid>-...``), or None for a name of another form."""
    head = name[len(prefix) :].split("-", 1)[0] if name.startswith(prefix) else ""
    return int(head) if head.isdigit() else None


def ended(pid: int) -> bool:
    """Whether no process ``pid`` is running here."""
    return not os.path.exists(f"/proc/{pid}")


def maker_gone(name: str, prefix: str, unnamed: bool = False) -> bool:
    """Whether the process whose pid ``name`` carries has ended; ``unnamed`` for a name that
    carries none (a sweeper that owns every name under its prefix says True, else False)."""
    pid = maker(name, prefix)
    return unnamed if pid is None else ended(pid)
