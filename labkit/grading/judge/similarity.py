"""Which students' notebooks share code or answers: a flag for a person to look at, never points.

Per lab, every pair of submissions is compared on its code cells (tokenized, identifiers and
strings made anonymous, so renaming or rewording changes nothing) and on its analysis answers.
Each is fingerprinted by winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003: the algorithm
behind MOSS), ignoring what the released notebook already holds; a pair's similarity is the
share of the smaller document's fingerprints the other has too. Pairs at or above the threshold
are listed in ``similarity.html`` with the matching passages side by side, and in
``similarity.csv``, from which the TA answer pages mark a flagged pair's answers (``flags``).

More in docs/internals.md, section labkit.grading.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import keyword
import re
import tokenize
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

THRESHOLD = 0.5  # share of the smaller document's fingerprints found in the other
SETTINGS = {"code": (12, 8), "answers": (6, 4)}  # kind: (k tokens per gram, w grams per window)
MIN_FINGERPRINTS = 6  # documents with fewer (after the template's are removed) are not compared
MIN_SHARED = 4  # nor pairs sharing fewer
MAX_PASSAGES = 400  # shown per pair (a pair of whole notebooks copied has a few dozen)
MAX_REPEATS = 16  # a fingerprint at more places than this in one document is dropped from it (periodic text)
COMMON_SHARE = 0.5  # and one in more than this share of a class's documents (at least COMMON_MIN of them)
COMMON_MIN = 10
MAX_TOKENS = 50_000  # tokens read per document (a lab's code has a few thousand): tokenizing stops there
CSV_FIELDS = ["lab", "kind", "student_a", "student_b", "similarity", "shared", "parts_a", "parts_b"]


@dataclass
class Doc:
    """A student's code (or answers) of one lab: tokens, and where each came from."""

    student: str
    parts: list[str]  # cell sources (or answers), as written
    labels: list[str] = field(default_factory=list)  # what each part is: "cell 5", "answer Q1"
    tokens: list[str] = field(default_factory=list)
    where: list[tuple[int, int, int]] = field(default_factory=list)  # (part, start, end): lines or chars
    prints: dict[int, list[int]] = field(default_factory=dict)  # fingerprint -> token positions


# ---------------------------------------------------------------------------------------------
# Normalising


def code_doc(student: str, sources: list[str], labels: list[str] | None = None) -> Doc:
    """Tokens of Python cells: no comments or layout; identifiers V, strings S, numbers and operators kept."""
    doc = Doc(student, list(sources), list(labels or []))
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENCODING,
        tokenize.ENDMARKER,
    }
    for n, src in enumerate(sources):
        left = MAX_TOKENS - len(doc.tokens)
        if left <= 0:
            break
        text = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()) + "\n"
        try:  # at most twice the tokens left (layout tokens are dropped below)
            toks = list(itertools.islice(tokenize.generate_tokens(io.StringIO(text).readline), 2 * left + 16))
        except (tokenize.TokenError, IndentationError, SyntaxError):  # a cell that does not parse: its words
            toks = list(
                itertools.islice(
                    (
                        tokenize.TokenInfo(tokenize.NAME, m.group(), (i + 1, 0), (i + 1, 0), "")
                        for i, ln in enumerate(text.splitlines())
                        for m in re.finditer(r"\S+", ln)
                    ),
                    left,
                )
            )
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
        for m in itertools.islice(re.finditer(r"[^\W_]+", text.lower()), max(MAX_TOKENS - len(doc.tokens), 0)):
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
    hashes = [_hash(tuple(tokens[i : i + k])) for i in range(len(tokens) - k + 1)]
    out: dict[int, list[int]] = {}
    if not hashes:
        return out
    last = -1
    for start in range(max(len(hashes) - w + 1, 1)):
        window = hashes[start : start + w]
        low = min(window)
        pos = start + max(i for i, h in enumerate(window) if h == low)
        if pos != last:
            out.setdefault(low, []).append(pos)
            last = pos
    return out


