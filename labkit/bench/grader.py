"""Grading throughput and what the sandbox costs, through ``labkit grade``, timed in one process run.

Contenders:
- a trivial notebook (import labkit, one record) graded 4 times with ``-j 1`` and ``-j 2``,
  sandboxed: the grader's fixed cost per notebook (runner, sandbox, cgroup, kernel start, reports)
  and what parallel runs buy;
- sandboxed vs unsandboxed (``--no-sandbox``), side by side and interleaved (ABAB), per notebook:
  the trivial notebook x4, where the fixed cost dominates, and Lab 1 at the rubric's parameters
  with its hidden check and verifier, a real notebook; the goal is at most 1.3x;
- the reference notebooks (every lab in ``notebooks/rubric.toml``) as ``make grade`` runs them,
  at its default ``-j`` (``grade.auto_parallel``: one per core here), and with ``-j 1``.

Goal: ``make grade`` on the reference notebooks within 120 s on 2 cores. ``--quick`` runs only the trivial notebook's contenders.
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
    from labkit.grading.grade import GradeOptions, grade

    t0 = time.perf_counter()
    outcome = grade(GradeOptions(**kwargs), log=lambda m: None)
    return time.perf_counter() - t0, outcome


def _row(name: str, notebooks: int, seconds: float, parallel: int, outcome, sandbox: str = "bwrap") -> dict:
    ok = sum(1 for r in outcome.rows if r["check"] == "execution" and r["status"] == "ok")
    return {
        "contender": name,
        "sandbox": sandbox,
        "-j": parallel,
        "notebooks": notebooks,
        "ran ok": ok,
        "seconds": round(seconds, 1),
        "s/notebook": seconds / notebooks,
        "notebooks/min": 60 * notebooks / seconds,
    }


def _side_by_side(name: str, notebooks: int, rounds: int, rows: list, **grade_args) -> float:
    """Sandboxed / unsandboxed seconds for the same grading, interleaved ``rounds`` times (the
    best of each, so a burst of load on the machine does not decide the ratio)."""
    best = {}
    for i in range(rounds):
        for sandbox in ("bwrap", "none"):
            out = grade_args["out"].with_name(f"{grade_args['out'].name}-{sandbox}-{i}")
            secs, outcome = _timed_grade(**{**grade_args, "out": out, "sandbox": sandbox})
            rows.append(_row(name, notebooks, secs, 1, outcome, sandbox))
            best[sandbox] = min(best.get(sandbox, secs), secs)
    return best["bwrap"] / best["none"]


def _reference(tmp: Path, n: int, rows: list, notes: list) -> dict:
    """The reference notebooks as ``make grade`` runs them (its default -j) and with -j 1:
    {"auto": that default, j: seconds}."""
    from labkit.grading.grade import auto_parallel
    from labkit.grading.judge.rubric import load_rubric

    auto = auto_parallel(list(load_rubric(REPO / "notebooks" / "rubric.toml").labs.values()))
    found = {"auto": auto}
    for j in dict.fromkeys((auto, 1)):
        secs, outcome = _timed_grade(
            rubric=REPO / "notebooks" / "rubric.toml",
            submissions=None,
            out=tmp / f"out-ref-j{j}",
            parallel=j,
            notebooks=REPO / "notebooks",
        )
        rows.append(_row(f"reference notebooks (make grade{'' if j == auto else ' -j 1'})", n, secs, j, outcome))
        found[j] = secs
        notes += [
            f"-j {j}, {r['lab']}: {r['status']} in {r['seconds']} s {r['reason']}".rstrip()
            for r in outcome.rows
            if r["check"] == "execution"
        ]
        notes += [
            f"-j {j}, {r['lab']}: {r['check']} {r['status']}: {r['reason']}"
            for r in outcome.rows
            if r["status"] not in ("pass", "pending", "ok")
        ]
    return found


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
            secs, outcome = _timed_grade(
                rubric=tmp / "rubric.toml", submissions=tmp / "subs", out=tmp / f"out-j{j}", parallel=j
            )
            rows.append(_row("trivial notebook x4", 4, secs, j, outcome))
            per[j] = secs
        ratios.append(ratio("trivial x4: -j 2 speed-up over -j 1", per[1] / per[2], ""))
        ratios.append(
            ratio(
                "sandboxed / unsandboxed, trivial notebook x4 (fixed cost)",
                _side_by_side(
                    "trivial notebook x4",
                    4,
                    2,
                    rows,
                    rubric=tmp / "rubric.toml",
                    submissions=tmp / "subs",
                    out=tmp / "out-trivial",
                ),
                "",
            )
        )
        if not quick:
            from labkit.grading.judge.rubric import load_rubric

            lab1 = tmp / "lab1" / "s"
            lab1.mkdir(parents=True)
            (lab1 / "01_single_node_lr.ipynb").write_bytes(
                (REPO / "labkit" / "labs" / "lab1" / "01_single_node_lr.ipynb").read_bytes()
            )
            ratios.append(
                ratio(
                    "sandboxed / unsandboxed, Lab 1 (reference, rubric parameters)",
                    _side_by_side(
                        "Lab 1",
                        1,
                        2,
                        rows,
                        rubric=REPO / "notebooks" / "rubric.toml",
                        submissions=lab1.parent,
                        labs=["lab1"],
                        out=tmp / "out-lab1",
                    ),
                    "<= 1.3",
                )
            )
            labs = load_rubric(REPO / "notebooks" / "rubric.toml").labs
            ref = _reference(tmp, len(labs), rows, notes)
            ratios.append(
                ratio(f"make grade (-j {ref['auto']}, its default here) / 120 s", ref[ref["auto"]] / 120, "<= 1")
            )
            ratios.append(ratio(f"make grade -j {ref['auto']} speed-up over -j 1", ref[1] / ref[ref["auto"]], ""))
            ratios.append(
                ratio("grader fixed cost / reference s per notebook (-j 1)", (per[1] / 4) / (ref[1] / len(labs)), "")
            )
    notes.append("fixed cost = runner start + sandbox + kernel start + reports, measured with a one-cell notebook")
    notes.append(
        "both sides of a sandboxed / unsandboxed ratio run the same hidden checks and verifiers, each in "
        "its own process, and the same cgroup limits; the ratio is bubblewrap's cost alone"
    )
    return {
        "title": "Grading throughput and the sandbox's cost (labkit grade)",
        "rows": rows,
        "ratios": ratios,
        "notes": notes,
    }


if __name__ == "__main__":
    entry(run)
