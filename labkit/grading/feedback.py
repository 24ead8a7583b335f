"""Feedback pages that render offline: the check table on top, then the executed notebook.

nbconvert's ``lab`` template gives the look; labkit's template (``templates/feedback``) drops
everything it would load from a CDN (MathJax, require.js, widgets, mermaid) and renders here:

- Markdown through nbconvert's own Markdown parser (mistune, with its math syntax), with every
  formula pre-rendered to MathML by ``latex2mathml``, which Chromium, Firefox and Safari draw
  natively: no script, no network;
- HTML (Markdown cells' own and outputs') sanitized with bleach to an allow-list of tags; the
  MathML is put in after sanitizing, from the grader's own conversion;
- figures stay inline (data URIs);
- a Content-Security-Policy that forbids every script and every request beyond ``data:``.

A page shows only what the student's own run produced and the grader's verdicts: no answer
key, no reference solution, nothing of a hidden check but its verdict, nothing of a classmate.
``page`` wraps other pages (the TA's answer pages, the similarity report) the same way.
"""
from __future__ import annotations

import html
import re
import secrets
from pathlib import Path

from markupsafe import Markup

TEMPLATES = Path(__file__).with_name("templates")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:"
CSS = ("math[display=block]{display:block;margin:0.6em 0;font-size:110%} "
       "code.tex-error{color:#9a6700} #labkit-grade table{border-collapse:collapse} "
       "#labkit-grade td,#labkit-grade th{border:1px solid #888;padding:4px;text-align:left;vertical-align:top}")
TAGS = {"a", "abbr", "b", "blockquote", "br", "code", "del", "details", "div", "em", "h1", "h2", "h3", "h4", "h5",
        "h6", "hr", "i", "img", "input", "kbd", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "summary", "sup",
        "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "caption", "dl", "dt", "dd", "figure",
        "figcaption", "mark", "small", "q", "cite", "center", "font", "style"}
ATTRS = {"*": ["class", "id", "title", "align", "colspan", "rowspan", "border"], "a": ["href", "name"],
         "img": ["src", "alt", "width", "height"], "input": ["type", "checked", "disabled"]}
STATUS_COLOR = {"pass": "#1a7f37", "ok": "#1a7f37", "partial": "#9a6700", "pending": "#0969da"}


def math_html(tex: str, display: bool) -> str:
    """MathML for a TeX formula; its source in a <code> when latex2mathml cannot read it."""
    from latex2mathml.converter import convert

    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # latex2mathml raises many types on TeX it does not know: show the source
        return f"<code class='tex-error'>{html.escape(tex.strip())}</code>"
    return re.sub(r"\s(?:href|xlink:href|on\w+)=\"[^\"]*\"", "", mathml)


def clean(fragment: str) -> str:
    """``fragment`` with only the allowed tags and attributes (bleach); <style> content is kept
    as text only inside allowed tags, and links may be http(s), mailto or in-page."""
    import bleach
    from bleach.css_sanitizer import CSSSanitizer

    return bleach.clean(str(fragment), tags=TAGS - {"style"}, attributes={**ATTRS, "*": ATTRS["*"] + ["style"]},
                        protocols={"http", "https", "mailto", "data"}, strip=True, strip_comments=True,
                        css_sanitizer=CSSSanitizer())


def markdown_html(source: str, attachments: dict | None = None) -> Markup:
    """A Markdown cell as sanitized HTML with its math as MathML."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    token = secrets.token_hex(6)
    formulas: list[str] = []

    class Renderer(IPythonRenderer):
        def _keep(self, tex: str, display: bool) -> str:
            formulas.append(math_html(tex, display))
            return f"labkitmath{token}x{len(formulas) - 1}x"

        def block_math(self, body):
            return self._keep(body, True)

        def inline_math(self, body):
            return self._keep(body, False)

        def latex_environment(self, name, body):
            return self._keep(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)

        def multiline_math(self, text):
            return self._keep(text.strip("$"), True)

    rendered = MarkdownWithMath(renderer=Renderer(escape=False, attachments=attachments or {})).render(str(source))
    safe = clean(rendered)
    return Markup(re.sub(rf"labkitmath{token}x(\d+)x", lambda m: formulas[int(m.group(1))], safe))


def latex_html(source: str) -> Markup:
    """A text/latex output: ``$...$`` or ``$$...$$`` formulas, as MathML."""
    text = str(source).strip()
    m = re.fullmatch(r"\$\$(.*)\$\$|\$(.*)\$", text, re.S)
    if m:
        return Markup(math_html(m.group(1) if m.group(1) is not None else m.group(2), m.group(1) is not None))
    return markdown_html(text)


def page(title: str, body: str, css: str = "") -> str:
    """A standalone page under the same policy (no script, no request)."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{html.escape(title)}</title>"
            f"<style>{CSS} {css}</style></head><body>{body}</body></html>")


