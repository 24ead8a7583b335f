"""Feedback pages that render offline: the check table and what to do next, then the executed notebook.

nbconvert's ``lab`` template gives the look; labkit's template (``templates/feedback``) writes
the body only, and ``sanitize.Page`` cleans all of it as the last step. Before that, formulas
become MathML (drawn natively: no script, no network), each HTML output is cleaned on its own,
figures stay inline, and ``notebook_view`` numbers the cells as JupyterLab does and cuts long
outputs.

A page shows only what the student's own run produced and the grader's verdicts: no answer
key, no reference solution, nothing of a hidden check but its verdict, nothing of a classmate.
Pages render in a process of their own, limited in time and memory (``render``):
``write_feedback`` runs there; ``plain_page`` is what the grader writes instead when it fails.
More in docs/internals.md, section labkit.grading.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from markupsafe import Markup

from labkit.grading.pages.notebook_view import cell_numbers, displayable, kb
from labkit.grading.pages import cache, render
from labkit.grading.pages.render import template
from labkit.grading.pages.sanitize import Page, clean
from labkit.notebook.record import cell_name

TEMPLATES = Path(__file__).parents[1] / "templates"
OUTPUT_KB = 1024  # the rubric's page_output_kb when a caller gives none
# A cell's code longer than this is shown as plain text: Pygments takes about 9 s for 270 KB of one
# line, and writes 17 times the text in spans (a page of six such cells ran past its time limit)
HIGHLIGHT_CHARS = 20_000
MAX_NOTEBOOK_BYTES = 64 * 2**20  # an executed notebook past this is not rendered at all (grade reads no more)
CSS = (
    "math[display=block]{display:block;margin:0.6em 0;font-size:110%} code.tex-error{color:#9a6700} "
    "a.anchor-link,.jp-Collapser{display:none} .jp-InputArea{overflow:hidden} "
    ".jp-InputPrompt{font-size:85%;color:#666} "
    "#@grade{font-family:sans-serif;margin:1em 2em;padding:1em;border:2px solid #888;border-radius:6px} "
    "#@grade table{border-collapse:collapse} #@grade td,#@grade th{border:1px solid #888;padding:4px;"
    "text-align:left;vertical-align:top} #@grade .labkit-desc{color:#444;font-size:90%} "
    "#@grade .labkit-warn{color:#cf222e;font-weight:bold} .labkit-note{color:#555;font-size:90%;margin:0.3em 0} "
    ".labkit-cut{color:#9a6700;font-weight:bold;font-family:sans-serif;margin:0.3em 0} "
    ".labkit-next li{margin:0.3em 0}"
)
STATUS_COLOR = {"pass": "#1a7f37", "ok": "#1a7f37", "partial": "#9a6700", "pending": "#0969da"}
GATED = re.compile(r"no points while the lab's evidence does not hold \((.*)\); on its own this check was (\S+)$")


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
    try:
        return Markup(clean(MarkdownWithMath(renderer=renderer).render(str(source))))
    except Exception as e:  # a missing attachment, a parser's bug: this text as written, not the page's end
        return Markup(
            f"<p class='labkit-cut'>This text could not be rendered ({html.escape(type(e).__name__)}: "
            f"{html.escape(str(e)[:200])}); shown as written:</p><pre>{html.escape(str(source))}</pre>"
        )


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
        g["reason"] = f"no points until the lab's evidence holds ({g['gate']}); on their own: {'; '.join(g['was'])}"
    return out


def _row(r: dict, descriptions: dict, page: Page, cells: set) -> dict:
    """A row of ``grade.html.j2``: the check's description, and the grader's "cell 5" in the run's
    reason (said first, before any message) split out to link to that cell when the page shows it."""
    from labkit.grading.gradebook.report import EXECUTION

    run, reason = r["check"] == EXECUTION, str(r["reason"])
    m = re.search(r"\bcell (\d+)\b", reason) if run else None
    linked = m is not None and int(m.group(1)) in cells
    return {
        **{k: r[k] for k in ("check", "points", "max", "status")},
        "run": run,
        "desc": descriptions.get(r["check"], "") if isinstance(r["check"], str) else "",
        "color": STATUS_COLOR.get(r["status"], "#cf222e"),
        "before": reason[: m.start()] if linked else reason,
        "cell": m.group(0) if linked else "",
        "anchor": page.id(f"cell-{m.group(1)}") if linked else "",
        "after": reason[m.end() :] if linked else "",
    }


def next_steps(rows: list[dict]) -> list[str]:
    """What the student does next, most urgent first (plain text; ``make check`` is the student
    kit's own check)."""
    from labkit.grading.gradebook.report import EXECUTION, GOOD, LATE, NEVER_RAN, PENDING

    run = next((r for r in rows if r["check"] == EXECUTION), None)
    checks = [r for r in rows if r["check"] != EXECUTION]
    steps = []
    if run is not None and run["status"] in NEVER_RAN:
        steps.append(
            f"The grader could not run your notebook ({run['reason']}). Submit the lab's notebook file "
            f"under the name the lab gives, saved from JupyterLab."
        )
    elif run is not None and run["status"] != "ok":
        steps.append(
            f"Your run did not finish: {run['reason']}. Fix that first: every check after it had nothing to read."
        )
    gated = {m.group(1) for r in checks if r["status"] == "unverified" and (m := GATED.match(str(r["reason"])))}
    if gated:
        steps.append(
            f"The grader could not confirm your results ({'; '.join(sorted(gated))}); until it can, the "
            f"checks that read your records earn nothing. Make those checks pass first."
        )
    failed = [
        r["check"]
        for r in checks
        if r["status"] not in GOOD | {PENDING, LATE}
        and not (r["status"] == "unverified" and GATED.match(str(r["reason"])))
    ]
    if failed:
        steps.append(
            f"Checks that did not pass: {', '.join(failed)}. Each reason above says what the grader looked for."
        )
    if steps:
        steps.append(
            "Then restart the kernel and run all cells in JupyterLab (Kernel > Restart Kernel and Run "
            "All Cells), save, run `make check` in your kit, and submit the notebook again."
        )
    else:
        steps.append("Every check the grader scores passed: nothing to do.")
    pending = [r for r in checks if r["status"] == PENDING]
    if pending:
        steps.append(f"{len(pending)} written answer(s) await a TA's score: nothing to do for them.")
    return steps


def header(
    rows: list[dict],
    title: str,
    page: Page,
    warning: str = "",
    descriptions: dict | None = None,
    cells: set = frozenset(),
) -> str:
    """The section that opens a feedback page (``templates/pages/grade.html.j2``, autoescaped): points,
    the checks (with what each checks), and what to do next. ``cells``: the cell numbers the page
    shows (a reason's "cell 5" links there)."""
    from labkit.grading.gradebook.report import EXECUTION, PENDING

    checks = [r for r in rows if r["check"] != EXECUTION]
    pending = [r for r in checks if r["status"] == PENDING]
    return template(
        "grade.html.j2",
        id=page.id("grade"),
        title=title,
        got=sum(r["points"] for r in checks),
        most=sum(r["max"] for r in checks),
        pending=len(pending),
        worth=sum(r["max"] for r in pending),
        warning=warning,
        rows=[_row(r, descriptions or {}, page, cells) for r in _fold(rows)],
        steps=next_steps(rows),
    )


# ---------------------------------------------------------------------------------------------
# The page


def _prompt(cell) -> str:
    meta = (cell.get("metadata") or {}).get("labkit") or {}
    if meta.get("injected"):
        return "grader"  # papermill's injected parameters: no cell of the student's
    return html.escape(cell_name(meta["number"] - 1).capitalize()) if meta.get("number") else ""


def _note_html(out) -> Markup:
    note = out["metadata"]["labkit_note"]
    if note.get("text"):
        return Markup(
            f"<details class='labkit-note'><summary>{html.escape(note['summary'])}</summary>"
            f"<pre>{html.escape(note['text'])}</pre></details>"
        )
    return Markup(f"<p class='labkit-cut'>{html.escape(note['summary'])}</p>")


def _highlight_short(highlight):
    """nbconvert's highlighter for a cell of up to ``HIGHLIGHT_CHARS``; past that, the code escaped as
    plain text in the same ``highlight`` block (linear in its length)."""

    def code(source, *args, **kwargs):
        if len(source) <= HIGHLIGHT_CHARS:
            return highlight(source, *args, **kwargs)
        return Markup("<div class='highlight'><pre>{}</pre></div>").format(source)  # format() escapes

    return code


def notebook_body(nb, title: str, top: str, page: Page) -> tuple[str, str]:
    """(the <main> of the page, the CSS it needs) for the displayable notebook ``nb``, ``top`` first."""
    from nbconvert import HTMLExporter
    from nbconvert.filters.highlight import Highlight2HTML

    language = nb.metadata.get("language_info", {})
    lexer = language.get("pygments_lexer", language.get("name"))  # as HTMLExporter chooses it

    def anchor(cell) -> Markup:
        number = ((cell.get("metadata") or {}).get("labkit") or {}).get("number")
        return Markup(f"id='{page.id(f'cell-{number}')}'") if number else Markup("")

    def cut(cell) -> Markup:
        text = ((cell.get("metadata") or {}).get("labkit") or {}).get("cut")
        return Markup(f"<p class='labkit-cut'>{html.escape(text)}</p>") if text else Markup("")

    exporter = HTMLExporter(
        template_name="feedback",
        extra_template_basedirs=[str(TEMPLATES)],
        filters={
            "labkit_markdown": markdown_html,
            "labkit_clean": lambda s: Markup(clean(s)),
            "labkit_latex": latex_html,
            "labkit_prompt": _prompt,
            "labkit_anchor": anchor,
            "labkit_note": _note_html,
            "labkit_cut": cut,
            "highlight_code": _highlight_short(Highlight2HTML(pygments_lexer=lexer)),
        },
    )
    body, resources = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}, "labkit_header": top})
    env = exporter.environment
    css = "\n".join(env.loader.get_source(env, f"static/{name}")[0] for name in ("index.css", "theme-light.css"))
    css += "\n" + "\n".join((resources.get("inlining") or {}).get("css") or [])  # pygments' colours
    return body, css


