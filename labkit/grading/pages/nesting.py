"""HTML flattened past a depth, in one pass, before the allow-list's parser sees it.

html5ever (under ``nh3``) walks the stack of open elements for each block start tag (is a ``<p>``
open to close?), so ``<div>`` nested N deep costs N^2 and more: 1 MB of it took minutes. ``flatten``
tokenizes the fragment itself (linear: one forward scan, each tag matched where it starts) and
writes it back as a strictly nested stream the parser cannot read differently: tags of the
allow-list only (the others would be stripped anyway; their text stays), every open element closed
explicitly and in order, attributes re-quoted, every other ``<`` as text. Past ``MAX_DEPTH`` open
elements (or ``MAX_FORMATTING`` open ``<b>``, ``<a>``... which the parser re-creates after each
block), tags are left out and their text kept where it is, with one visible note. The parser's own
stack then stays within a few times ``MAX_DEPTH`` whatever the input. This is a cost bound, not the
safety of the page: ``nh3`` still applies the allow-list to what comes out.
"""

from __future__ import annotations

import re

MAX_DEPTH = 64  # open elements; nbconvert's deepest page nests about 15
MAX_FORMATTING = 12  # open formatting elements
MAX_ATTRIBUTES = 32  # per tag: none of the allow-list's tags has more that it keeps
NOTE = " [more than {} levels of nested HTML: the deeper tags are left out, their text is kept] "

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
RAW_TEXT = {"script", "style", "xmp", "iframe", "noembed", "noframes", "noscript", "textarea", "title"}
FORMATTING = {"a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u"}
CLOSES_P = {
    *"address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer".split(),
    *"header hgroup main menu nav ol p search section summary ul h1 h2 h3 h4 h5 h6 pre listing form table".split(),
    *"li dd dt hr xmp plaintext".split(),
}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
SIBLINGS_IN_SCOPE = {"li": {"li"}, "dd": {"dd", "dt"}, "dt": {"dd", "dt"}}
SIBLINGS_AT_TOP = {"td": {"td", "th"}, "th": {"td", "th"}, "tr": {"tr"}}
BUTTON_SCOPE = {
    *"applet caption html table td th marquee object template button".split(),
    *"mi mo mn ms mtext annotation-xml foreignObject desc title".split(),
}
SPECIAL = BUTTON_SCOPE | {
    *"area article aside base basefont bgsound blockquote body br center col colgroup dd details dir dl dt".split(),
    *"embed fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr".split(),
    *"iframe img input keygen li link listing main menu meta nav noembed noframes noscript ol param".split(),
    *"plaintext pre script search section select source style summary tbody textarea tfoot thead tr track".split(),
    *"ul wbr xmp".split(),
}  # html5's special elements but address, div and p: where the walk for an open <li> stops

_NAME = re.compile(r"[a-zA-Z][^\s/>]*")
_ATTRIBUTE = re.compile(r"""[\s/]*([^\s/>][^\s/>=]*)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]*))?""")
_TAG_END = re.compile(r"[\s/]*>")
_SAFE_ATTRIBUTE = re.compile(r"[a-zA-Z_:][-a-zA-Z0-9_:.]*")
_COMMENT_END = re.compile(r"-?>|.*?(--!?>|\Z)", re.S)


def flatten(fragment: str, keep: set[str], max_depth: int = MAX_DEPTH) -> str:
    """``fragment`` as a strictly nested stream of the tags in ``keep``, flattened past ``max_depth``."""
    return _Flattener(keep, max_depth).run(str(fragment))