def fingerprint(doc: Doc, kind: str) -> Doc:
    """``doc`` with its fingerprints: of its first MAX_TOKENS tokens, none at more than
    MAX_REPEATS places (so every later step is linear in the document's length)."""
    del doc.tokens[MAX_TOKENS:], doc.where[MAX_TOKENS:]
    doc.prints = {h: ps for h, ps in winnow(doc.tokens, *SETTINGS[kind]).items() if len(ps) <= MAX_REPEATS}
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
    """Pairs at or above ``threshold``, most similar first; fingerprints in ``base`` do not count,
    nor those in more than COMMON_SHARE of the documents (boilerplate nobody released)."""
    common = _common(docs)
    prints = {d.student: set(d.prints) - base - common for d in docs}
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


def _common(docs: list[Doc]) -> set:
    """Fingerprints in more than COMMON_SHARE of ``docs`` (and at least COMMON_MIN of them)."""
    seen: dict[int, int] = {}
    for d in docs:
        for h in d.prints:
            seen[h] = seen.get(h, 0) + 1
    most = max(COMMON_MIN, COMMON_SHARE * len(docs))
    return {h for h, n in seen.items() if n > most}


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
    """Every pair of matching passages, (a's run, b's run), in a's order: the runs that each
    shared fingerprint lies in, in either document. Each fingerprint is at MAX_REPEATS places at
    most (``fingerprint``) and each place's run is found by bisection, so this is linear in the
    shared fingerprints; at most MAX_PASSAGES pairs are kept."""
    k = SETTINGS[p.kind][0]
    ra, rb = passages(p.a, p.shared, k), passages(p.b, p.shared, k)
    ka, kb = [r[:2] for r in ra], [r[:2] for r in rb]
    found = set()
    for h in sorted(p.shared):
        xs = {x for pos in p.a.prints.get(h, []) if (x := _run_at(p.a, pos, ra, ka))}
        ys = {y for pos in p.b.prints.get(h, []) if (y := _run_at(p.b, pos, rb, kb))}
        found.update((x, y) for x in xs for y in ys)
        if len(found) > MAX_PASSAGES:
            break
    return sorted(found)[:MAX_PASSAGES]


def _run_at(doc: Doc, pos: int, runs: list, keys: list) -> tuple | None:
    """The run of ``runs`` (sorted; ``keys``: their (part, start)) that holds token ``pos``."""
    import bisect

    part, start, _ = doc.where[pos]
    i = bisect.bisect_right(keys, (part, start)) - 1
    return runs[i] if i >= 0 and runs[i][0] == part and runs[i][1] <= start <= runs[i][2] else None


def parts(doc: Doc, runs) -> list[str]:
    """The labels of the parts ``runs`` are in, in order, once each."""
    return list(dict.fromkeys(doc.labels[r[0]] if r[0] < len(doc.labels) else f"part {r[0] + 1}" for r in runs))


