"""Per-check statistics of a batch: ``summary.html``, next to ``summary.md``.

For each lab: how its totals spread, and each check's pass rate (with partial credit apart),
the analysis answers' mean TA score, so an instructor spots a broken check (nobody passes it)
or a misunderstood question (a low mean). Counted over the notebooks that ran: a notebook
never submitted or refused is no evidence about a check. The figures are ``labkit.measure.plots``'
(PNG in data URIs); the page's body is ``templates/pages/stats.html.j2`` (autoescaped), under the
feedback pages' policy (``feedback.page``: no script, no request).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

from labkit.grading.gradebook.report import EXECUTION, LATE, NEVER_RAN, PENDING, totals, write_text

SCORED = {"pass", "partial", "fail"}


def lab_table(rows: list[dict], lab) -> tuple[list[dict], list[float]]:
    """(one dict per check: name, kind, n, pass, partial, other, pending, mean; the totals of
    the students whose notebook ran)."""
    ran = {
        r["student"] for r in rows if r["lab"] == lab.key and r["check"] == EXECUTION and r["status"] not in NEVER_RAN
    }
    by = {(r["student"], r["check"]): r for r in rows if r["lab"] == lab.key and r["student"] in ran}
    table = []
    for c in lab.checks:
        got = [by[(s, c.name)] for s in sorted(ran) if (s, c.name) in by]
        scored = [r for r in got if r["status"] in SCORED]
        n = len(got) or 1
        table.append(
            {
                "check": c.name,
                "kind": c.kind,
                "points": c.points,
                "n": len(got),
                "pass": sum(r["status"] == "pass" for r in got) / n,
                "partial": sum(r["status"] == "partial" for r in got) / n,
                "pending": sum(r["status"] == PENDING for r in got),
                "scored": len(scored),
                "mean": (sum(r["points"] for r in scored) / len(scored) / c.points if scored else None)
                if c.manual
                else None,
                "mean_points": sum(r["points"] for r in got) / n,
            }
        )
    tot = totals(rows)
    return table, [tot[(s, lab.key)][0] for s in sorted(ran) if (s, lab.key) in tot]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figures(table: list[dict], scores: list[float], lab) -> list[tuple[str, str]]:
    """[(alt text, data URI)] of the lab's two figures."""
    import pandas as pd

    from labkit.measure import plots

    frame = pd.DataFrame(
        [
            {
                "check": t["check"],
                "pass": t["pass"],
                "partial": t["partial"],
                "mean": t["mean"] if t["kind"] == "analysis" else None,
            }
            for t in table
        ]
    )
    frame["mean"] = frame["mean"].astype(float)
    return [
        (
            f"{lab.key}: distribution of totals",
            _png(plots.score_histogram(scores, lab.max_points, f"{lab.key}: totals")),
        ),
        (f"{lab.key}: pass rate per check", _png(plots.check_pass_rates(frame, f"{lab.key}: checks"))),
    ]


def lab_section(rows: list[dict], lab) -> dict:
    """What ``templates/pages/stats.html.j2`` shows of a lab; figures only when a notebook ran
    (a histogram of nothing is no evidence)."""
    table, scores = lab_table(rows, lab)
    return {
        "lab": lab,
        "scores": scores,
        "late": sum(1 for r in rows if r["lab"] == lab.key and r["check"] == LATE),
        "figures": _figures(table, scores, lab) if scores else [],
        "table": table,
    }


def write_html(
    rows: list[dict], labs: list, path: Path, title: str = "Grades", warning: str = "", kept: Path | None = None
) -> None:
    """``summary.html``: per lab, its figures and its per-check table (the template escapes every text).
    ``kept``: where to record what it was written for (``cache``); the page is not drawn again
    (matplotlib's import and figures: seconds) while its rows, labs, title and warning are the same."""
    import dataclasses

    from labkit.grading.pages import cache
    from labkit.grading.pages.feedback import page
    from labkit.grading.pages.render import template

    entry = None
    if kept is not None:
        made = cache.key("summary.html", rows, [dataclasses.asdict(lab) for lab in labs], title, warning)
        entry = cache.Entry(kept, path, "summary", made)
        if entry.current():
            return
    body = template("stats.html.j2", title=title, warning=warning, labs=[lab_section(rows, lab) for lab in labs])
    css = (
        "body{font-family:sans-serif;margin:1em 2em} img{max-width:48%;margin:0.5em 1% 0.5em 0;"
        "vertical-align:top} table{border-collapse:collapse;margin-bottom:2em} td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:left} .warn{color:#cf222e;font-weight:bold}"
    )
    write_text(path, page(f"{title}: statistics", body, css))
    if entry is not None:
        entry.keep(cache.RENDERED)
