"""Which students' notebooks share code or answers: a flag for a person to look at, never points.

Per lab, every pair of submissions is compared twice:

- **code**: the code cells, tokenized by Python's ``tokenize`` with comments and whitespace
  dropped, every identifier replaced by one symbol and every string by another (renaming
  variables or rewording comments changes nothing);
- **answers**: the analysis answers (as ``answers.locate`` finds them), lower-cased words
  without punctuation.

Each document is fingerprinted by winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003: the
algorithm behind MOSS): hash every k-gram of tokens, keep the smallest hash of each window of
w consecutive ones, with its position. Fingerprints the starting notebook already has (the
released version of the reference, whose code every student starts from; the questions, which
answers may quote) are ignored. A pair's similarity is the share of the smaller document's
fingerprints that the other has too. Pairs at or above the threshold are listed in
``similarity.html`` with every matching passage side by side (the cell or the question each
is in), and in ``similarity.csv``, whose ``parts_a`` and ``parts_b`` name the cells or questions
that match: the TA answer pages mark a flagged pair's answers from them (``flags``).
"""
from __future__ import annotations

import csv
import hashlib
import html
import io
import keyword
import re
import tokenize
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

THRESHOLD = 0.5          # share of the smaller document's fingerprints found in the other
SETTINGS = {"code": (12, 8), "answers": (6, 4)}   # kind: (k tokens per gram, w grams per window)
MIN_FINGERPRINTS = 6     # documents with fewer (after the template's are removed) are not compared
MIN_SHARED = 4           # nor pairs sharing fewer
MAX_PASSAGES = 400       # shown per pair (a pair of whole notebooks copied has a few dozen)
CSV_FIELDS = ["lab", "kind", "student_a", "student_b", "similarity", "shared", "parts_a", "parts_b"]


@dataclass
class Doc:
    """A student's code (or answers) of one lab: tokens, and where each came from."""
    student: str
    parts: list[str]                                   # cell sources (or answers), as written
    labels: list[str] = field(default_factory=list)    # what each part is: "cell 5", "answer Q1"
    tokens: list[str] = field(default_factory=list)
    where: list[tuple[int, int, int]] = field(default_factory=list)  # (part, start, end): lines or chars
    prints: dict[int, list[int]] = field(default_factory=dict)       # fingerprint -> token positions


# ---------------------------------------------------------------------------------------------
# Normalising

def code_doc(student: str, sources: list[str], labels: list[str] | None = None) -> Doc:
    """Tokens of Python cells: no comments or layout; identifiers V, strings S, numbers and operators kept."""
    doc = Doc(student, list(sources), list(labels or []))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
            tokenize.ENDMARKER}
    for n, src in enumerate(sources):
        text = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()) + "\n"
        try:
            toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, IndentationError, SyntaxError):  # a cell that does not parse: its words
            toks = [tokenize.TokenInfo(tokenize.NAME, m.group(), (i + 1, 0), (i + 1, 0), "")
                    for i, ln in enumerate(text.splitlines()) for m in re.finditer(r"\S+", ln)]
        for t in toks:
            if t.type in skip:
                continue
            if t.type == tokenize.NAME and not keyword.iskeyword(t.string):
                tok = "V"
            elif t.type == tokenize.STRING or t.type in _FSTRING:
                tok = "S"
            else:
                tok = t.string
            doc.tokens.append(tok)
            doc.where.append((n, t.start[0], t.end[0]))
    return doc


_FSTRING = {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}


def text_doc(student: str, texts: list[str], labels: list[str] | None = None) -> Doc:
    """Lower-cased words of prose answers, each with its character span."""
    doc = Doc(student, list(texts), list(labels or []))
    for n, text in enumerate(texts):
        for m in re.finditer(r"[^\W_]+", text.lower()):
            doc.tokens.append(m.group())
            doc.where.append((n, m.start(), m.end()))
    return doc


# ---------------------------------------------------------------------------------------------
# Winnowing

def _hash(gram: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(gram).encode(), digest_size=8).digest(), "big")


def winnow(tokens: list[str], k: int, w: int) -> dict[int, list[int]]:
    """{fingerprint: [token positions]}: the minimum hash of every window of ``w`` k-grams (the
    rightmost one on ties, as the paper does), so any match of at least w + k - 1 tokens shares one."""
    hashes = [_hash(tuple(tokens[i:i + k])) for i in range(len(tokens) - k + 1)]
    out: dict[int, list[int]] = {}
    if not hashes:
        return out
    last = -1
    for start in range(max(len(hashes) - w + 1, 1)):
        window = hashes[start:start + w]
        low = min(window)
        pos = start + max(i for i, h in enumerate(window) if h == low)
        if pos != last:
            out.setdefault(low, []).append(pos)
            last = pos
    return out


def fingerprint(doc: Doc, kind: str) -> Doc:
    doc.prints = winnow(doc.tokens, *SETTINGS[kind])
    return doc


