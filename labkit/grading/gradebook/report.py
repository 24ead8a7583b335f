"""What grading writes: ``grades.csv`` (one row per student, lab and check), ``summary.md``
(totals, late work, who did not submit, the grades changed since the last export, and every
failure with its reason) and ``report.md``/``report.csv`` (the reference run: records and
checks). Feedback pages are ``feedback``'s, the gradebook exports ``exports``', the figures of
``summary.html`` ``stats``'.
Every writer replaces its file atomically, so a reader never sees half a file, and
``grades.csv`` is rewritten after each notebook so it always exists. ``write_csv`` is the one
CSV writer: every text cell goes through ``csvsafe.escape``, so no cell starts a spreadsheet formula.

Totals count ``pending`` rows (answers awaiting a TA) apart: "12/20 (+3 pending)".
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from pathlib import Path

from labkit.core import atomic, inert
from labkit.grading.gradebook.csvsafe import escape

FIELDS = ["student", "lab", "check", "points", "max", "status", "reason", "seconds"]
EXECUTION = "execution"  # the check name of the row that says how the run ended
GOOD = {"pass", "ok"}
PENDING = "pending"  # an answer awaiting a TA's score: not a failure, not points yet
LATE = "late"  # the row late work gets (``late``): shown apart, not a failure
MAX_REASON = 2000  # characters of a reason or a note in a CSV or summary.md (one answer made 3 MB)
MAX_CELL = 100_000  # characters of any CSV cell: under csv's field limit (131,072), so every CSV reads back
CAPPED = {"reason": MAX_REASON, "notes": MAX_REASON}
NOT_NOTEBOOK = "not-a-notebook"  # handed in, but not as a notebook (a .py, a .pdf): the row says what came
NEVER_RAN = {"unreadable", "refused", "not-submitted", NOT_NOTEBOOK}


def write_text(path: Path, text: str) -> None:
    atomic.write_text(path, text)


def write_csv(rows: list[dict], path: Path, fields=FIELDS) -> None:
    """Every CSV the grader writes: text cells escaped against formula injection (``csvsafe``)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _capped(escape(_cell(r.get(k))), CAPPED.get(k, MAX_CELL)) for k in fields})
    write_text(path, buf.getvalue())


def _capped(v, limit: int):
    """A text cell cut to ``limit`` characters, saying how much was cut."""
    if not isinstance(v, str) or len(v) <= limit:
        return v
    note = f" ... [cut: {len(v) - limit} more characters]"
    return v[: limit - len(note)] + note


def _cell(v):
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return "" if v is None else v


