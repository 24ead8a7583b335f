"""Feedback pages that render offline: the check table and what to do next, then the executed notebook.

nbconvert's ``lab`` template gives the look; labkit's template (``templates/feedback``) writes
the body only, and ``sanitize.Page`` puts it under the grader's own head after cleaning all of
it against the allow-list: the last step, after every conversion. Before that:

- Markdown goes through nbconvert's own Markdown parser (mistune, with its math syntax), and
  every formula becomes MathML (``latex2mathml``), which Chromium, Firefox and Safari draw
  natively: no script, no network;
- HTML (Markdown cells' own and outputs') is cleaned on its own as well, so one output's
  unclosed tags cannot swallow the cells after it;
- figures stay inline (data URIs); SVG as ``<img src="data:image/svg+xml;base64,...">``;
- an output, or a cell's text, longer than the rubric's ``page_output_kb`` is cut, with a note
  that says so; TensorFlow's start-up lines on stderr (absl's log lines, oneDNN's notice) are
  folded into a note rather than shown as an error;
- cells carry the number JupyterLab shows ("Cell 5/42"), the one every reason uses.

A page shows only what the student's own run produced and the grader's verdicts: no answer
key, no reference solution, nothing of a hidden check but its verdict, nothing of a classmate.
Pages render in a process of their own, limited in time and memory (``render``):
``write_feedback`` runs there; ``plain_page`` is what the grader writes instead when it fails.
"""
from __future__ import annotations

import copy
import html
import re
from pathlib import Path

from markupsafe import Markup

from labkit.grading.sanitize import Page, clean
from labkit.record import cell_name, cell_tags

TEMPLATES = Path(__file__).with_name("templates")
OUTPUT_KB = 1024         # the rubric's page_output_kb when a caller gives none
MAX_NOTEBOOK_BYTES = 64 * 2**20   # an executed notebook past this is not rendered at all (grade reads no more)
CSS = ("math[display=block]{display:block;margin:0.6em 0;font-size:110%} code.tex-error{color:#9a6700} "
       "a.anchor-link,.jp-Collapser{display:none} .jp-InputArea{overflow:hidden} "
       ".jp-InputPrompt{font-size:85%;color:#666} "
       "#@grade{font-family:sans-serif;margin:1em 2em;padding:1em;border:2px solid #888;border-radius:6px} "
       "#@grade table{border-collapse:collapse} #@grade td,#@grade th{border:1px solid #888;padding:4px;"
       "text-align:left;vertical-align:top} #@grade .labkit-desc{color:#444;font-size:90%} "
       "#@grade .labkit-warn{color:#cf222e;font-weight:bold} .labkit-note{color:#555;font-size:90%;margin:0.3em 0} "
       ".labkit-cut{color:#9a6700;font-weight:bold;font-family:sans-serif;margin:0.3em 0} "
       ".labkit-next li{margin:0.3em 0}")
STATUS_COLOR = {"pass": "#1a7f37", "ok": "#1a7f37", "partial": "#9a6700", "pending": "#0969da"}
GATED = re.compile(r"no points while the lab's evidence does not hold \((.*)\); on its own this check was (\S+)$")
# TensorFlow's start-up lines on stderr: absl's log format (I/W severity), and its notices
TF_NOISE = re.compile(
    r"[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] .*"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
    r"|E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] Unable to register cu(DNN|FFT|BLAS) factory.*"
    r"|[EW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] failed call to cuInit.*")


# ---------------------------------------------------------------------------------------------
# Markdown and math

def math_html(tex: str, display: bool) -> str:
    """MathML for a TeX formula; its source in a <code> when latex2mathml cannot read it."""
    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # latex2mathml raises many types on TeX it does not know: show the source
        return f"<code class='tex-error'>{html.escape(tex.strip())}</code>"


