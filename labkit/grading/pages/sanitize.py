"""Every page the grader writes, made safe last: an allow-list applied to its final HTML.

A page shows what students wrote and what their code printed. Whatever made its HTML, ``page``
puts the body through ``clean`` (ammonia's HTML5 parser and serializer, ``nh3``) as the very
last step, so no later conversion can un-escape anything past it. The allow-list keeps text,
tables, lists, images, ``details`` and MathML; no URLs but ``data:`` images and the page's own
anchors; only ids that start with the page's random ``Page.nonce`` and the templates' own
classes; styles that colour but never position or size a box. Nothing can run, fetch, or cover
the grade with a fake one.

The head is the grader's alone: a charset, a Content-Security-Policy that forbids every script
and request (``CSP``), the escaped title and a constant stylesheet. The policy and the
allow-list each hold on their own (``tests/grading/test_pages_hostile.py`` tries both).

More in docs/internals.md, section labkit.grading (each rule of the allow-list, and why).
"""

from __future__ import annotations

import html
import re
import secrets
from dataclasses import dataclass, field

from labkit.grading.pages import nesting

CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; form-action 'none'; base-uri 'none'"
)

HTML_TAGS = {
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "caption",
    "cite",
    "code",
    "col",
    "colgroup",
    "dd",
    "del",
    "details",
    "dfn",
    "div",
    "dl",
    "dt",
    "em",
    "figcaption",
    "figure",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "img",
    "ins",
    "kbd",
    "li",
    "main",
    "mark",
    "ol",
    "p",
    "pre",
    "q",
    "s",
    "samp",
    "section",
    "small",
    "span",
    "strong",
    "sub",
    "summary",
    "sup",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "tr",
    "u",
    "ul",
    "var",
    "wbr",
}
MATHML_TAGS = {
    "math",
    "menclose",
    "merror",
    "mfrac",
    "mi",
    "mmultiscripts",
    "mn",
    "mo",
    "mover",
    "mpadded",
    "mphantom",
    "mprescripts",
    "mroot",
    "mrow",
    "ms",
    "mspace",
    "msqrt",
    "mstyle",
    "msub",
    "msubsup",
    "msup",
    "mtable",
    "mtd",
    "mtext",
    "mtr",
    "munder",
    "munderover",
    "none",
    "semantics",
}
TAGS = HTML_TAGS | MATHML_TAGS
DROPPED_WITH_CONTENT = {
    "script",
    "style",
    "svg",
    "template",
    "noscript",
    "iframe",
    "object",
    "embed",
    "title",
    "textarea",
    "select",
    "xmp",
    "noembed",
    "noframes",
    "head",
}
MATHML_ATTRS = {
    "display",
    "mathvariant",
    "mathsize",
    "mathcolor",
    "mathbackground",
    "displaystyle",
    "scriptlevel",
    "stretchy",
    "fence",
    "separator",
    "largeop",
    "movablelimits",
    "accent",
    "accentunder",
    "lspace",
    "rspace",
    "minsize",
    "maxsize",
    "symmetric",
    "form",
    "linethickness",
    "columnalign",
    "rowalign",
    "columnspacing",
    "rowspacing",
    "columnlines",
    "rowlines",
    "frame",
    "framespacing",
    "notation",
    "width",
    "height",
    "depth",
    "columnspan",
    "rowspan",
}  # no voffset: it moves glyphs off their box
MATHML_LENGTHS = {"mathsize", "lspace", "rspace", "minsize", "maxsize", "width", "height", "depth", "linethickness"}
_LENGTH = re.compile(
    r"(\d{1,2}(\.\d+)?|\.\d+)(em|ex|mu|px|pt|%)?|(very){0,2}(thin|thick)mathspace|"
    r"mediummathspace|small|normal|big|infinity|thin|medium|thick"
)  # never negative
ATTRS = {
    "*": {"class", "id", "title", "lang", "dir", "style"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align", "scope"},
    "col": {"span"},
    "colgroup": {"span"},
    "ol": {"start"},
    "li": {"value"},
    "details": {"open"},
    "div": {"data-mime-type"},
    "table": {"border"},
    **{t: set(MATHML_ATTRS) for t in MATHML_TAGS},
}
IMAGE_SRC = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*")
STYLE_PROPERTIES = {
    "color",
    "background-color",
    "font-weight",
    "font-style",
    "text-align",
    "text-decoration",
    "vertical-align",
}  # what Markdown tables and coloured text need; nothing that sizes or moves
_STYLE_VALUE = re.compile(r"([-#\w\s.,%!'\"]|(rgba?|hsla?)\([\d\s.,%/]*\))*")
# Classes the page's own templates (nbconvert's lab template, labkit's) and Python's renderers use;
# the stylesheet gives none of them a position, a transform or a negative margin.
CLASSES = {
    "jp-Cell",
    "jp-CodeCell",
    "jp-MarkdownCell",
    "jp-RawCell",
    "jp-Notebook-cell",
    "jp-Cell-inputWrapper",
    "jp-Cell-outputWrapper",
    "jp-InputArea",
    "jp-Cell-inputArea",
    "jp-InputPrompt",
    "jp-InputArea-prompt",
    "jp-InputArea-editor",
    "jp-CodeMirrorEditor",
    "jp-Editor",
    "jp-OutputArea",
    "jp-Cell-outputArea",
    "jp-OutputArea-child",
    "jp-OutputPrompt",
    "jp-OutputArea-prompt",
    "jp-OutputArea-output",
    "jp-OutputArea-executeResult",
    "jp-RenderedHTMLCommon",
    "jp-RenderedMarkdown",
    "jp-MarkdownOutput",
    "jp-RenderedHTML",
    "jp-RenderedText",
    "jp-RenderedImage",
    "jp-RenderedSVG",
    "jp-RenderedLatex",
    "jp-mod-noOutputs",
    "jp-mod-noInput",
    "jp-needs-light-background",
    "jp-needs-dark-background",
    "unconfined",
    "highlight",
    "hl-ipython3",
    "hl-python",
    "cm-editor",
    "cm-s-jupyter",
    "dataframe",
    "tex-error",
    "warn",
    "labkit-desc",
    "labkit-warn",
    "labkit-box",
    "labkit-note",
    "labkit-cut",
    "labkit-next",
    "labkit-flag",
    "labkit-side",
    "jp-Collapser",
    "jp-InputCollapser",
    "jp-Cell-inputCollapser",
    "jp-OutputCollapser",
    "jp-Cell-outputCollapser",
}
_TOKEN_CLASS = re.compile(
    r"[a-z]{1,3}\d?|ansi-(bold|underline|[a-z]+-(fg|bg)|[a-z]+-intense-(fg|bg))"
)  # pygments, ansi


CONTAIN = ".jp-Notebook-cell,.labkit-box,.labkit-side{overflow:auto}"  # what a cell or a table box holds stays in it


def new_nonce() -> str:
    return "lk" + secrets.token_hex(6)


@dataclass
class Page:
    """One page being built: its title and the random token its own ids carry."""

    title: str
    nonce: str = field(default_factory=new_nonce)

    def id(self, name: str) -> str:
        """An id (or, with ``#``, a link target) that ``clean`` keeps on this page only."""
        return f"{self.nonce}-{name}"

    def html(self, body: str, css: str = "", body_class: str = "") -> str:
        """The whole page: the grader's head, and ``body`` cleaned (the last step, always).
        ``css`` and ``body_class`` are the grader's constants; ``css`` may write ``#@NAME`` for
        the element with id ``self.id(NAME)``."""
        css = css.replace("#@", f"#{self.nonce}-") + "\n" + CONTAIN
        return (
            f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            f"<title>{html.escape(self.title)}</title><style>{css}</style></head>"
            f"<body class='{html.escape(body_class)}'>{clean(body, self.nonce)}</body></html>"
        )


def _style(value: str) -> str | None:
    kept = []
    for decl in value.split(";"):
        prop, sep, val = decl.partition(":")
        prop, val = prop.strip().lower(), val.strip()
        if sep and prop in STYLE_PROPERTIES and _STYLE_VALUE.fullmatch(val) and "url" not in val.lower():
            kept.append(f"{prop}:{val}")
    return ";".join(kept) or None


def _filter(nonce: str | None):
    def keep(tag: str, attr: str, value: str) -> str | None:
        if attr == "id":
            return value if nonce and value.startswith(f"{nonce}-") else None
        if attr == "href":
            return value if nonce and value.startswith(f"#{nonce}-") else None
        if attr == "src":
            return value if tag == "img" and IMAGE_SRC.fullmatch(value) else None
        if attr == "class":
            kept = [c for c in value.split() if c in CLASSES or _TOKEN_CLASS.fullmatch(c)]
            return " ".join(kept) or None
        if attr == "style":
            return _style(value)
        if tag in MATHML_TAGS and attr in MATHML_LENGTHS:
            return value if _LENGTH.fullmatch(value.strip()) else None
        if attr == "rel":
            return value
        return value if "url" not in value.lower() or attr in ("title", "alt") else None

    return keep


def clean(fragment: str, nonce: str | None = None) -> str:
    """``fragment`` with nothing outside the allow-list (see the module docstring). Without
    ``nonce`` no id and no link survives. The parser gets it flattened past a depth first
    (``nesting``): its cost grows with the square of the nesting."""
    import nh3

    return nh3.clean(
        nesting.flatten(fragment, TAGS | DROPPED_WITH_CONTENT),
        tags=TAGS,
        clean_content_tags=DROPPED_WITH_CONTENT,
        attributes=ATTRS,
        attribute_filter=_filter(nonce),
        strip_comments=True,
        url_schemes={"data"},
        link_rel=None,
    )