def _side(doc: Doc, run: tuple[int, int, int], kind: str) -> dict:
    """A passage for the page: the cell's matching lines, or the answer with the match marked
    (``templates/pages/similarity.html.j2`` escapes every part)."""
    part, start, end = run
    text = doc.parts[part]
    label = doc.labels[part] if part < len(doc.labels) else f"part {part + 1}"
    if kind == "code":
        return {
            "label": label,
            "lines": f"line{'s' if end > start else ''} {start}{f'-{end}' if end > start else ''}",
            "lead": False,
            "before": "\n".join(text.splitlines()[start - 1 : end]),
            "match": "",
            "after": "",
            "trail": False,
        }
    lo, hi = max(start - 80, 0), min(end + 80, len(text))
    return {
        "label": label,
        "lines": "",
        "lead": lo > 0,
        "before": text[lo:start],
        "match": text[start:end],
        "after": text[end:hi],
        "trail": hi < len(text),
    }


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
        code, prose, left = [], [], []
        for job in [j for j in book.jobs if j.lab.key == lab.key and j.clean_input.is_file()]:
            try:  # one student's notebook: left out of the comparison, never the report's end
                nb = nbformat.read(str(job.clean_input), as_version=4)
                cells = [(cell_name(i), c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
                found = {k: a for k, a in (items.get(job.key, {}).get("answers") or {}).items() if a.text}
                docs = (
                    fingerprint(code_doc(job.student, [c for _, c in cells], [n for n, _ in cells]), "code"),
                    fingerprint(text_doc(job.student, [a.text for a in found.values()], list(found)), "answers"),
                )
            except Exception as e:  # noqa: BLE001 - the boundary: named in the report
                left.append(f"{job.student} ({type(e).__name__})")
                continue
            code.append(docs[0])
            prose.append(docs[1])
        base_code, base_text = set(), set()
        ref = lab.reference(book.notebooks) if book.notebooks or lab.folder else None
        if ref is not None and ref.is_file():
            released, _ = release_notebook(nbformat.read(str(ref), as_version=4), lab.notebook)
            base_code = set(
                fingerprint(code_doc("", [c.source for c in released.cells if c.cell_type == "code"]), "code").prints
            )
        qs = [q for (key, _), q in book.questions.items() if key == lab.key]
        base_text = set(fingerprint(text_doc("", [q.text for q in qs] + [q.placeholder for q in qs]), "answers").prints)
        out[lab.key] = [("code", code, base_code, left), ("answers", prose, base_text, left)]
    return out


def report(book, threshold: float = THRESHOLD) -> list[Pair]:
    """Write ``similarity.html`` and ``similarity.csv`` for the batch; returns the pairs flagged."""
    from labkit.grading.gradebook.report import write_csv, write_text
    from labkit.grading.pages.sanitize import Page

    pairs = []
    compared = []
    for lab, kinds in _docs(book).items():
        for kind, docs, base, left in kinds:
            compared.append(
                f"{lab} {kind}: {len(docs)} submission(s)" + (f" (not read: {', '.join(left)})" if left else "")
            )
            pairs += compare(docs, kind, lab, base, threshold)
    pairs = [p for p in pairs if not _one_group(book, p)]  # a group's members hand in one file: never flagged
    found = {id(p): matches(p) for p in pairs}
    write_csv(
        [
            {
                "lab": p.lab,
                "kind": p.kind,
                "student_a": p.a.student,
                "student_b": p.b.student,
                "similarity": p.similarity,
                "shared": len(p.shared),
                "parts_a": "; ".join(parts(p.a, [x for x, _ in found[id(p)]])),
                "parts_b": "; ".join(parts(p.b, [y for _, y in found[id(p)]])),
            }
            for p in pairs
        ],
        Path(book.out) / "similarity.csv",
        CSV_FIELDS,
    )
    page = Page("Similarity report")
    write_text(Path(book.out) / "similarity.html", page.html(_body(pairs, found, compared, threshold, page), _CSS))
    return pairs


def _one_group(book, p) -> bool:
    group = ((book.intake.get(p.a.student) or {}).get("labs") or {}).get(p.lab, {}).get("group") or ()
    return p.b.student in group


_CSS = (
    "body{font-family:sans-serif;margin:1em 2em} table{border-collapse:collapse} td,th{border:1px solid #ccc;"
    "padding:4px;vertical-align:top;text-align:left} .labkit-flag{display:flex;gap:1em;margin:4px 0} "
    ".labkit-side{flex:1;min-width:0} .labkit-side pre{background:#fff8c5;padding:6px;white-space:pre-wrap;"
    "margin:2px 0} mark{background:#ffd33d} details{margin:0.6em 0}"
)


def _body(pairs: list[Pair], found: dict, compared: list[str], threshold: float, page) -> str:
    from labkit.grading.pages.render import template

    shown = [
        {
            "lab": p.lab,
            "kind": p.kind,
            "a": p.a.student,
            "b": p.b.student,
            "similarity": f"{p.similarity:.0%}",
            "shared": len(p.shared),
            "anchor": page.id(f"pair-{i}"),
            "count": len(found[id(p)]),
            "more": max(len(found[id(p)]) - MAX_PASSAGES, 0),
            "passages": [(_side(p.a, x, p.kind), _side(p.b, y, p.kind)) for x, y in found[id(p)][:MAX_PASSAGES]],
        }
        for i, p in enumerate(pairs)
    ]
    return template("similarity.html.j2", pairs=shown, compared=compared, threshold=threshold)