def plain_page(rows: list[dict], title: str, why: str, warning: str = "", descriptions: dict | None = None) -> str:
    """The page without the notebook: the check table, and ``why`` the notebook is not shown."""
    p = Page(title)
    body = header(rows, title, p, warning, descriptions) + (
        f"<p class='labkit-cut'>{html.escape(why)}</p>" if why else ""
    )
    return p.html(f"<main>{body}</main>", CSS)


def write_feedback(
    executed: str | None,
    rows: list[dict],
    path: str,
    title: str,
    warning: str = "",
    descriptions: dict | None = None,
    source: str | None = None,
    output_kb: float = OUTPUT_KB,
) -> None:
    """The student's page: the check results, then the executed notebook when there is one.
    ``source``: the notebook as submitted (its cells' numbers); ``output_kb``: the rubric's
    ``page_output_kb``."""
    import nbformat

    from labkit.grading.gradebook.report import write_text

    path = Path(path)
    if executed is None or not Path(executed).is_file():
        write_text(path, plain_page(rows, title, "", warning, descriptions))
        return
    size = Path(executed).stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        write_text(
            path,
            plain_page(
                rows,
                title,
                f"The executed notebook is {kb(size)}, over the "
                f"{kb(MAX_NOTEBOOK_BYTES)} a page is made from: print less.",
                warning,
                descriptions,
            ),
        )
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