class _Flattener:
    def __init__(self, keep: set[str], max_depth: int):
        self.keep, self.max_depth = keep, max_depth
        self.out: list[str] = []
        self.stack: list[str] = []  # the open elements written, at most max_depth
        self.left_out: dict[str, int] = {}  # {name: how many of it were left out, still open}
        self.formatting = 0
        self.noted = False

    def run(self, s: str) -> str:
        i, n = 0, len(s)
        while i < n:
            j = s.find("<", i)
            if j < 0:
                self.out.append(s[i:])
                break
            self.out.append(s[i:j])
            i = self._markup(s, j)
        while self.stack:
            self._pop()
        return "".join(self.out)

    def _markup(self, s: str, j: int) -> int:
        """Read the markup that starts at ``s[j] == '<'``; return where the text after it starts."""
        nxt = s[j + 1 : j + 2]
        if s.startswith("<!--", j):
            m = _COMMENT_END.match(s, j + 4)
            return m.end()
        if nxt in ("!", "?") or (nxt == "/" and not _NAME.match(s, j + 2)):
            k = s.find(">", j)  # a comment of another kind (or a doctype) to its ">"
            return len(s) if k < 0 else k + 1
        closing = nxt == "/"
        m = _NAME.match(s, j + 2 if closing else j + 1)
        if not m:
            self.out.append("&lt;")
            return j + 1
        name = m.group().lower()
        attributes, end, self_closing = self._attributes(s, m.end())
        if end is None:  # the tag runs to the end of the text: a parser drops it
            return len(s)
        if closing:
            self._end(name)
        elif name in RAW_TEXT:  # all of them are dropped with their content: skip to their end tag
            close = re.compile(rf"</{name}[\s/>]", re.I).search(s, end)
            return len(s) if close is None else self._markup(s, close.start())
        elif name == "plaintext":  # the rest is text
            self.out.append(s[end:].replace("&", "&amp;").replace("<", "&lt;"))
            return len(s)
        else:
            self._start(name, attributes, self_closing)
        return end

    def _attributes(self, s: str, i: int) -> tuple[list[str], int | None, bool]:
        """The attributes from ``s[i]`` on (written back double-quoted), where the tag ends, and
        whether it ends with ``/>``."""
        seen, written = set(), []
        while True:
            end = _TAG_END.match(s, i)
            if end:
                return written, end.end(), end.group().endswith("/>")
            m = _ATTRIBUTE.match(s, i)
            if not m or m.end() == i:
                return written, None, False
            i = m.end()
            name, value = m.group(1).lower(), m.group(2)
            if name in seen or len(written) >= MAX_ATTRIBUTES or not _SAFE_ATTRIBUTE.fullmatch(name):
                continue
            seen.add(name)
            if value is None:
                written.append(f" {name}")
                continue
            if value[:1] in ("'", '"'):
                value = value[1:-1]
            written.append(f' {name}="{value.replace(chr(34), "&quot;")}"')

    def _start(self, name: str, attributes: list[str], self_closing: bool) -> None:
        if name not in self.keep:
            return
        self._close_implied(name)
        if len(self.stack) >= self.max_depth or (name in FORMATTING and self.formatting >= MAX_FORMATTING):
            if not self.noted:
                self.noted = True
                self.out.append(NOTE.format(self.max_depth))
            if name not in VOID and not self_closing:
                self.left_out[name] = self.left_out.get(name, 0) + 1
            return
        self.out.append(f"<{name}{''.join(attributes)}>")
        if name not in VOID:
            self.stack.append(name)
            self.formatting += name in FORMATTING
            if self_closing:
                self._pop()

    def _close_implied(self, name: str) -> None:
        """Close, explicitly, what the parser closes when ``name`` starts: an open ``<li>`` at a
        new one, ``<dd>``/``<dt>`` likewise, a ``<p>`` at a block, a heading at a heading, a
        cell at a cell. Left to the parser, the ``<b>``... inside them would stay on its list of
        formatting elements, and be made again (attributes and all) after every later block."""
        if name in SIBLINGS_IN_SCOPE:
            self._close_in_scope(SIBLINGS_IN_SCOPE[name], SPECIAL)
        if name in CLOSES_P:
            self._close_in_scope({"p"}, BUTTON_SCOPE)
        top = self.stack[-1] if self.stack else ""
        if (top in HEADINGS and name in HEADINGS) or top in SIBLINGS_AT_TOP.get(name, ()):
            self._pop()

    def _close_in_scope(self, targets: set[str], boundaries: set[str]) -> None:
        for i in range(len(self.stack) - 1, -1, -1):  # at most MAX_DEPTH
            if self.stack[i] in targets:
                while len(self.stack) > i:
                    self._pop()
                return
            if self.stack[i] in boundaries:
                return

    def _end(self, name: str) -> None:
        if self.left_out.get(name):
            self.left_out[name] -= 1  # the end of a tag left out
        elif name in self.stack:  # at most MAX_DEPTH
            while self.stack[-1] != name:
                self._pop()
            self._pop()
        # else not open: a parser ignores it (or makes an empty element of it)

    def _pop(self) -> None:
        name = self.stack.pop()
        self.out.append(f"</{name}>")
        self.formatting -= name in FORMATTING