def markdown_html(source: str, attachments: dict | None = None) -> Markup:
    """A Markdown text as HTML with its math as MathML, cleaned on its own (``Page.html`` cleans
    the page it goes into again, last)."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    class Renderer(IPythonRenderer):
        def block_math(self, body):
            return math_html(body, True)

        def inline_math(self, body):
            return math_html(body, False)

        def latex_environment(self, name, body):
            return math_html(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)

        def multiline_math(self, text):
            return math_html(text.strip("$"), True)

    renderer = Renderer(escape=False, attachments=attachments or {}, exclude_anchor_links=True)
    return Markup(clean(MarkdownWithMath(renderer=renderer).render(str(source))))


def latex_html(source: str) -> Markup:
    """A text/latex output: ``$...$`` or ``$$...$$`` formulas, as MathML."""
    text = str(source).strip()
    m = re.fullmatch(r"\$\$(.*)\$\$|\$(.*)\$", text, re.S)
    if m:
        return Markup(clean(math_html(m.group(1) if m.group(1) is not None else m.group(2), m.group(1) is not None)))
    return markdown_html(text)


def page(title: str, body: str, css: str = "") -> str:
    """A standalone page under the grader's policy, its body cleaned last (``sanitize.Page``)."""
    return Page(title).html(body, CSS + " " + css)


# ---------------------------------------------------------------------------------------------
# The check table, and what to do next

def _pts(points: float, most: float) -> str:
    return f"{points:g}/{most:g}"


def _fold(rows: list[dict]) -> list[dict]:
    """The rows, with the checks that earned nothing only because of the lab's evidence gate
    folded into one row that names the gate."""
    out, folded = [], {}
    for r in rows:
        m = GATED.match(str(r["reason"])) if r["status"] == "unverified" else None
        if m is None:
            out.append(r)
            continue
        group = folded.get(m.group(1))
        if group is None:
            group = folded[m.group(1)] = {**r, "check": [], "max": 0.0, "was": [], "gate": m.group(1)}
            out.append(group)
        group["check"].append(r["check"])
        group["max"] += r["max"]
        group["was"].append(f"{r['check']}: {m.group(2)}")
    for g in folded.values():
        names = g["check"]
        g["check"] = names[0] if len(names) == 1 else f"{len(names)} checks: {', '.join(names)}"
        g["reason"] = (f"no points until the lab's evidence holds ({g['gate']}); on their own: "
                       f"{'; '.join(g['was'])}")
    return out


def _row(r: dict, descriptions: dict, page: Page, cells: set) -> str:
    from labkit.grading.report import EXECUTION

    desc = descriptions.get(r["check"], "") if isinstance(r["check"], str) else ""
    reason = html.escape(str(r["reason"]))
    if r["check"] == EXECUTION:  # the grader's "cell 5" (said first, before any message) links to the cell
        reason = re.sub(r"\bcell (\d+)\b", lambda m: f"<a href='#{page.id('cell-' + m.group(1))}'>{m.group(0)}</a>"
                        if int(m.group(1)) in cells else m.group(0), reason, count=1)
    return (f"<tr><td>{html.escape(str(r['check']))}"
            + (f"<div class='labkit-desc'>{html.escape(desc)}</div>" if desc else "")
            + f"</td><td>{_pts(r['points'], r['max']) if r['check'] != EXECUTION else ''}</td>"
            f"<td style='color:{STATUS_COLOR.get(r['status'], '#cf222e')};font-weight:bold'>"
            f"{html.escape(r['status'])}</td><td>{reason}</td></tr>")