def warm_up(folder: Path) -> None:
    """Render a small page of the grader's own (Markdown, math, a table, code and its output) into
    ``folder``: the warm renderer (``warm``) runs this once, so each page forked after it finds
    nbconvert imported and its templates and patterns compiled."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    nb = new_notebook(
        cells=[
            new_markdown_cell(
                "# Warm-up\nA formula $x^2$, **bold**, a [link](#a) and a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |"
            ),
            new_code_cell("print('hi')", outputs=[new_output("stream", name="stdout", text="hi\n")], execution_count=1),
        ]
    )
    nb.metadata.language_info = {"name": "python", "pygments_lexer": "ipython3"}
    nbformat.write(nb, str(Path(folder) / "warm.ipynb"))
    write_feedback(str(Path(folder) / "warm.ipynb"), [], str(Path(folder) / "warm.html"), "warm-up")


def cache_entry(job, args: dict, stored: dict) -> cache.Entry:
    """The entry of ``job``'s feedback page, written by ``feedback.write_feedback(**args)`` from the
    run ``stored`` (the gradebook's signed outcome). The page's folder is no input: a page in a
    moved output folder is the same page."""
    shown = {**args, "path": None, "source": None, "executed": args.get("executed") is not None}
    made = cache.key(render.reference(write_feedback), shown, stored, render.TIMEOUT_S, render.MEMORY_MB)
    return cache.Entry(job.private / cache.RECORD, Path(args["path"]), f"{job.student}\0{job.lab.key}", made)
