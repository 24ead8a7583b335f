"""Grading a class through Slurm against ``make grade -j 1``, side by side on this machine, and
what that projects for 100 students x 5 labs on N nodes.

The same submissions (one student's five reference notebooks; ``--quick``: four one-cell
notebooks) are graded with ``-j 1`` and through a one-node Slurm started here
(``labkit.infra.minislurm``) that also runs one notebook at a time: the ratio is Slurm's price
on one node. From a notebook's cost on a node (``n``) and on the grading machine (``c``, its
checks and reports), N nodes finish ``k`` notebooks in about ``max(k n / N, k c)``: the nodes
share the notebooks, the grader's own work does not shrink.

Needs root and Debian's Slurm packages (else the benchmark says so and skips).
More in docs/internals.md, section labkit.bench (the contenders, the projection).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from labkit.bench import entry, ratio
from labkit.bench.grader import TRIVIAL_RUBRIC

REPO = Path(__file__).resolve().parents[2]
CLASS = (100, 5)  # students x labs of the projection
NODES = (1, 4, 10, 25)


def _submissions(folder: Path, quick: bool) -> tuple[Path, Path, int]:
    """(rubric, submissions folder, notebooks)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    if quick:
        rubric = folder / "rubric.toml"
        rubric.write_text(TRIVIAL_RUBRIC)
        nb = new_notebook(cells=[new_code_cell("import labkit\nlabkit.record('x', 1)")])
        for i in range(4):
            (folder / "subs" / f"s{i}").mkdir(parents=True)
            nbformat.write(nb, str(folder / "subs" / f"s{i}" / "trivial.ipynb"))
        return rubric, folder / "subs", 4
    from labkit.grading.judge.rubric import load_rubric

    rubric = REPO / "notebooks" / "rubric.toml"
    student = folder / "subs" / "student1"
    student.mkdir(parents=True)
    labs = load_rubric(rubric).labs.values()
    for lab in labs:
        shutil.copyfile(lab.reference(REPO / "notebooks"), student / lab.notebook)
    return rubric, folder / "subs", len(labs)


def _graded(label: str, notebooks: int, **grade_args) -> tuple[dict, list[dict]]:
    from labkit.grading.grade import GradeOptions, grade

    t0 = time.perf_counter()
    outcome = grade(GradeOptions(**grade_args), log=lambda m: None)
    wall = time.perf_counter() - t0
    runs = [r for r in outcome.rows if r["check"] == "execution"]
    row = {
        "contender": label,
        "notebooks": notebooks,
        "ran ok": sum(r["status"] == "ok" for r in runs),
        "points": sum(r["points"] for r in outcome.rows),
        "wall s": round(wall, 1),
        "notebooks' own s": round(sum(float(r["seconds"] or 0) for r in runs), 1),
        "s/notebook": wall / notebooks,
        "notebooks/hour": 3600 * notebooks / wall,
    }
    return row, runs


def run(quick: bool = False) -> dict:
    from labkit.infra.minislurm import MiniSlurm, missing

    title = "Grading a class: Slurm against local -j 1 (labkit grade), and the projection for a class"
    reason = missing()
    if reason:
        return {"title": title, "rows": [], "ratios": [], "notes": [f"skipped: {reason}"]}
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-slurm-") as tmp:
        tmp = Path(tmp)
        rubric, subs, k = _submissions(tmp, quick)
        local, local_runs = _graded("local -j 1", k, rubric=rubric, submissions=subs, out=tmp / "out-local", parallel=1)
        cpus = os.cpu_count() or 1
        with MiniSlurm(tmp / "slurm", cpus=cpus, oversubscribe=1) as s:
            before = dict(os.environ)
            os.environ.update(s.env())
            try:
                on_slurm, slurm_runs = _graded(
                    "Slurm, 1 node",
                    k,
                    rubric=rubric,
                    submissions=subs,
                    out=tmp / "out-slurm",
                    slurm=s.partition,
                    slurm_args=[f"--cpus-per-task={cpus}"],
                )
            finally:
                os.environ.clear()
                os.environ.update(before)
        rows += [local, on_slurm]
        same = [(r["lab"], r["status"]) for r in local_runs] == [(r["lab"], r["status"]) for r in slurm_runs]
        ends = ", ".join(f"{r['lab']} {r['status']}" for r in slurm_runs)
        notes.append(
            f"the two runs' notebooks ended the same way: {'yes' if same else 'NO'} ({ends}); points "
            f"{local['points']:g} local, {on_slurm['points']:g} on Slurm"
        )
    n = on_slurm["wall s"] / k
    c = max(0.0, (local["wall s"] - local["notebooks' own s"]) / k)
    students, labs = CLASS
    total = students * labs
    ratios = [ratio("throughput, Slurm on 1 node / local -j 1", local["wall s"] / on_slurm["wall s"], "")]
    ratios.append(
        ratio(f"hours, {students} students x {labs} labs, local -j 1", total * local["wall s"] / k / 3600, "")
    )
    for nodes in NODES:
        hours = total * max(n / nodes, c) / 3600
        ratios.append(ratio(f"hours, {students} students x {labs} labs, Slurm on {nodes} node(s)", hours, ""))
    notes.append(
        f"per notebook: n = {n:.1f} s on a node (Slurm wall / notebooks), c = {c:.1f} s on the grading "
        f"machine (local wall minus the notebooks' own run time); hours(N) = {total} x max(n / N, c) / 3600"
    )
    what = (
        "four one-cell notebooks (--quick: the fixed cost per notebook only)"
        if quick
        else "one student: the five reference notebooks at the rubric parameters"
    )
    notes.append(f"{what}; the node is this machine ({os.cpu_count()} CPUs), which also runs the grader's checks")
    notes.append(
        "past N = n / c nodes the grading machine's own work (checks, verifiers, reports) sets the pace; "
        "counted as if it ran one notebook's checks at a time, a conservative floor: the checks of several "
        "notebooks run side by side on its cores"
    )
    return {"title": title, "rows": rows, "ratios": ratios, "notes": notes}


if __name__ == "__main__":
    entry(run)
