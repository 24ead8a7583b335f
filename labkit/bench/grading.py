"""Grading throughput: notebooks per minute through ``labkit grade``, at the rubric's grading parameters.

Contenders, timed in this one process run:
- the reference notebooks (every lab in ``notebooks/rubric.toml``), one at a time, as ``make grade``;
- a trivial notebook (import labkit, one record) graded 4 times with ``-j 1`` and with ``-j 2``:
  the grader's fixed cost per notebook (runner, kernel start, reports) and what parallel runs buy.

``make grade`` must stay within 10 minutes on 2 cores; the ratio of its time to that budget is the goal.
``--quick`` skips the reference notebooks.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from labkit.bench import entry, ratio

REPO = Path(__file__).resolve().parents[2]
TRIVIAL_RUBRIC = """
[labs.trivial]
notebook = "trivial.ipynb"
[[labs.trivial.checks]]
name = "recorded"
kind = "record"
points = 1
record = "x"
"""


def _timed_grade(**kwargs) -> tuple[float, object]:
    from labkit.grading.grade import grade

    t0 = time.perf_counter()
    outcome = grade(log=lambda m: None, **kwargs)
    return time.perf_counter() - t0, outcome


def _row(name: str, notebooks: int, seconds: float, parallel: int, outcome) -> dict:
    ok = sum(1 for r in outcome.rows if r["check"] == "execution" and r["status"] == "ok")
    return {"contender": name, "-j": parallel, "notebooks": notebooks, "ran ok": ok, "seconds": round(seconds, 1),
            "s/notebook": seconds / notebooks, "notebooks/min": 60 * notebooks / seconds}


def run(quick: bool = False) -> dict:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    rows, ratios, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-grading-") as tmp:
        tmp = Path(tmp)
        (tmp / "rubric.toml").write_text(TRIVIAL_RUBRIC)
        nb = new_notebook(cells=[new_code_cell("import labkit\nlabkit.record('x', 1)")])
        for i in range(4):
            (tmp / "subs" / f"s{i}").mkdir(parents=True)
            nbformat.write(nb, str(tmp / "subs" / f"s{i}" / "trivial.ipynb"))
        per = {}
        for j in (1, 2):
            secs, outcome = _timed_grade(rubric=tmp / "rubric.toml", submissions=tmp / "subs",
                                         out=tmp / f"out-j{j}", parallel=j)
            rows.append(_row("trivial notebook x4", 4, secs, j, outcome))
            per[j] = secs
        ratios.append(ratio("trivial x4: -j 2 speed-up over -j 1", per[1] / per[2], ""))
        if not quick:
            from labkit.grading.rubric import load_rubric

            labs = load_rubric(REPO / "notebooks" / "rubric.toml").labs
            secs, outcome = _timed_grade(rubric=REPO / "notebooks" / "rubric.toml", submissions=None,
                                         out=tmp / "out-ref", parallel=1, notebooks=REPO / "notebooks")
            rows.append(_row("reference notebooks (make grade)", len(labs), secs, 1, outcome))
            ratios.append(ratio("make grade time / 10-minute budget", secs / 600, "<= 1"))
            ratios.append(ratio("grader fixed cost / reference s per notebook",
                                (per[1] / 4) / (secs / len(labs)), ""))
            for r in outcome.rows:
                if r["check"] == "execution":
                    notes.append(f"{r['lab']}: {r['status']} in {r['seconds']} s {r['reason']}".rstrip())
    notes.append("fixed cost = runner start + kernel start + reports, measured with a one-cell notebook")
    return {"title": "Grading throughput (labkit grade)", "rows": rows, "ratios": ratios, "notes": notes}


if __name__ == "__main__":
    entry(run)
