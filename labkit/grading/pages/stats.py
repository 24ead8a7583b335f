"""Per-check statistics of a batch: ``summary.html``, next to ``summary.md``.

For each lab: how its totals spread, and each check's pass rate (with partial credit apart),
the analysis answers' mean TA score, so an instructor spots a broken check (nobody passes it)
or a misunderstood question (a low mean). Counted over the notebooks that ran: a notebook
never submitted or refused is no evidence about a check. The figures are ``labkit.measure.plots``'
(PNG in data URIs); the page is built from escaped text only, under the feedback pages'
policy (``feedback.page``: no script, no request).
"""

from __future__ import annotations

import base64
import html
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


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _pct(x) -> str:
    return "" if x is None else f"{x:.0%}"


def _answer(t: dict) -> str:
    return f"{_pct(t['mean']) or '-'} ({t['scored']} scored)" if t["kind"] == "analysis" else ""


def lab_section(rows: list[dict], lab) -> str:
    table, scores = lab_table(rows, lab)
    head = (
        f"<h2>{_e(lab.key)}: {_e(lab.title)}</h2><p>{len(scores)} notebook(s) ran"
        + (
            f"; totals mean {sum(scores) / len(scores):.2f}, min {min(scores):g}, max {max(scores):g} of "
            f"{lab.max_points:g}"
            if scores
            else ""
        )
        + ".</p>"
    )
    if not scores:
        return head
    late = sum(1 for r in rows if r["lab"] == lab.key and r["check"] == LATE)
    figs = "".join(f"<img alt='{_e(alt)}' src='{uri}'>" for alt, uri in _figures(table, scores, lab))
    trs = "".join(
        f"<tr><td>{_e(t['check'])}</td><td>{_e(t['kind'])}</td><td>{t['points']:g}</td><td>{t['n']}</td>"
        f"<td>{_pct(t['pass'])}</td><td>{_pct(t['partial'])}</td><td>{t['mean_points']:.2f}</td>"
        f"<td>{_answer(t)}</td>"
        f"<td>{t['pending'] or ''}</td></tr>"
        for t in table
    )
    return (
        head
        + (f"<p>{late} late submission(s) (summary.md lists them).</p>" if late else "")
        + figs
        + "<table><tr><th>check</th><th>kind</th><th>points</th><th>ran</th><th>passed</th><th>partial</th>"
        "<th>mean points</th><th>answers: mean TA score</th><th>awaiting a TA</th></tr>" + trs + "</table>"
    )


def write_html(rows: list[dict], labs: list, path: Path, title: str = "Grades", warning: str = "") -> None:
    """``summary.html``: per lab, its figures and its per-check table."""
    from labkit.grading.pages.feedback import page

    body = (
        f"<h1>{_e(title)}: per-check statistics</h1>"
        + (f"<p class='warn'>WARNING: every notebook {_e(warning)}.</p>" if warning else "")
        + "<p>Pass rates count the notebooks that ran. A check few pass may be broken, or its concept "
        "misunderstood; read its failures in summary.md.</p>" + "".join(lab_section(rows, lab) for lab in labs)
    )
    css = (
        "body{font-family:sans-serif;margin:1em 2em} img{max-width:48%;margin:0.5em 1% 0.5em 0;"
        "vertical-align:top} table{border-collapse:collapse;margin-bottom:2em} td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:left} .warn{color:#cf222e;font-weight:bold}"
    )
    write_text(path, page(f"{title}: statistics", body, css))