def next_steps(rows: list[dict]) -> list[str]:
    """What the student does next, most urgent first (plain text; ``make check`` is the student
    kit's own check)."""
    from labkit.grading.report import EXECUTION, GOOD, NEVER_RAN, PENDING

    run = next((r for r in rows if r["check"] == EXECUTION), None)
    checks = [r for r in rows if r["check"] != EXECUTION]
    steps = []
    if run is not None and run["status"] in NEVER_RAN:
        steps.append(f"The grader could not run your notebook ({run['reason']}). Submit the lab's notebook file "
                     f"under the name the lab gives, saved from JupyterLab.")
    elif run is not None and run["status"] != "ok":
        steps.append(f"Your run did not finish: {run['reason']}. Fix that first: every check after it had "
                     f"nothing to read.")
    gated = {m.group(1) for r in checks if r["status"] == "unverified" and (m := GATED.match(str(r["reason"])))}
    if gated:
        steps.append(f"The grader could not confirm your results ({'; '.join(sorted(gated))}); until it can, the "
                     f"checks that read your records earn nothing. Make those checks pass first.")
    failed = [r["check"] for r in checks if r["status"] not in GOOD | {PENDING}
              and not (r["status"] == "unverified" and GATED.match(str(r["reason"])))]
    if failed:
        steps.append(f"Checks that did not pass: {', '.join(failed)}. Each reason above says what the grader "
                     f"looked for.")
    if steps:
        steps.append("Then restart the kernel and run all cells in JupyterLab (Kernel > Restart Kernel and Run "
                     "All Cells), save, run `make check` in your kit, and submit the notebook again.")
    else:
        steps.append("Every check the grader scores passed: nothing to do.")
    pending = [r for r in checks if r["status"] == PENDING]
    if pending:
        steps.append(f"{len(pending)} written answer(s) await a TA's score: nothing to do for them.")
    return steps


def header(rows: list[dict], title: str, page: Page, warning: str = "", descriptions: dict | None = None,
           cells: set = frozenset()) -> str:
    """The section that opens a feedback page: points, the checks (with what each checks), and
    what to do next. ``cells``: the cell numbers the page shows (a reason's "cell 5" links there)."""
    from labkit.grading.report import EXECUTION, PENDING

    checks = [r for r in rows if r["check"] != EXECUTION]
    got, most = sum(r["points"] for r in checks), sum(r["max"] for r in checks)
    pending = [r for r in checks if r["status"] == PENDING]
    worth = sum(r["max"] for r in pending)
    waiting = (f" ({len(pending)} answer{'s' if len(pending) != 1 else ''} worth {worth:g} "
               f"point{'s' if worth != 1 else ''} awaiting a TA)" if pending else "")
    trs = "".join(_row(r, descriptions or {}, page, cells) for r in _fold(rows))
    todo = "".join(f"<li>{html.escape(s)}</li>" for s in next_steps(rows))
    return (f"<section id='{page.id('grade')}'><h2>{html.escape(title)}: {_pts(got, most)} points{waiting}</h2>"
            + (f"<p class='labkit-warn'>WARNING: this notebook {html.escape(warning)}.</p>" if warning else "")
            + f"<table><tr><th>check</th><th>points</th><th>status</th><th>reason</th></tr>{trs}</table>"
            f"<h3>What to do next</h3><ol class='labkit-next'>{todo}</ol></section>")


# ---------------------------------------------------------------------------------------------
# The notebook: numbered, cut to size, without what needs a script

def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, ended at a line break where there is one near."""
    head = text[:limit]
    nl = head.rfind("\n")
    return head[:nl + 1] if nl > limit // 2 else head


def _note(summary: str, text: str = "") -> dict:
    """An output the page shows as the grader's note (``labkit_note``)."""
    return {"output_type": "display_data", "data": {}, "metadata": {"labkit_note": {"summary": summary,
                                                                                     "text": text}}}


def _size(value) -> int:
    return len(value) if isinstance(value, str) else len(str(value))


