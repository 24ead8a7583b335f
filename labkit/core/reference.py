"""Where the kit finds the exercises' reference implementations: each lab's ``solution`` module.

The instructor's kit holds them (the grader checks against them, the kit's own defaults and
tests use them); the student kit (``make release``) ships none of them. ``solution``
imports one, or raises an error that says what the student passes instead: their own
function from the notebook.

``SOLUTIONS`` names every reference the kit uses, so the dependency is written down (and
tests/kit/test_dependencies.py sees it). It points up: a reference stands in for the student's
function, which the notebook, above the whole kit, passes in. The solutions build only on modules
that name no reference (``learning.ops``, ``learning.costargs``), so the edge closes no cycle.
Only this module, the grader and a lab's own checks may name them (that test checks both).
Imports nothing else from labkit.
"""

from __future__ import annotations

from labkit.core.registry import Registry, resolve

SOLUTIONS = Registry(
    "reference implementation",
    builtin={
        "lab1.sgd_step": "labkit.labs.lab1.solution:sgd_step",
        "lab2.sync_round": "labkit.labs.lab2.solution:sync_round",
        "lab3.sparse_gradient": "labkit.labs.lab3.solution:sparse_gradient",
        "lab5.comm_terms": "labkit.labs.lab5.solution:comm_terms",
        "lab5.step_bytes": "labkit.labs.lab5.solution:step_bytes",
    },
)


class NotInStudentKit(LookupError):
    """A reference implementation was asked for in the student kit, which has none."""


def solution(module: str, name: str, instead: str):
    """``labkit.labs.<module>.solution.<name>``; without it, NotInStudentKit naming ``instead``."""
    try:
        return resolve(SOLUTIONS.reference(f"{module}.{name}"))  # imported each time: never cached here
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("labkit.labs.") and e.name.endswith(".solution"):
            raise NotInStudentKit(
                f"the kit's reference {name} is not part of the student kit; pass {instead}"
            ) from None
        raise
