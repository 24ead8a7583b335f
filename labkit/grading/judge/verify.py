"""Re-check what a notebook claims from the files its run left behind, with the grader's own inputs.

A record is only what the notebook printed; a verifier recomputes the claim from the run's
artifacts (saved weights, task result files) with labkit's own code. A rubric check names one
with ``verify = "NAME"`` or ``verify = { name = "NAME", arg = ... }``; a disagreeing value makes
the check ``mismatch``, a claim that cannot be checked ``unverified``: no points either way.

A verifier trusts its arguments (from the rubric) and nothing the notebook chose. It reads
artifacts only through ``Context.path``, which refuses absolute paths, ``..``, symbolic links
that lead out of the run's work folder and files over ``MAX_ARTIFACT_BYTES``. Verifiers run in
the grader's sandboxed, limited check process (``labkit.grading.judge.postrun``).

Adding one: a function taking ``(ctx, **args)`` and returning a ``Verdict``, decorated with
``@verifier("name")``, taking every input that defines the check as an argument with the lab's
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

from labkit.notebook.record import Missing, lookup
from labkit.core.registry import Registry
from labkit.labs.declare import Unverifiable, Verdict  # a verifier's and a hidden check's verdicts alike

VERIFIERS = Registry("verifier")
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


def verifier(name: str):
    """Register a verifier (``labkit.core.registry.Registry``): ``@verifier("lab3_weights")``."""
    return VERIFIERS.register(name)


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


def _claimed_number(ctx: Context) -> float:
    if isinstance(ctx.claimed, bool) or not isinstance(ctx.claimed, (int, float)) or not math.isfinite(ctx.claimed):
        raise Unverifiable(f"the record is {ctx.claimed!r}, not a number")
    return float(ctx.claimed)


@verifier("lab1_weights")
def lab1_weights(
    ctx: Context,
    artifact: str = "artifacts/lab1_core_weights.npz",
    tolerance: float = 0.005,
    test_limit: int | None = None,
    seed: int = 0,
) -> Verdict:
    """Lab 1: the recorded test accuracy is what the saved weights W, b give on the rubric's
    test set (``test_limit`` images of MNIST's test set, all by default, drawn with ``seed``)."""
    path = ctx.path(artifact, "weights file")
    from labkit.learning import lr

    claimed = _claimed_number(ctx)
    acc = lr.evaluate_weights(path, test_limit=test_limit, seed=seed)
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)


@verifier("lab3_weights")
def lab3_weights(
    ctx: Context,
    weights: str = "artifacts.sync_weights",
    tolerance: float = 0.002,
    data: str = "click",
    num_features: int = 1_000_000,
    test_rows: int = 10_000,
    click_seed: int = 0,
) -> Verdict:
    """Lab 3: the recorded test accuracy is what the chief's saved sparse LR weights give on the
    rubric's test set (``data``, ``num_features``, ``test_rows``, ``click_seed``). ``weights`` is
    the record holding the file's path (relative to the working directory). A file saved for
    another test set is a mismatch: the test set is the grader's, never the file's."""
    try:
        rel = str(lookup(ctx.records, weights))
    except Missing as e:
        raise Unverifiable(f"no record {weights!r} names the saved weights (the records cell writes it): {e}") from e
    path = ctx.path(rel, "weights file")
    import numpy as np

    from labkit.tasks.ps_sparse_lr import evaluate_arrays, load_rows

    claimed = _claimed_number(ctx)
    with np.load(path, allow_pickle=False) as f:
        saved = json.loads(str(f["settings"]))
        idx, values = np.asarray(f["indices"]), np.asarray(f["values"], np.float32)
    want = {"data": data, "num_features": num_features, "test_rows": test_rows, "click_seed": click_seed}
    differ = {k: saved.get(k) for k in want if saved.get(k) != want[k]}
    if differ:
        return Verdict(False, f"the weights were saved for another test set ({differ}); the grader's is {want}")
    if idx.shape != values.shape or idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= num_features)):
        raise Unverifiable(f"{rel} holds indices outside 0..{num_features - 1} or not one value per index")
    w = np.zeros(num_features, np.float32)
    w[idx] = values
    test = load_rows(data, "test", num_features=num_features, rows=test_rows, click_seed=click_seed)
    acc = evaluate_arrays(w, test)["accuracy"]
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(False, f"recorded {claimed:.4f} but the saved weights give {acc:.4f} on the test set", acc)


