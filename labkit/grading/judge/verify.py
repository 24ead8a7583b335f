"""Re-check what a notebook claims from the files its run left behind, with the grader's own inputs.

A record is only what the notebook printed; a verifier recomputes the claim from the run's
artifacts (saved weights, task result files) with labkit's own code. A rubric check names one
with ``verify = "NAME"`` or ``verify = { name = "NAME", arg = ... }``; a disagreeing value makes
the check ``mismatch``, a claim that cannot be checked ``unverified``: no points either way.

A verifier trusts its arguments (from the rubric) and nothing the notebook chose. It reads
artifacts only through ``Context.path``, which refuses absolute paths, ``..``, symbolic links
that lead out of the run's work folder and files over ``MAX_ARTIFACT_BYTES``. Verifiers run in
the grader's sandboxed, limited check process (``labkit.grading.judge.postrun``).

Adding one: in the lab's folder (``labkit/labs/<lab>/verifiers.py``), a function taking
``(ctx, **args)`` and returning a ``Verdict``, decorated with ``@verifier("name")``, taking every input that defines the check as an argument with the lab's
default, and raising ``Unverifiable`` (naming the missing file and the cell that writes it).
"""

from __future__ import annotations

import glob
import inspect
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from labkit.notebook.record import Missing, lookup  # noqa: F401 - lookup: how a check's record is read

# a verifier's and a hidden check's verdicts alike; each lab's own verifiers are in its folder
# (labkit/labs/<lab>/verifiers.py), found by ``discover("verifiers")``
from labkit.labs.declare import VERIFIERS, Unverifiable, Verdict, discover, verifier  # noqa: F401

MAX_ARTIFACT_BYTES = 64 * 2**20
MAX_RESULT_FILES = 256


@dataclass
class Context:
    workdir: Path  # the run's working directory (artifacts/, runs/ ...), read-only
    records: dict  # every record of the executed notebook
    params: dict  # the lab's parameters from the rubric (never the notebook's own)
    claimed: object  # the value of the check's record: what is being verified

    def path(self, rel, what: str = "artifact") -> Path:
        """``rel`` (a path a record or the rubric names) inside the work folder, or Unverifiable:
        relative to it, or absolute inside it (the sandbox shows the folder at its own path),
        never with ``..``, and not through a link that leads out."""
        rel = str(rel)
        root = self.workdir.resolve()
        if not rel or ".." in Path(rel).parts:
            raise Unverifiable(f"the {what} path {rel!r} must be a path in the run's folder, without '..'")
        if Path(rel).is_absolute() and not Path(rel).is_relative_to(root):
            raise Unverifiable(f"the {what} path {rel!r} leads out of the run's folder; refused")
        try:
            resolved = (root / rel).resolve(strict=True)
        except (FileNotFoundError, RuntimeError):
            raise Unverifiable(f"{rel} was not saved, so the claim cannot be re-checked") from None
        if resolved != root and root not in resolved.parents:
            raise Unverifiable(f"the {what} {rel} is a link that leads out of the run's folder; refused")
        if resolved.is_file() and resolved.stat().st_size > MAX_ARTIFACT_BYTES:
            raise Unverifiable(
                f"the {what} {rel} is {resolved.stat().st_size / 2**20:.0f} MB, over the "
                f"{MAX_ARTIFACT_BYTES // 2**20} MB a verifier reads"
            )
        return resolved


def run(spec: dict, ctx: Context) -> Verdict:
    """Run the verifier ``spec`` names ({"name": ..., **args}); raises Unverifiable."""
    args = {k: v for k, v in spec.items() if k != "name"}
    fn = discover("verifiers")[spec["name"]]
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
    ``{name}`` in ``results`` is replaced by record ``name`` (``{sync_run_dir}/worker-*.json``),
    which must name a folder inside the run's folder.
    """

    def folder(m):
        try:
            value = str(lookup(ctx.records, m.group(1)))
        except Missing as e:
            raise Unverifiable(f"the results pattern {results} needs a record: {e}") from e
        ctx.path(value, "run folder")  # refuses paths out of the folder, '..' and links out
        return glob.escape(str(Path(value).relative_to(ctx.workdir.resolve())) if Path(value).is_absolute() else value)

    pattern = re.sub(r"\{([^{}]+)\}", folder, results)
    root = ctx.workdir.resolve()
    files = sorted(f for f in glob.glob(str(root / pattern), recursive=True) if not f.endswith(".hello.json"))
    if not files:
        raise Unverifiable(f"no task result files match {results} in the run's directory")
    if len(files) > MAX_RESULT_FILES:
        raise Unverifiable(f"{len(files)} files match {results}; a run has at most {MAX_RESULT_FILES} tasks")
    found = {}
    for f in files:
        rel = Path(f).relative_to(root).as_posix()
        try:
            data = json.loads(ctx.path(rel, "task result").read_text())
            name = str(lookup(data, key)) if key else rel
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