def _md(text) -> str:
    """A short text (a name, a login) safe inside a Markdown table cell: no HTML, no link and no
    image survive (``<``, ``>``, ``&`` as entities; brackets and backticks escaped), and no
    control character (``inert``)."""
    text = inert.visible(text, inert.LINE).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`\[\]|])", r"\\\1", " ".join(text.split()))


def _code(text, limit: int = MAX_REASON) -> str:
    """Free text a student controls (a reason, an exception's message, a file's name) as a
    Markdown code span, where no link, image or HTML renders; one line, at most ``limit``
    characters, its ``|`` escaped for the table (GFM reads ``\\|`` inside a span as ``|``), no
    control character in it (``inert``)."""
    text = " ".join(inert.visible(text, inert.LINE).split())
    if not text:
        return ""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text.replace('|', chr(92) + '|')} {fence}"


def pts(points: float, most: float, pending: float = 0.0) -> str:
    return f"{points:g}/{most:g}" + (f" (+{pending:g} pending)" if pending else "")


def totals(rows: list[dict]) -> dict:
    """{(student, lab): [points, max, pending]} over the check rows (pending: the points of the
    answers still awaiting a TA)."""
    out = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        if r["check"] != EXECUTION:
            t = out[(r["student"], r["lab"])]
            t[0] += r["points"]
            t[1] += r["max"]
            if r["status"] == PENDING:
                t[2] += r["max"]
    return out


def write_summary(
    rows: list[dict],
    labs: list,
    path: Path,
    title: str = "Grades",
    warning: str = "",
    missing: list[dict] | None = None,
    regrades: tuple[str, list] = ("", []),
    notes: list[str] = (),
    canvas: dict | None = None,
) -> None:
    """Per-student and per-lab totals, then every row that is not a pass, with its reason.
    ``warning`` (a run without a sandbox, say) goes at the top. ``missing``: who on the roster
    did not submit (None: no roster); ``regrades``: (when, changes) since the last export
    (``exports.changes``); ``notes``: what the intake did not grade; ``canvas``: {lab: why}
    while canvas.csv is not written (``exports.lab_columns``)."""
    tot = totals(rows)
    students = sorted({r["student"] for r in rows})
    keys = [lab.key for lab in labs]
    lines = (
        [f"# {title}", ""]
        + ([f"**WARNING: every notebook {warning}.**", ""] if warning else [])
        + [
            f"{len(students)} student(s), {len(keys)} lab(s), "
            f"{sum(1 for r in rows if r['check'] == EXECUTION)} notebook(s).",
            "",
            "## Totals",
            "",
            "| student | " + " | ".join(keys) + " | total |",
            "|---|" + "---|" * (len(keys) + 1),
        ]
    )
    for s in students:
        cells = [pts(*tot[(s, k)]) if (s, k) in tot else "-" for k in keys]
        p, m, w = (sum(tot[(s, k)][i] for k in keys if (s, k) in tot) for i in range(3))
        lines.append(f"| {_md(s)} | " + " | ".join(cells) + f" | {pts(p, m, w)} |")
    lines += [
        "",
        "## Labs",
        "",
        "| lab | notebook | graded | ran to the end | mean | min | max | out of |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lab in labs:
        scores = [tot[(s, lab.key)][0] for s in students if (s, lab.key) in tot]
        ran = sum(1 for r in rows if r["lab"] == lab.key and r["check"] == EXECUTION and r["status"] == "ok")
        if scores:
            lines.append(
                f"| {lab.key} | {lab.notebook} | {len(scores)} | {ran} | {sum(scores) / len(scores):.2f} "
                f"| {min(scores):g} | {max(scores):g} | {lab.max_points:g} |"
            )
    # a notebook that never ran gets one line, not one per check
    absent = {(r["student"], r["lab"]) for r in rows if r["check"] == EXECUTION and r["status"] in NEVER_RAN}
    bad = [
        r
        for r in rows
        if r["status"] not in GOOD | {PENDING, LATE}
        and (r["check"] == EXECUTION or (r["student"], r["lab"]) not in absent)
    ]
    waiting = [r for r in rows if r["status"] == PENDING]
    if waiting:
        lines += [
            "",
            f"## Awaiting a TA ({len(waiting)} answer(s), {sum(r['max'] for r in waiting):g} points)",
            "",
            "Export them with `make grade-answers`, score them in the CSVs, and merge those with "
            "`make grade-merge SCORES=...`; the totals above count them apart (`+N pending`).",
        ]
    lines += _late_work(rows) + _missing(missing) + _regrades(*regrades) + _no_canvas(canvas)
    if notes:
        lines += ["", f"## Files not graded ({len(notes)})", "", *[f"- {_code(n)}" for n in notes]]
    lines += ["", f"## Not passed ({len(bad)})", ""]
    if bad:
        lines += ["| student | lab | check | points | status | reason |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {_md(r['student'])} | {r['lab']} | {_md(r['check'])} | {pts(r['points'], r['max'])} "
            f"| {r['status']} | {_code(r['reason'])} |"
            for r in bad
        ]
    else:
        lines.append("Every check passed.")
    write_text(path, "\n".join(lines) + "\n")


def _late_work(rows: list[dict]) -> list[str]:
    late = [r for r in rows if r["check"] == LATE]
    if not late:
        return []
    return ["", f"## Late work ({len(late)})", "", "| student | lab | penalty | how late |", "|---|---|---|---|"] + [
        f"| {_md(r['student'])} | {r['lab']} | {r['points']:g} | {_code(r['reason'])} |" for r in late
    ]


def _missing(missing: list[dict] | None) -> list[str]:
    if missing is None:
        return []
    lines = ["", f"## Did not submit ({len(missing)} on the roster)", ""]
    if not missing:
        return lines + ["Everyone on the roster has a graded notebook of every lab here."]
    return (
        lines
        + ["| student | login | labs not submitted |", "|---|---|---|"]
        + [f"| {_md(m['name'])} | {_md(m['login'])} | {', '.join(m['labs'])} |" for m in missing]
    )


def _no_canvas(refused: dict | None) -> list[str]:
    if not refused:
        return []
    return ["", f"## canvas.csv not written ({len(refused)} lab(s) refused)", ""] + [
        f"- {lab}: {_md(why)}" for lab, why in refused.items()
    ]


def _regrades(when: str, changed: list[dict]) -> list[str]:
    if not when:
        return []
    lines = ["", f"## Changed since the export of {when} ({len(changed)})", ""]
    if not changed:
        return lines + ["No lab score has changed since; `canvas.csv` holds the same grades."]

    def shown(v):
        return "(not exported)" if v is None else "(blank)" if v == "" else v

    return (
        lines
        + [
            "Upload `canvas.csv` again (`make grade-export`) to send these:",
            "",
            "| student | lab | exported | now |",
            "|---|---|---|---|",
        ]
        + [f"| {_md(c['student'])} | {c['lab']} | {shown(c['exported'])} | {shown(c['now'])} |" for c in changed]
    )


def write_reference_report(entries: list[dict], md_path: Path, csv_path: Path, warning: str = "") -> None:
    """The reference run, lab by lab: how it ran, its checks and its records.

    ``entries``: [{"lab": Lab, "rows": [row, ...], "records": {...}, "values": {check: value}}].
    """
    lines = ["# labkit: reference notebooks, graded", ""] + (
        [f"**WARNING: every notebook {warning}.**", ""] if warning else []
    )
    csv_rows = []
    for e in entries:
        lab, rows = e["lab"], e["rows"]
        run = next(r for r in rows if r["check"] == EXECUTION)
        checks = [r for r in rows if r["check"] != EXECUTION]
        got = sum(r["points"] for r in checks)
        lines += [
            f"## {lab.key}: {lab.title}",
            "",
            f"`{lab.notebook}`: {run['status']}"
            + (f" ({run['reason']})" if run["reason"] else "")
            + f", {run['seconds']} s; {pts(got, lab.max_points)} points.",
            "",
            "| check | points | status | value | reason |",
            "|---|---|---|---|---|",
        ]
        for r in checks:
            value = e["values"].get(r["check"])
            lines.append(
                f"| {_md(r['check'])} | {pts(r['points'], r['max'])} | {r['status']} "
                f"| {_md(_short(value))} | {_md(r['reason'])} |"
            )
            csv_rows.append(
                {
                    "lab": lab.key,
                    "kind": "check",
                    "name": r["check"],
                    "value": _short(value, 1000),
                    "points": r["points"],
                    "max": r["max"],
                    "status": r["status"],
                    "reason": r["reason"],
                }
            )
        lines += ["", "| record | value |", "|---|---|"]
        for name, value in e["records"].items():
            lines.append(f"| {_md(name)} | {_md(_short(value))} |")
            csv_rows.append({"lab": lab.key, "kind": "record", "name": name, "value": _short(value, 1000)})
        lines.append("")
    write_text(md_path, "\n".join(lines))
    write_csv(csv_rows, csv_path, ["lab", "kind", "name", "value", "points", "max", "status", "reason"])


def _short(value, limit: int = 80) -> str:
    if value is None:
        return ""
    text = f"{value:.4g}" if isinstance(value, float) else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
