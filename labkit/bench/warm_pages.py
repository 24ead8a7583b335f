"""Feedback pages from the warm renderer against pages in fresh interpreters, side by side in one run.

The grader writes a page per notebook, each in a process of its own (``labkit.grading.pages.render``).
Both contenders write the same pages, one after another: every lab notebook in ``notebooks/``, as
stored, on a student's feedback page (``feedback.write_feedback``), ``COPIES`` times each.

- **cold**: ``LABKIT_COLD_PAGES=1``: each page a fresh ``python -m labkit.grading.pages.limited``,
  which imports nbconvert and compiles its templates before its first cell;
- **warm**: one server per command (``labkit.grading.pages.warm``), warmed up once, a fork per page.

Measured per page: the CPU seconds of the processes that rendered (this process's children from
``getrusage``, once reaped: the warm server's own start and warm-up included, spread over its pages)
and the wall time. The contenders alternate (cold, warm, cold, warm); each keeps its best round.
Goal: a warm page costs at most 0.6x a cold one's CPU.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

from labkit.bench import entry, ratio

REPO = Path(__file__).resolve().parents[2]
COPIES = 4  # pages per notebook and contender
ROUNDS = 2
GOAL = "<= 0.6"


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _tasks(folder: Path, notebooks: list[Path], copies: int) -> tuple[list, list]:
    """The pages to write, and a list that collects the ones that fell back (a failed render)."""
    from labkit.grading.pages import feedback, render

    failed: list[str] = []
    tasks = []
    for nb in notebooks:
        for i in range(copies):
            page = folder / f"{nb.stem}-{i}.html"
            tasks.append(
                render.Task(
                    feedback.write_feedback,
                    {"executed": str(nb), "rows": [], "path": str(page), "title": nb.stem},
                    page,
                    lambda why: f"<p>{why}</p>",
                    folder / "page.log",
                    fell_back=lambda page=page: failed.append(page.name),
                )
            )
    return tasks, failed


def _render(mode: str, folder: Path, notebooks: list[Path], copies: int) -> dict:
    """Write the pages one at a time in ``mode`` ("cold" or "warm"); CPU and wall seconds per page."""
    from labkit.grading.pages import render, warm

    folder.mkdir(parents=True)
    tasks, failed = _tasks(folder, notebooks, copies)
    before = os.environ.get(warm.DISABLE)
    os.environ[warm.DISABLE] = "1" if mode == "cold" else "0"
    try:
        cpu0, t0 = _children_cpu(), time.perf_counter()
        render.run(tasks, parallel=1)  # its session stops the warm server: its CPU is counted here
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    finally:
        if before is None:
            os.environ.pop(warm.DISABLE, None)
        else:
            os.environ[warm.DISABLE] = before
    if failed:
        raise RuntimeError(f"{mode}: {len(failed)} page(s) fell back, e.g. {failed[0]}; see {folder / 'page.log'}")
    if mode == "warm" and warm.failed():
        raise RuntimeError(f"warm: the page server did not start: {warm.failed()}")
    return {"cpu_s/page": cpu / len(tasks), "wall_s/page": wall / len(tasks), "pages": len(tasks)}


def run(quick: bool = False) -> dict:
    notebooks = sorted((REPO / "labkit" / "labs").glob("*/0*.ipynb"))
    copies = 1 if quick else COPIES
    rows, best = [], {}
    with tempfile.TemporaryDirectory(prefix="labkit-bench-pages-") as tmp:
        for i in range(ROUNDS):
            for mode in ("cold", "warm"):
                got = _render(mode, Path(tmp) / f"{mode}-{i}", notebooks, copies)
                rows.append({"contender": mode, "round": i + 1, **got})
                prev = best.get(mode)
                best[mode] = got if prev is None or got["cpu_s/page"] < prev["cpu_s/page"] else prev
    return {
        "title": "Feedback pages: forked from the warm renderer vs a fresh interpreter each",
        "rows": rows,
        "ratios": [
            ratio("warm / cold CPU per page", best["warm"]["cpu_s/page"] / best["cold"]["cpu_s/page"], GOAL),
            ratio("warm / cold wall time per page", best["warm"]["wall_s/page"] / best["cold"]["wall_s/page"], ""),
        ],
        "notes": [
            f"{len(notebooks)} lab notebooks as stored, {copies} page(s) each per round, one page at a time",
            "CPU: the rendering processes' own (this process's reaped children), the warm server's start and "
            "warm-up included; best of each contender's rounds",
        ],
    }


if __name__ == "__main__":
    entry(run)