def _pts(points: float, most: float) -> str:
    return f"{points:g}/{most:g}"


def header(rows: list[dict], title: str, warning: str = "") -> str:
    """The check table that opens a feedback page."""
    from labkit.grading.report import EXECUTION, PENDING

    checks = [r for r in rows if r["check"] != EXECUTION]
    got, most = sum(r["points"] for r in checks), sum(r["max"] for r in checks)
    pending = [r for r in checks if r["status"] == PENDING]
    waiting = (f" ({len(pending)} answer{'s' if len(pending) != 1 else ''} worth {sum(r['max'] for r in pending):g} "
               f"point{'s' if sum(r['max'] for r in pending) != 1 else ''} awaiting a TA)" if pending else "")
    trs = "".join(
        f"<tr><td>{html.escape(r['check'])}</td><td>{_pts(r['points'], r['max']) if r['check'] != EXECUTION else ''}"
        f"</td><td style='color:{STATUS_COLOR.get(r['status'], '#cf222e')};font-weight:bold'>"
        f"{html.escape(r['status'])}</td><td>{html.escape(str(r['reason']))}</td></tr>" for r in rows)
    return (f"<section id='labkit-grade' style='font-family:sans-serif;margin:1em 2em;padding:1em;"
            f"border:2px solid #888;border-radius:6px'><h2>{html.escape(title)}: {_pts(got, most)} points{waiting}</h2>"
            + (f"<p style='color:#cf222e;font-weight:bold'>WARNING: this notebook {html.escape(warning)}.</p>"
               if warning else "")
            + f"<table><tr><th>check</th><th>points</th><th>status</th><th>reason</th></tr>{trs}</table></section>")


def _displayable(nb):
    """A copy of ``nb`` without what needs a script: widget state and views, JavaScript outputs."""
    import copy

    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    drop = ("application/javascript", "application/vnd.jupyter.widget-view+json",
            "application/vnd.jupyter.widget-state+json", "text/vnd.mermaid")
    for cell in nb.cells:
        for out in cell.get("outputs") or []:
            data = out.get("data")
            if isinstance(data, dict):
                for mime in drop:
                    data.pop(mime, None)
                if not data and out.get("output_type") in ("display_data", "execute_result"):
                    data["text/plain"] = ""
    return nb


def notebook_html(nb, title: str, top: str) -> str:
    """The executed notebook ``nb`` as a page, with ``top`` (HTML) first in it."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="feedback", extra_template_basedirs=[str(TEMPLATES)],
                            filters={"labkit_markdown": markdown_html, "labkit_clean": lambda s: Markup(clean(s)),
                                     "labkit_latex": latex_html})
    body, _ = exporter.from_notebook_node(_displayable(nb), resources={
        "metadata": {"name": title}, "labkit_header": top, "labkit_csp": CSP, "labkit_css": CSS})
    return body


def write_feedback(executed: Path | None, rows: list[dict], path: Path, title: str, warning: str = "") -> None:
    """The student's page: the check results, then the executed notebook when there is one."""
    import nbformat

    from labkit.grading.report import write_text

    top = header(rows, title, warning)
    text = None
    if executed is not None and Path(executed).is_file():
        try:
            text = notebook_html(nbformat.read(str(executed), as_version=4), title, top)
        except Exception as e:  # a page without the notebook beats no page; say why
            top += (f"<p>The executed notebook could not be rendered: "
                    f"{html.escape(f'{type(e).__name__}: {e}')}</p>")
    write_text(path, text if text is not None else page(title, top))
