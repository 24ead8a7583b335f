"""Hidden checks (nbgrader's sense): the student's own functions, run on the grader's inputs.

A rubric check ``kind = "hidden"`` names one (``check = "<lab>_<name>"``, optional
``args = { seed = 3 }``: seeds and sizes, from the rubric only). Each is declared once, in its lab's
folder (``labkit/labs/<lab>/checks.py``, see ``labkit.labs.declare``). After the notebook has run,
the probe (``probe.py``, a sandbox with the student's view of the kit) runs the declared probe on the
student's functions, and then the judge process (``labkit.grading.judge.postrun``, the full kit) calls
``judge`` here: it reads what the probe wrote, rebuilds the same cases, and runs the declared judge
with the grader's reference (``decide``; a ``Numbers`` check is judged by ``each_number``). Monkey-
patching in the notebook reaches neither process, and the student's code never shares a process with
the reference. To add a hidden check, declare it in its lab's ``checks.py`` and name it in the rubric.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from labkit.labs.declare import Check, Unverifiable, Verdict, close, discover, probe_file

HIDDEN = discover()  # every lab's declarations, by check name


def judge(name: str, rubric_args: dict, folder: Path) -> Verdict:
    """The verdict of hidden check ``name`` from its probe's output in ``folder``; raises Unverifiable."""
    check = HIDDEN[name]
    args = check.args(rubric_args)
    status = _status(folder).get(name)
    if status is None:
        verdict = check.died(args, folder) if check.died is not None else None
        if verdict is not None:
            return verdict
        raise Unverifiable("the student's functions did not finish (time or memory limit, or the process died)")
    if not status.get("ok"):
        what = ", ".join(check.functions) or "code"
        return Verdict(False, f"running your {what} failed: {status.get('error', '?')}")
    try:
        return decide(name, args, _arrays(folder / f"{name}.npz"), folder)
    except KeyError as e:
        raise Unverifiable(f"the probe's output lacks {e}") from None


def decide(name: str, args: dict, arrays: dict, folder: Path) -> Verdict:
    """Hidden check ``name``'s verdict on the probe's ``arrays`` (and files in ``folder``)."""
    check = HIDDEN[name]
    if check.judge is not None:
        return check.judge(args, arrays, folder)
    return each_number(check, args, arrays)


def each_number(check: Check, args: dict, arrays: dict) -> Verdict:
    """The verdict on a ``Numbers`` check's one number (or row of ``width``) per case: each within
    ``atol`` + ``rtol`` x |want| of the reference (an infinite want only by itself); the first that
    is not says the declaration's hint, which names the case, never the grader's value."""
    n, fn = check.numbers, check.functions[0]
    cases, got = check.cases(**args), arrays[n.output]
    if n.width is not None:
        if got.shape != (len(cases), n.width):
            return Verdict(False, f"{fn} gave {got.shape[0]} answers for {len(cases)} {n.noun}")
    elif got.shape != (len(cases),):
        return Verdict(False, f"{fn} gave {got.size} answers for {len(cases)} {n.noun}")
    for case, mine in zip(cases, got):
        want = np.asarray(n.reference(case))
        off = mine != want if want.ndim == 0 and math.isinf(want) else close(mine, want, n.atol, n.rtol) > 1
        if off:
            return Verdict(False, n.reason(case, mine))
    return Verdict(True)


def _status(folder: Path) -> dict:
    try:
        status = json.loads((folder / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return status if isinstance(status, dict) else {}


def _arrays(path: Path, limit: int = 64 * 2**20) -> dict:
    with np.load(probe_file(path, limit), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
