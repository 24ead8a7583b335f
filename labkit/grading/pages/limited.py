"""One page in a process of its own: the page's limits first, then its writer.

``main(SPEC)`` is what every page's process runs, whether it started as ``python -m
labkit.grading.pages.limited SPEC`` or was forked from the warm renderer (``warm``): it lowers the
process's data limit (``limits.limit_self``) and its CPU time (``limits.limit_cpu``), then calls the
writer the spec names with the spec's arguments. ``warm_up`` prepares the warm renderer for a
writer: it imports the writer's module and runs that module's ``warm_up(folder)``, if it has one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from labkit.core.registry import resolve
from labkit.grading.run import limits

PACKAGE = "labkit.grading."  # a page writer is the grader's own function, nothing else


def is_writer(reference: str) -> bool:
    """Whether ``reference`` ("module:name") may name a page writer: a module-level function of labkit.grading."""
    return reference.startswith(PACKAGE) and "<" not in reference


def writer(reference: str):
    """The page writer ``reference`` ("module:name") names, which must be one of labkit.grading."""
    if not is_writer(reference):
        raise ValueError(f"not a page writer of labkit.grading: {reference}")
    return resolve(reference)


def main(argv=None) -> int:
    spec = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    limits.limit_self(int(spec["memory_mb"] * 2**20))
    limits.limit_cpu(float(spec["cpu_s"]))
    writer(spec["writer"])(**spec["args"])
    return 0


_warmed: set[str] = set()


def warm_up(reference: str, folder: Path) -> None:
    """Import the module of the writer ``reference`` and run its ``warm_up(folder)`` once, if it has one."""
    fn = writer(reference)
    module = sys.modules[fn.__module__]
    if module.__name__ not in _warmed:
        _warmed.add(module.__name__)
        hook = getattr(module, "warm_up", None)
        if hook is not None:
            hook(folder)


if __name__ == "__main__":
    sys.exit(main())