@verifier("lab4_checkpoint")
def lab4_checkpoint(
    ctx: Context,
    checkpoints: str = "runs/lab4/*/checkpoints",
    model: str = "lenet5",
    test_limit: int = 1000,
    seed: int = 0,
    tolerance: float = 0.005,
) -> Verdict:
    """Lab 4: the recorded accuracy of the resumed run is what the last checkpoint it saved gives
    on the rubric's validation set (``test_limit`` MNIST test images drawn with ``seed``): the
    chief's (or worker 0's) checkpoint of the highest epoch under ``checkpoints``, a glob in the
    run's folder, restored into a fresh ``labkit.learning.models`` ``model``."""
    import numpy as np

    root = ctx.workdir.resolve()
    found = []
    for index in glob.glob(str(root / checkpoints / "*" / "ckpt-*.index")):
        rel = Path(index).relative_to(root)
        task, name = rel.parent.name, rel.name[: -len(".index")]
        if task in ("chief-0", "worker-0") and name.split("-")[-1].isdigit():
            ctx.path(rel.as_posix(), "checkpoint")  # refuses links out of the run's folder
            found.append((int(name.split("-")[-1]), task == "chief-0", root / rel.parent / name))
    if not found:
        raise Unverifiable(
            f"no checkpoint of the chief or worker 0 under {checkpoints} (the fault-tolerance run writes them)"
        )
    epoch, _, prefix = max(found)
    claimed = _claimed_number(ctx)
    import tensorflow as tf

    from labkit.learning import models
    from labkit.datasets.loaders import load_mnist

    net = models.build(model, seed=seed)
    tf.train.Checkpoint(model=net).read(str(prefix)).expect_partial()
    data = load_mnist(limit=1, test_limit=test_limit, seed=seed)
    logits = np.concatenate(
        [net(data.x_test[i : i + 500], training=False).numpy() for i in range(0, len(data.x_test), 500)]
    )
    acc = float(np.mean(logits.argmax(axis=1) == data.y_test))
    if abs(acc - claimed) <= tolerance:
        return Verdict(True, value=acc)
    return Verdict(
        False, f"recorded {claimed:.4f} but the epoch-{epoch} checkpoint gives {acc:.4f} on the validation set", acc
    )


@verifier("lab5_held_out")
def lab5_held_out(
    ctx: Context, sweeps: str = "runs/lab5/scaling-*", bound: float = 0.3, margin: float = 0.1
) -> Verdict:
    """Lab 5: the held-out error of the student's cost model, judged against the kit's own model
    on the same runs. The grader reads the sweep's task result files (``sweeps``: a glob in the
    run's folder; the one with the most runs), fits the reference critical path to N below the
    largest and predicts the largest, as the notebook did with the student's ``comm_terms``. The
    claim passes at or below ``bound``, or within ``margin`` of the reference's own error: step
    times carry the load the machine had during these runs, and no answer can beat what the
    reference makes of the same runs by more than luck."""
    from labkit.learning import costmodel
    from labkit.labs.lab5 import experiment as ring_vs_ps
    from labkit.core.proc import usable_cores

    root = ctx.workdir.resolve()
    folders = [Path(f) for f in glob.glob(str(root / sweeps)) if Path(f).is_dir()]
    for f in folders:
        ctx.path(f.relative_to(root).as_posix(), "sweep folder")  # refuses links out of the run's folder
    if not folders:
        raise Unverifiable(f"no sweep under {sweeps}: section 1 runs it")
    folder = max(folders, key=lambda f: len(list(f.glob("*/cluster.json"))))
    claimed = _claimed_number(ctx)
    sweep = ring_vs_ps.load_sweep(folder, cores=usable_cores())
    fit = ctx.records.get("fit_error") if isinstance(ctx.records.get("fit_error"), dict) else {}
    try:  # the loopback link stands in only where a fit fails; the notebook measured it
        loopback = costmodel.Link(float(fit["loopback_alpha_s"]), float(fit["loopback_bandwidth_bytes_per_s"]))
    except (KeyError, TypeError, ValueError):
        loopback = costmodel.Link(30e-6, 3e9, "nominal loopback")
    reference = ring_vs_ps.reference_held_out_error(sweep, loopback)
    if reference is None:
        raise Unverifiable(f"the sweep in {folder.name} has no N above the ones fitted")
    allowed = max(bound, reference + margin)
    shown = {"reference_held_out_median_abs_error": round(reference, 4), "allowed": round(allowed, 4)}
    if claimed <= allowed:
        return Verdict(True, value=shown)
    return Verdict(
        False,
        f"held-out error {claimed:.3f}: above {bound:g} and more than {margin:g} above the kit's own "
        f"model on the same runs ({reference:.3f})",
        shown,
    )
