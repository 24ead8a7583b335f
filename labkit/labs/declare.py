"""A hidden check, declared once in its lab's folder (``labkit/labs/<lab>/checks.py``).

A declaration (``Check``) names the student functions a hidden check calls, its case builder
(deterministic inputs from the rubric's ``args``: a seed, sizes), its probe (runs the student's
functions on the cases, in the grader's sandbox, and returns arrays) and its judge (the property,
its tolerance and a hint that shows no expected value, in the grader's judge process). A check
whose answer is one number (or one row) per case declares ``Numbers`` in place of a probe and a
judge; ``numbers`` declares one against the same-named function of the lab's solution.

The engines (``labkit.grading.judge.probe`` and ``.hidden``) run declarations and name no lab:
``discover`` fills ``CHECKS`` from every lab folder that has a ``checks`` module. This module and
the checks run in the sandbox too, so they import nothing of the grader's and reach a lab's
solution only inside a judge (``solution``), in the judge's process.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from labkit.core.registry import Registry, resolve

CHECKS = Registry("hidden check", hint="declared in labkit/labs/<lab>/checks.py")
VERIFIERS = Registry(
    "verifier", hint="declared in labkit/labs/<lab>/verifiers.py (task_steps: labkit.grading.judge.verify)"
)


@dataclass
class Verdict:
    """A judge's (or a verifier's) finding: passed or not, the reason shown, the value it recomputed."""

    ok: bool
    reason: str = ""
    value: object = None  # the recomputed value


class Unverifiable(Exception):
    """Nothing to re-check the claim against; the message says what is missing."""


@dataclass(frozen=True)
class Numbers:
    """A check whose answer is one number per case: the student's function is called with each
    case's values in ``order`` (None: the case itself, one argument), and each answer must be
    within ``atol`` + ``rtol`` x |want| of ``reference(case)`` (an infinite want only by itself);
    with ``width``, one row of that many numbers per case (the probe is the check's own).
    ``hint`` names the case, never the grader's value; ``output`` is the probe's array."""

    output: str
    reference: Callable  # (case) -> the grader's number; built by ``solution`` to import lazily
    atol: float
    rtol: float
    hint: Callable | str  # (case, mine) -> the failure's reason, or a str.format template of case's keys and mine
    order: tuple[str, ...] | None = None
    what: str = "a number"  # what the function returns, for the error when it returns something else
    noun: str = "cases"  # what the cases are, in "gave 3 answers for 12 <noun>"
    width: int | None = None  # numbers per case, where a case's answer is a row

    def reason(self, case, mine) -> str:
        """Why ``mine`` fails ``case``: the hint, called or (a template) filled in with the case's values."""
        return self.hint.format(**case, mine=mine) if isinstance(self.hint, str) else self.hint(case, mine)


@dataclass(frozen=True)
class Check:
    """One hidden check, as its lab declares it (``declare``); the engines run it."""

    name: str  # the rubric's ``check = "..."``
    functions: tuple[str, ...]  # the student's functions the probe takes from the notebook, by name
    cases: Callable  # (**args) -> the cases (or settings); raises TypeError/ValueError on bad args
    probe: Callable | None = None  # (fns, args, out) -> {name: array}, in the sandbox
    judge: Callable | None = None  # (args, arrays, folder) -> Verdict, in the judge's process
    numbers: Numbers | None = None  # in place of probe and judge (a probe given as well wins)
    last: bool = False  # its probe may end its process (memory, time): it runs after the others
    died: Callable | None = None  # (args, folder) -> Verdict | None when the probe's process ended
    child: Callable | None = None  # (argv, load_functions) -> exit code: a process its probe starts (``child_command``)
    defaults: dict = field(default_factory=dict)  # arguments the check always passes; the rubric's add to them

    def __post_init__(self):
        if (self.probe is None or self.judge is None) and self.numbers is None:
            raise ValueError(f"hidden check {self.name!r} declares neither a probe and a judge nor Numbers")
        if self.probe is None and self.numbers.width is not None:
            raise ValueError(f"hidden check {self.name!r} answers a row per case: it needs a probe of its own")

    def args(self, rubric_args: dict) -> dict:
        return {**self.defaults, **rubric_args}

    def validate(self, args: dict) -> None:
        """A TypeError/ValueError when ``args`` are not inputs of this check."""
        self.cases(**self.args(args))


def declare(name: str, functions, cases: Callable, **how) -> Check:
    """Declare hidden check ``name`` (see ``Check``) and register it in ``CHECKS``; a name that
    another lab's checks declared already is an error (the rubric names a check by its name alone)."""
    if name in CHECKS and CHECKS[name].cases.__module__ != cases.__module__:
        raise ValueError(
            f"hidden check {name!r} is declared twice: in {CHECKS[name].cases.__module__} and {cases.__module__}"
        )
    return CHECKS.add(name, Check(name, tuple(functions), cases, **how))


def numbers(function: str, cases: Callable, output: str, atol: float, rtol: float, hint, **how) -> Check:
    """Declare ``<lab>_<function>``, a ``Numbers`` check of the student's ``function`` against the
    function of that name in the lab's solution (``how``: Numbers' ``order``, ``what``, ``noun``);
    the lab is the one whose ``checks`` module defines ``cases``."""
    package, _, lab = cases.__module__.removesuffix(".checks").rpartition(".")
    if package != __name__.rpartition(".")[0] or not cases.__module__.endswith(".checks"):
        raise ValueError(
            f"{cases.__module__} is no lab's checks module: declare the check of {function!r} with declare()"
        )
    reference = solution(f"{package}.{lab}.solution:{function}")  # the lab's own solution, by construction
    return declare(f"{lab}_{function}", [function], cases, numbers=Numbers(output, reference, atol, rtol, hint, **how))


def shuffled(rng: np.random.Generator, cases: list) -> list:
    """``cases`` in an order drawn from ``rng``: the cases a builder puts first (one worker, one
    step) stand anywhere among the drawn ones."""
    return [cases[i] for i in rng.permutation(len(cases))]


def discover(kind: str = "checks") -> Registry:
    """``CHECKS`` with every lab's hidden checks (each lab folder's ``checks`` module), or with
    ``kind="verifiers"``, ``VERIFIERS`` with every lab's verifiers (its ``verifiers`` module, read
    only in the grader's judge: they load the kit's models and data)."""
    import labkit.labs

    for lab in labkit.labs.names():
        module = f"{labkit.labs.__name__}.{lab}.{kind}"
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
    return {"checks": CHECKS, "verifiers": VERIFIERS}[kind]


def verifier(name: str):
    """Register a verifier: ``@verifier("lab3_weights")`` re-checks a record from the run's files."""
    return VERIFIERS.register(name)


def claimed_number(ctx) -> float:
    """The record a verifier re-checks, as a finite number, or Unverifiable."""
    claimed = ctx.claimed
    if isinstance(claimed, bool) or not isinstance(claimed, (int, float)) or not math.isfinite(claimed):
        raise Unverifiable(f"the record is {claimed!r}, not a number")
    return float(claimed)


def solution(reference: str) -> Callable:
    """``(case) -> reference(**case)`` for a ``"module:function"`` of a lab's solution, imported at
    the first call: in the judge's process, never in the sandbox (which has no solutions)."""

    def want(case: dict):
        return resolve(reference)(**case)

    return want


# ---------------------------------------------------------------------------------------------
# What a judge uses: tolerances, and the probe's files read without trusting them


def close(mine, want, atol: float, rtol: float) -> float:
    """Largest error of ``mine`` against ``want``, in units of the tolerance (<= 1 is close)."""
    mine, want = np.asarray(mine, np.float64), np.asarray(want, np.float64)
    if mine.shape != want.shape:
        return math.inf
    if not np.all(np.isfinite(mine)):
        return math.inf
    return float(np.max(np.abs(mine - want) / (atol + rtol * np.abs(want)), initial=0.0))


def probe_file(path: Path, limit: int) -> Path:
    """``path``, a file the probe wrote (not a link) of at most ``limit`` bytes; else Unverifiable."""
    if not path.is_file() or path.is_symlink():
        raise Unverifiable(f"the probe wrote no {path.name}")
    if path.stat().st_size > limit:
        raise Unverifiable(f"{path.name} is over {limit // 2**20} MB")
    return path


def small_json(path: Path, limit: int = 4096) -> dict:
    """A small JSON object the probe wrote (not a link); {} for anything else."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------------------------------------
# A probe's child processes

probe_script: str | None = None  # set by the probe engine: the script a probe's child process runs


def child_command(check: str, *args: str) -> list[str]:
    """The command line of a child process that runs ``CHECKS[check].child(args, load_functions)``:
    the probe engine's script, as the probe itself runs (in the sandbox, its own copy)."""
    if probe_script is None:
        raise RuntimeError("a probe's child process starts from the probe engine, labkit.grading.judge.probe")
    return [sys.executable, probe_script, "--child", check, *args]
