"""The labs, one folder each: its student API (``__init__``), checks, solution, experiment, traces.

Engines find labs here, never by name: ``names()`` lists every lab folder, so adding a lab is
adding a folder. A lab imports the layers below it, never another lab.
"""

from __future__ import annotations

import importlib
import pkgutil

ENGINES = ("declare", "stamp", "surface")  # modules of this package that are not labs


def names() -> list[str]:
    """Every lab folder's name (``lab1`` ...), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg and m.name not in ENGINES)


def api(name: str):
    """Lab ``name``'s package: its student API."""
    if name not in names():
        raise ValueError(f"no lab {name!r} in labkit/labs/ (labs: {', '.join(names())})")
    return importlib.import_module(f"{__name__}.{name}")
