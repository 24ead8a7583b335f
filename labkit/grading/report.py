"""What grading writes: ``grades.csv`` (one row per student, lab and check), ``summary.md``
(totals and every failure with its reason), ``report.md``/``report.csv`` (the reference run:
records and checks) and an HTML feedback page per submission (the executed notebook with
its check results on top). Every writer replaces its file atomically, so a reader never
sees half a file, and ``grades.csv`` is rewritten after each notebook so it always exists.
"""
from __future__ import annotations

import csv
import html
import io
import json
import os
import re
from collections import defaultdict
from pathlib import Path

FIELDS = ["student", "lab", "check", "points", "max", "status", "reason", "seconds"]
EXECUTION = "execution"  # the check name of the row that says how the run ended
GOOD = {"pass", "ok"}
NEVER_RAN = {"unreadable", "refused", "not-submitted"}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_csv(rows: list[dict], path: Path, fields=FIELDS) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k)) for k in fields})
    _write(path, buf.getvalue())


def _cell(v):
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return "" if v is None else v


def _md(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _pts(points: float, most: float) -> str:
    return f"{points:g}/{most:g}"


def totals(rows: list[dict]) -> dict:
    """{(student, lab): [points, max]} over the check rows."""
    out = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        if r["check"] != EXECUTION:
            t = out[(r["student"], r["lab"])]
            t[0] += r["points"]
            t[1] += r["max"]
    return out


def write_summary(rows: list[dict], labs: list, path: Path, title: str = "Grades", warning: str = "") -> None:
    """Per-student and per-lab totals, then every row that is not a pass, with its reason.
    ``warning`` (a run without a sandbox, say) goes at the top."""
    tot = totals(rows)
    students = sorted({r["student"] for r in rows})
    keys = [lab.key for lab in labs]
    lines = [f"# {title}", ""] + ([f"**WARNING: every notebook {warning}.**", ""] if warning else []) + [
             f"{len(students)} student(s), {len(keys)} lab(s), "
             f"{sum(1 for r in rows if r['check'] == EXECUTION)} notebook(s).", "", "## Totals", "",
             "| student | " + " | ".join(keys) + " | total |", "|---|" + "---|" * (len(keys) + 1)]
    for s in students:
        cells = [_pts(*tot[(s, k)]) if (s, k) in tot else "-" for k in keys]
        p = sum(tot[(s, k)][0] for k in keys if (s, k) in tot)
        m = sum(tot[(s, k)][1] for k in keys if (s, k) in tot)
        lines.append(f"| {_md(s)} | " + " | ".join(cells) + f" | {_pts(p, m)} |")
    lines += ["", "## Labs", "", "| lab | notebook | graded | ran to the end | mean | min | max | out of |",
              "|---|---|---|---|---|---|---|---|"]
    for lab in labs:
        scores = [tot[(s, lab.key)][0] for s in students if (s, lab.key) in tot]
        ran = sum(1 for r in rows if r["lab"] == lab.key and r["check"] == EXECUTION and r["status"] == "ok")
        if scores:
            lines.append(f"| {lab.key} | {lab.notebook} | {len(scores)} | {ran} | {sum(scores) / len(scores):.2f} "
                         f"| {min(scores):g} | {max(scores):g} | {lab.max_points:g} |")
    # a notebook that never ran gets one line, not one per check
    absent = {(r["student"], r["lab"]) for r in rows if r["check"] == EXECUTION and r["status"] in NEVER_RAN}
    bad = [r for r in rows if r["status"] not in GOOD
           and (r["check"] == EXECUTION or (r["student"], r["lab"]) not in absent)]
    lines += ["", f"## Not passed ({len(bad)})", ""]
    if bad:
        lines += ["| student | lab | check | points | status | reason |", "|---|---|---|---|---|---|"]
        lines += [f"| {_md(r['student'])} | {r['lab']} | {_md(r['check'])} | {_pts(r['points'], r['max'])} "
                  f"| {r['status']} | {_md(r['reason'])} |" for r in bad]
    else:
        lines.append("Every check passed.")
    _write(path, "\n".join(lines) + "\n")


def write_reference_report(entries: list[dict], md_path: Path, csv_path: Path, warning: str = "") -> None:
    """The reference run, lab by lab: how it ran, its checks and its records.

    ``entries``: [{"lab": Lab, "rows": [row, ...], "records": {...}, "values": {check: value}}].
    """
    lines = ["# labkit: reference notebooks, graded", ""] + ([f"**WARNING: every notebook {warning}.**", ""]
                                                             if warning else [])
    csv_rows = []
    for e in entries:
        lab, rows = e["lab"], e["rows"]
        run = next(r for r in rows if r["check"] == EXECUTION)
        checks = [r for r in rows if r["check"] != EXECUTION]
        got = sum(r["points"] for r in checks)
        lines += [f"## {lab.key}: {lab.title}", "",
                  f"`{lab.notebook}`: {run['status']}" + (f" ({run['reason']})" if run["reason"] else "")
                  + f", {run['seconds']} s; {_pts(got, lab.max_points)} points.", "",
                  "| check | points | status | value | reason |", "|---|---|---|---|---|"]
        for r in checks:
            value = e["values"].get(r["check"])
            lines.append(f"| {_md(r['check'])} | {_pts(r['points'], r['max'])} | {r['status']} "
                         f"| {_md(_short(value))} | {_md(r['reason'])} |")
            csv_rows.append({"lab": lab.key, "kind": "check", "name": r["check"], "value": _short(value, 1000),
                             "points": r["points"], "max": r["max"], "status": r["status"], "reason": r["reason"]})
        lines += ["", "| record | value |", "|---|---|"]
        for name, value in e["records"].items():
            lines.append(f"| {_md(name)} | {_md(_short(value))} |")
            csv_rows.append({"lab": lab.key, "kind": "record", "name": name, "value": _short(value, 1000)})
        lines.append("")
    _write(md_path, "\n".join(lines))
    write_csv(csv_rows, csv_path, ["lab", "kind", "name", "value", "points", "max", "status", "reason"])


def _short(value, limit: int = 80) -> str:
    if value is None:
        return ""
    text = f"{value:.4g}" if isinstance(value, float) else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_STATUS_COLOR = {"pass": "#1a7f37", "ok": "#1a7f37", "partial": "#9a6700"}


def write_feedback(executed: Path | None, rows: list[dict], path: Path, title: str, warning: str = "") -> None:
    """An HTML page: the check results, then the executed notebook (sanitized) when there is one."""
    got = sum(r["points"] for r in rows if r["check"] != EXECUTION)
    most = sum(r["max"] for r in rows if r["check"] != EXECUTION)
    trs = "".join(
        f"<tr><td>{html.escape(r['check'])}</td><td>{_pts(r['points'], r['max']) if r['check'] != EXECUTION else ''}"
        f"</td><td style='color:{_STATUS_COLOR.get(r['status'], '#cf222e')};font-weight:bold'>{html.escape(r['status'])}"
        f"</td><td>{html.escape(str(r['reason']))}</td></tr>" for r in rows)
    header = (f"<section id='labkit-grade' style='font-family:sans-serif;margin:1em 2em;padding:1em;"
              f"border:2px solid #888;border-radius:6px'><h2>{html.escape(title)}: {_pts(got, most)} points</h2>"
              + (f"<p style='color:#cf222e;font-weight:bold'>WARNING: this notebook {html.escape(warning)}.</p>"
                 if warning else "") +
              f"<table style='border-collapse:collapse' border='1' cellpadding='4'><tr><th>check</th><th>points</th>"
              f"<th>status</th><th>reason</th></tr>{trs}</table></section>")
    body = None
    if executed is not None and executed.is_file():
        try:
            from nbconvert import HTMLExporter

            body, _ = HTMLExporter(template_name="lab", sanitize_html=True).from_filename(str(executed))
        except Exception as e:  # a page without the notebook beats no page; say why
            header += f"<p>The executed notebook could not be rendered: {html.escape(f'{type(e).__name__}: {e}')}</p>"
    if body is None:
        body = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
                f"<body><main></main></body></html>")
    m = re.search(r"<main[^>]*>", body) or re.search(r"<body[^>]*>", body)
    _write(path, body[: m.end()] + header + body[m.end():])