def _kb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def _fit_output(out: dict, limit: int) -> list[dict]:
    """``out`` as the page shows it: cut to ``limit`` characters per MIME type, with a note when cut."""
    kind = out.get("output_type")
    if kind == "stream":
        text = out.get("text", "")
        text = text if isinstance(text, str) else "".join(text)
        notes = []
        if out.get("name") == "stderr":
            lines = text.splitlines(keepends=True)
            noise = [ln for ln in lines if TF_NOISE.fullmatch(ln.rstrip("\n"))]
            if noise:
                text = "".join(ln for ln in lines if not TF_NOISE.fullmatch(ln.rstrip("\n")))
                notes.append(_note(f"TensorFlow's start-up messages ({len(noise)} line(s) on stderr; not errors, "
                                   f"also in the run's log)", _cut("".join(noise), limit)))
        if len(text) > limit:
            notes.append(_note(f"This output is {_kb(len(text))}; the page shows its first {_kb(limit)} (the "
                               f"rubric's page_output_kb)."))
            text = _cut(text, limit)
        return ([{**out, "text": text}] if text.strip() else []) + notes
    if kind == "error":
        tb = list(out.get("traceback") or [])
        if sum(map(len, tb)) > limit:
            kept, total = [], 0
            for line in tb:
                total += len(line)
                if total > limit:
                    break
                kept.append(line)
            return [{**out, "traceback": kept}, _note(f"This traceback is longer than {_kb(limit)}; the page shows "
                                                      f"its start (the rubric's page_output_kb).")]
        return [out]
    data = out.get("data")
    if not isinstance(data, dict):
        return [out]
    big = {m: _size(v) for m, v in data.items() if _size(v) > limit}
    if not big:
        return [out]
    data = dict(data)
    for mime in big:
        if mime in ("text/plain", "text/html", "text/markdown"):
            data[mime] = _cut(data[mime] if isinstance(data[mime], str) else "".join(data[mime]), limit)
        else:  # an image or a formula cut in half means nothing: left out
            data.pop(mime)
    if not data:
        data["text/plain"] = ""
    what = ", ".join(f"{m} {_kb(n)}" for m, n in big.items())
    return [{**out, "data": data}, _note(f"This output is over the {_kb(limit)} a page shows of one output (the "
                                         f"rubric's page_output_kb): {what}; cut, or left out where a part would "
                                         f"mean nothing (images, formulas).")]


def cell_numbers(nb, source_ids: list | None) -> list:
    """Per cell of the executed ``nb``: its number in the submitted notebook (from 1), or None
    for a cell the grader's run added (papermill's parameters and error cells). By cell id when
    the submission has them, else by position."""
    added = ("injected-parameters", "papermill-error-cell-tag")
    if source_ids and all(source_ids):
        where = {cid: i + 1 for i, cid in enumerate(source_ids)}
        return [where.get(c.get("id")) for c in nb.cells]
    out, n = [], 0
    for c in nb.cells:
        if any(t in cell_tags(c) for t in added):
            out.append(None)
        else:
            n += 1
            out.append(n)
    return out


