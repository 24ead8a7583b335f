"""Re-check what a notebook claims, in the grader's own process, from the files it left behind.

A record is only what the notebook printed; a verifier recomputes the claim from the run's
artifacts (saved weights, task result files) with labkit's own code. A rubric check names
one with ``verify = "NAME"`` or ``verify = { name = "NAME", arg = ... }``; when the recomputed
value disagrees, the check's status becomes ``mismatch`` and it earns no points. When the
claim cannot be checked at all (the artifact is missing or unreadable) it is ``unverified``,
also with no points.

Adding a verifier for a lab: write a function here taking ``(ctx, **args)`` and returning a
``Verdict``, decorate it with ``@verifier("name")``, and raise ``Unverifiable`` (with a reason
that says which file is missing and which cell writes it) when there is nothing to check.
"""
from __future__ import annotations

import ast
import glob
import inspect
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from labkit.grading.rubric import Missing, cell_tags, lookup

VERIFIERS: dict[str, Callable] = {}


@dataclass
class Context:
    workdir: Path          # the run's working directory (artifacts/, runs/ ...)
    records: dict          # every record of the executed notebook
    params: dict           # the parameters the notebook ran with (its defaults, then the rubric's)
    claimed: object        # the value of the check's record: what is being verified


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    value: object = None   # the recomputed value


class Unverifiable(Exception):
    """Nothing to re-check the claim against; the message says what is missing."""


def verifier(name: str):
    def register(fn):
        VERIFIERS[name] = fn
        return fn
    return register


def run(spec: dict, ctx: Context) -> Verdict:
    """Run the verifier ``spec`` names ({"name": ..., **args}); raises Unverifiable."""
    args = {k: v for k, v in spec.items() if k != "name"}
    fn = VERIFIERS[spec["name"]]
    try:
        inspect.signature(fn).bind(ctx, **args)
    except TypeError as e:  # the rubric's fault, not the submission's
        raise Unverifiable(f"verifier {spec['name']!r} was given bad arguments {sorted(args)}: {e}") from e
    try:
        return fn(ctx, **args)
    except Unverifiable:
        raise
    except Exception as e:  # a broken artifact must not stop the batch; say what happened
        raise Unverifiable(f"verifier {spec['name']!r} failed: {type(e).__name__}: {e}") from e


def notebook_parameters(nb) -> dict:
    """The literal assignments of the ``parameters`` cell, overridden by papermill's injected cell."""
    params = {}
    for tag in ("parameters", "injected-parameters"):
        for cell in nb.cells:
            if cell.cell_type == "code" and tag in cell_tags(cell):
                params.update(_literal_assignments(cell.source))
    return params


def _literal_assignments(source: str) -> dict:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None:
                try:
                    out[targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass  # not a literal (an expression of other parameters): not needed here
    return out


# ---------------------------------------------------------------------------------------------
# Verifiers

@verifier("task_steps")
def task_steps(ctx: Context, results: str, field: str = "steps", key: str | None = None) -> Verdict:
    """The recorded per-worker step counts match the tasks' own result files.

    ``results`` is a glob under the working directory, where the grader points ``LABKIT_RUNS``
    (``runs/lab2/*/worker-*.json``: the launcher's ``<type>-<index>.json`` result files; the
    tasks' ``<type>-<index>.hello.json`` start-up files, which the same glob matches, are skipped);
    ``field`` is the path of the step count inside each file (``steps.local``). With ``key``
    (a field naming the task, e.g. ``task``) the record must be a dict keyed by it; otherwise
    values are compared as a multiset, since a list's order is the notebook's choice.
    ``{name}`` in ``results`` is replaced by record ``name`` (``{sync_run_dir}/worker-*.json``).
    """
    try:  # "{sync_run_dir}/worker-*.json": a record names the run directory
        pattern = re.sub(r"\{([^{}]+)\}", lambda m: glob.escape(str(lookup(ctx.records, m.group(1)))), results)
    except Missing as e:
        raise Unverifiable(f"the results pattern {results} needs a record: {e}") from e
    files = sorted(f for f in glob.glob(str(ctx.workdir / pattern), recursive=True) if not f.endswith(".hello.json"))
    if not files:
        raise Unverifiable(f"no task result files match {results} in the run's directory")
    found = {}
    for f in files:
        try:
            data = json.loads(Path(f).read_text())
            name = str(lookup(data, key)) if key else Path(f).relative_to(ctx.workdir).as_posix()
            found[name] = lookup(data, field)
        except (OSError, json.JSONDecodeError, Missing) as e:
            raise Unverifiable(f"task result {Path(f).name} is unreadable or lacks {field!r}: {e}") from e
    claimed = ctx.claimed
    if key:
        if not isinstance(claimed, dict):
            raise Unverifiable(f"the record must be a dict keyed by {key!r} to compare with the task files")
        agree = {str(k): v for k, v in claimed.items()} == found
    else:
        values = list(claimed.values()) if isinstance(claimed, dict) else claimed
        agree = isinstance(values, list) and sorted(map(_num, values)) == sorted(map(_num, found.values()))
    shown = found if key else sorted(found.values())
    if agree:
        return Verdict(True, value=shown)
    return Verdict(False, f"recorded {claimed} but the task result files say {shown}", shown)


def _num(v):
    return float(v) if isinstance(v, (int, float)) else math.nan


@verifier("lab1_weights")
def lab1_weights(ctx: Context, artifact: str = "artifacts/lab1_core_weights.npz", tolerance: float = 0.005) -> Verdict:
    """Lab 1: the recorded test accuracy is what the saved weights W, b give on the test set."""
    path = ctx.workdir / artifact
    if not path.is_file():
        raise Unverifiable(f"{artifact} was not saved, so the accuracy cannot be re-checked "
                           f"(the training cell saves it)")
    from labkit import lr

    acc = lr.evaluate_weights(path, **lr.evaluation_settings(ctx.params))
    claimed = float(ctx.claimed)
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)


@verifier("lab3_weights")
def lab3_weights(ctx: Context, weights: str = "artifacts.sync_weights", tolerance: float = 0.002) -> Verdict:
    """Lab 3: the recorded test accuracy is what the chief's saved sparse LR weights give on
    the test set the file names (a9a, or the seeded click data). ``weights`` is the record
    holding the file's path (relative to the working directory)."""
    try:
        path = ctx.workdir / str(lookup(ctx.records, weights))
    except Missing as e:
        raise Unverifiable(f"no record {weights!r} names the saved weights (the records cell writes it): {e}") from e
    if not path.is_file():
        raise Unverifiable(f"{path.name} was not saved, so the accuracy cannot be re-checked (the records cell "
                           f"copies it from the cluster's run directory)")
    from labkit.experiments.sparse_lr import evaluate_weights

    acc = evaluate_weights(path)["accuracy"]
    claimed = float(ctx.claimed)
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)
