"""Where the kit finds the exercises' reference implementations: ``labkit.solutions``.

The instructor's kit holds them (the grader checks against them, the kit's own defaults and
tests use them); the student kit (``make release``) does not ship that package. ``solution``
imports one, or raises an error that says what the student passes instead: their own
function from the notebook. Imports nothing from labkit.
"""
from __future__ import annotations

import importlib


class NotInStudentKit(LookupError):
    """A reference implementation was asked for in the student kit, which has none."""


def solution(module: str, name: str, instead: str):
    """``labkit.solutions.<module>.<name>``; without it, NotInStudentKit naming ``instead``."""
    try:
        return getattr(importlib.import_module(f"labkit.solutions.{module}"), name)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("labkit.solutions"):
            raise NotInStudentKit(f"the kit's reference {name} is not part of the student kit; pass {instead}") \
                from None
        raise