@dataclass
class Pair:
    lab: str
    kind: str
    a: Doc
    b: Doc
    similarity: float
    shared: set


def compare(docs: list[Doc], kind: str, lab: str, base: set, threshold: float) -> list[Pair]:
    """Pairs at or above ``threshold``, most similar first; fingerprints in ``base`` do not count."""
    prints = {d.student: set(d.prints) - base for d in docs}
    pairs = []
    for a, b in combinations(docs, 2):
        pa, pb = prints[a.student], prints[b.student]
        small = min(len(pa), len(pb))
        if small < MIN_FINGERPRINTS:
            continue
        shared = pa & pb
        score = len(shared) / small
        if len(shared) >= MIN_SHARED and score >= threshold:
            pairs.append(Pair(lab, kind, a, b, round(score, 3), shared))
    return sorted(pairs, key=lambda p: (-p.similarity, p.a.student, p.b.student))


# ---------------------------------------------------------------------------------------------
# Passages: where the shared fingerprints are, merged into runs

def passages(doc: Doc, shared: set, k: int) -> list[tuple[int, int, int]]:
    """(part, start, end) runs covering the k-grams of ``shared`` fingerprints in ``doc``."""
    spans = []
    for h in shared:
        for pos in doc.prints.get(h, []):
            first, last = doc.where[pos], doc.where[min(pos + k - 1, len(doc.where) - 1)]
            if first[0] == last[0]:
                spans.append((first[0], first[1], last[2]))
    spans.sort()
    merged = []
    for part, start, end in spans:
        if merged and merged[-1][0] == part and start <= merged[-1][2] + 1:
            merged[-1] = (part, merged[-1][1], max(merged[-1][2], end))
        else:
            merged.append((part, start, end))
    return merged


def matches(p: Pair) -> list[tuple[tuple, tuple]]:
    """Every pair of matching passages, (a's run, b's run), in a's order: each shared
    fingerprint at each of its positions in either document."""
    k = SETTINGS[p.kind][0]
    ra, rb = passages(p.a, p.shared, k), passages(p.b, p.shared, k)
    found = set()
    for h in p.shared:
        for pa in p.a.prints.get(h, []):
            for pb in p.b.prints.get(h, []):
                x, y = _run_at(p.a, pa, ra), _run_at(p.b, pb, rb)
                if x and y:
                    found.add((x, y))
    return sorted(found)


def _run_at(doc: Doc, pos: int, runs: list) -> tuple | None:
    part, start, _ = doc.where[pos]
    return next((r for r in runs if r[0] == part and r[1] <= start <= r[2]), None)


def parts(doc: Doc, runs) -> list[str]:
    """The labels of the parts ``runs`` are in, in order, once each."""
    return list(dict.fromkeys(doc.labels[r[0]] if r[0] < len(doc.labels) else f"part {r[0] + 1}" for r in runs))


def _show(doc: Doc, run: tuple[int, int, int], kind: str) -> str:
    """A passage as HTML: the cell's matching lines, or the answer with the match marked."""
    part, start, end = run
    text = doc.parts[part]
    label = html.escape(doc.labels[part] if part < len(doc.labels) else f"part {part + 1}")
    if kind == "code":
        return (f"<div class='labkit-side'><b>{label}, line{'s' if end > start else ''} {start}"
                f"{f'-{end}' if end > start else ''}</b><pre>"
                f"{html.escape(chr(10).join(text.splitlines()[start - 1:end]))}</pre></div>")
    lo, hi = max(start - 80, 0), min(end + 80, len(text))
    return (f"<div class='labkit-side'><b>{label}</b><pre>{'...' if lo else ''}{html.escape(text[lo:start])}"
            f"<mark>{html.escape(text[start:end])}</mark>{html.escape(text[end:hi])}{'...' if hi < len(text) else ''}"
            f"</pre></div>")


def flags(out) -> list[dict]:
    """The pairs ``similarity.csv`` in ``out`` flags (none when there is no such file)."""
    from labkit.grading.gradebook.csvsafe import read_rows

    path = Path(out) / "similarity.csv"
    try:
        return read_rows(path) if path.is_file() else []
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


# ---------------------------------------------------------------------------------------------
# The report