def displayable(nb, limit: int, numbers: list):
    """A copy of ``nb`` as the page shows it: papermill's error banners and what needs a script
    (widgets, JavaScript) left out, every output and cell text cut to ``limit`` characters
    (with a note), each cell with its number (``metadata.labkit``)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    drop = ("application/javascript", "application/vnd.jupyter.widget-view+json",
            "application/vnd.jupyter.widget-state+json", "text/vnd.mermaid")
    cells = []
    for cell, number in zip(nb.cells, numbers):
        if "papermill-error-cell-tag" in cell_tags(cell):
            continue
        meta = cell.setdefault("metadata", {})
        meta["labkit"] = {"number": number, "injected": "injected-parameters" in cell_tags(cell), "cut": ""}
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        if len(source) > limit:
            cell["source"] = _cut(source, limit)
            meta["labkit"]["cut"] = (f"This cell's text is {_kb(len(source))}; the page shows its first "
                                     f"{_kb(limit)} (the rubric's page_output_kb).")
        outputs = []
        for out in cell.get("outputs") or []:
            (out.get("metadata") or {}).pop("labkit_note", None)   # a note is the grader's to write
            data = out.get("data")
            if isinstance(data, dict):
                for mime in drop:
                    data.pop(mime, None)
                if not data and out.get("output_type") in ("display_data", "execute_result"):
                    data["text/plain"] = ""
            outputs += _fit_output(out, limit)
        if cell.get("cell_type") == "code":
            cell["outputs"] = outputs
        cells.append(cell)
    nb.cells = cells
    return nb


def _prompt(cell) -> str:
    meta = (cell.get("metadata") or {}).get("labkit") or {}
    if meta.get("injected"):
        return "the grader's parameters"
    return html.escape(cell_name(meta["number"] - 1).capitalize()) if meta.get("number") else ""


def _note_html(out) -> Markup:
    note = out["metadata"]["labkit_note"]
    if note.get("text"):
        return Markup(f"<details class='labkit-note'><summary>{html.escape(note['summary'])}</summary>"
                      f"<pre>{html.escape(note['text'])}</pre></details>")
    return Markup(f"<p class='labkit-cut'>{html.escape(note['summary'])}</p>")


def notebook_body(nb, title: str, top: str, page: Page) -> tuple[str, str]:
    """(the <main> of the page, the CSS it needs) for the displayable notebook ``nb``, ``top`` first."""
    from nbconvert import HTMLExporter

    def anchor(cell) -> Markup:
        number = ((cell.get("metadata") or {}).get("labkit") or {}).get("number")
        return Markup(f"id='{page.id(f'cell-{number}')}'") if number else Markup("")

    def cut(cell) -> Markup:
        text = ((cell.get("metadata") or {}).get("labkit") or {}).get("cut")
        return Markup(f"<p class='labkit-cut'>{html.escape(text)}</p>") if text else Markup("")

    exporter = HTMLExporter(template_name="feedback", extra_template_basedirs=[str(TEMPLATES)],
                            filters={"labkit_markdown": markdown_html, "labkit_clean": lambda s: Markup(clean(s)),
                                     "labkit_latex": latex_html, "labkit_prompt": _prompt, "labkit_anchor": anchor,
                                     "labkit_note": _note_html, "labkit_cut": cut})
    body, resources = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}, "labkit_header": top})
    env = exporter.environment
    css = "\n".join(env.loader.get_source(env, f"static/{name}")[0] for name in ("index.css", "theme-light.css"))
    css += "\n" + "\n".join((resources.get("inlining") or {}).get("css") or [])   # pygments' colours
    return body, css


def plain_page(rows: list[dict], title: str, why: str, warning: str = "", descriptions: dict | None = None) -> str:
    """The page without the notebook: the check table, and ``why`` the notebook is not shown."""
    p = Page(title)
    body = header(rows, title, p, warning, descriptions) + (f"<p class='labkit-cut'>{html.escape(why)}</p>"
                                                           if why else "")
    return p.html(f"<main>{body}</main>", CSS)


def write_feedback(executed: str | None, rows: list[dict], path: str, title: str, warning: str = "",
                   descriptions: dict | None = None, source: str | None = None, output_kb: float = OUTPUT_KB) -> None:
    """The student's page: the check results, then the executed notebook when there is one.
    ``source``: the notebook as submitted (its cells' numbers); ``output_kb``: the rubric's
    ``page_output_kb``."""
    import nbformat

    from labkit.grading.report import write_text

    path = Path(path)
    if executed is None or not Path(executed).is_file():
        write_text(path, plain_page(rows, title, "", warning, descriptions))
        return
    size = Path(executed).stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        write_text(path, plain_page(rows, title, f"The executed notebook is {_kb(size)}, over the "
                                                 f"{_kb(MAX_NOTEBOOK_BYTES)} a page is made from: print less.",
                                    warning, descriptions))
        return
    nb = nbformat.read(str(executed), as_version=4)
    ids = None
    if source and Path(source).is_file():
        ids = [c.get("id") for c in nbformat.read(str(source), as_version=4).cells]
    numbers = cell_numbers(nb, ids)
    p = Page(title)
    top = header(rows, title, p, warning, descriptions, {n for n in numbers if n})
    body, css = notebook_body(displayable(nb, int(output_kb * 1024), numbers), title, top, p)
    write_text(path, p.html(body, css + "\n" + CSS, body_class="jp-Notebook"))