def _docs(book):
    """{lab: [(kind, docs, base)]} from the batch's submitted notebooks and their answers."""
    import nbformat

    from labkit.grading.kit.release import release_notebook
    from labkit.notebook.record import cell_name

    items = {(it["student"], it["lab"]): it for it in book.answer_items()}
    out = {}
    for lab in book.labs:
        code, prose = [], []
        for job in [j for j in book.jobs if j.lab.key == lab.key and j.clean_input.is_file()]:
            try:
                nb = nbformat.read(str(job.clean_input), as_version=4)
            except (OSError, ValueError):
                continue
            cells = [(cell_name(i), c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
            code.append(fingerprint(code_doc(job.student, [c for _, c in cells], [n for n, _ in cells]), "code"))
            found = {k: a for k, a in (items.get(job.key, {}).get("answers") or {}).items() if a.text}
            prose.append(fingerprint(text_doc(job.student, [a.text for a in found.values()], list(found)), "answers"))
        base_code, base_text = set(), set()
        ref = Path(book.notebooks) / lab.notebook if book.notebooks else None
        if ref is not None and ref.is_file():
            released, _ = release_notebook(nbformat.read(str(ref), as_version=4), lab.notebook)
            base_code = set(fingerprint(code_doc("", [c.source for c in released.cells if c.cell_type == "code"]),
                                        "code").prints)
        qs = [q for (key, _), q in book.questions.items() if key == lab.key]
        base_text = set(fingerprint(text_doc("", [q.text for q in qs] + [q.placeholder for q in qs]), "answers").prints)
        out[lab.key] = [("code", code, base_code), ("answers", prose, base_text)]
    return out


def report(book, threshold: float = THRESHOLD) -> list[Pair]:
    """Write ``similarity.html`` and ``similarity.csv`` for the batch; returns the pairs flagged."""
    from labkit.grading.gradebook.report import write_csv, write_text
    from labkit.grading.pages.sanitize import Page

    pairs = []
    compared = []
    for lab, kinds in _docs(book).items():
        for kind, docs, base in kinds:
            compared.append(f"{lab} {kind}: {len(docs)} submission(s)")
            pairs += compare(docs, kind, lab, base, threshold)
    found = {id(p): matches(p) for p in pairs}
    write_csv([{"lab": p.lab, "kind": p.kind, "student_a": p.a.student, "student_b": p.b.student,
                "similarity": p.similarity, "shared": len(p.shared),
                "parts_a": "; ".join(parts(p.a, [x for x, _ in found[id(p)]])),
                "parts_b": "; ".join(parts(p.b, [y for _, y in found[id(p)]]))} for p in pairs],
              Path(book.out) / "similarity.csv", CSV_FIELDS)
    page = Page("Similarity report")
    write_text(Path(book.out) / "similarity.html", page.html(_body(pairs, found, compared, threshold, page), _CSS))
    return pairs


_CSS = ("body{font-family:sans-serif;margin:1em 2em} table{border-collapse:collapse} td,th{border:1px solid #ccc;"
        "padding:4px;vertical-align:top;text-align:left} .labkit-flag{display:flex;gap:1em;margin:4px 0} "
        ".labkit-side{flex:1;min-width:0} .labkit-side pre{background:#fff8c5;padding:6px;white-space:pre-wrap;"
        "margin:2px 0} mark{background:#ffd33d} details{margin:0.6em 0}")


def _body(pairs: list[Pair], found: dict, compared: list[str], threshold: float, page) -> str:
    head = (f"<h1>Similarity report</h1><p>Pairs of students whose code (identifiers, comments and layout "
            f"ignored) or analysis answers share at least {threshold:.0%} of the smaller one's fingerprints "
            f"(winnowing), beyond what the starting notebook and the questions contain. <strong>This flags pairs "
            f"for a person to look at; it changes no points.</strong> Compared: {html.escape('; '.join(compared))}."
            f"</p>")
    if not pairs:
        return head + "<p>No pair reaches the threshold.</p>"
    rows = "".join(f"<tr><td>{html.escape(p.lab)}</td><td>{p.kind}</td><td>{html.escape(p.a.student)}</td>"
                   f"<td>{html.escape(p.b.student)}</td><td>{p.similarity:.0%}</td><td>{len(p.shared)}</td>"
                   f"<td><a href='#{page.id(f'pair-{i}')}'>{len(found[id(p)])} passage(s)</a></td></tr>"
                   for i, p in enumerate(pairs))
    details = []
    for i, p in enumerate(pairs):
        shown = found[id(p)][:MAX_PASSAGES]
        more = len(found[id(p)]) - len(shown)
        blocks = "".join(f"<div class='labkit-flag'>{_show(p.a, a, p.kind)}{_show(p.b, b, p.kind)}</div>"
                         for a, b in shown)
        details.append(f"<details id='{page.id(f'pair-{i}')}' open><summary>{html.escape(p.lab)} {p.kind}: "
                       f"<b>{html.escape(p.a.student)}</b> (left) and <b>{html.escape(p.b.student)}</b> (right), "
                       f"{p.similarity:.0%}, {len(found[id(p)])} matching passage(s)</summary>{blocks}"
                       + (f"<p>... and {more} more passage(s).</p>" if more else "") + "</details>")
    return (head + "<table><tr><th>lab</th><th>kind</th><th>student</th><th>student</th><th>similarity</th>"
            f"<th>shared fingerprints</th><th></th></tr>{rows}</table><h2>Matching passages</h2>" + "".join(details))
