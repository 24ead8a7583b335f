"""Analysis answers: people score them, the grader finds them and keeps the books.

An ``analysis`` check earns nothing by itself: its answer is ``pending`` until a TA's score is
merged, ``fail`` at once when it still holds the placeholder, and ``pending`` with a reason when
the grader cannot find it (never a silent 0). ``locate`` finds each answer by the cell ids
``make release`` keeps, else the cell after the question, and notes every guess.

``export`` writes, per question, a page and a CSV for the TAs; ``merge`` reads the filled-in
CSVs into the gradebook, and every report is rebuilt without running a notebook. A score is tied
to the answer it was given for, and ``merge`` refuses what would silently change a score (two
files that disagree, a stale file) until ``--prefer`` says which wins. A group's answer is one
row, scored once for every member.

More in docs/internals.md, section labkit.grading (finding answers, the TA's side, merging).
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.notebook.record import Missing, cell_name, cell_tags, lookup

PLACEHOLDER = "YOUR ANSWER HERE"
DEFAULT_NAMES = ["analysis"]
SCORES_FILE = "ta_scores.csv"
SCORE_FIELDS = ["lab", "check", "student", "score", "max", "comment", "answer_sha", "source", "given"]
EXPORT_FIELDS = [
    "lab",
    "check",
    "student",
    "members",
    "answer",
    "numbers",
    "notes",
    "status",
    "answer_sha",
    "base",
    "max",
    "score",
    "comment",
]
NOTE_ROWS = ("(question)", "(answer key)")  # the first rows of an exported CSV: read by people, skipped by merge
NOT_ANSWERED = "not answered: the answer cell still holds the placeholder or nothing"
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
_BACKTICKED = re.compile(r"`([A-Za-z_][\w.\-]*)`")


class ScoresError(ValueError):
    """A scores CSV cannot be merged; the message names the file, the row and what to fix."""


@dataclass
class Question:
    """One analysis check, as the reference notebook asks and answers it."""

    lab: str
    check: str
    max: float
    names: list  # the rubric's cell names (tags or ids)
    answer_ids: list = field(default_factory=list)  # the reference's answer cells, by id
    question_ids: list = field(default_factory=list)  # the question cell before each (or None)
    text: str = ""  # the question (Markdown)
    key: str = ""  # the answer key (Markdown): for TAs only, never on a feedback page
    records: list = field(default_factory=list)  # records named by the rubric or in backticks
    placeholder: str = PLACEHOLDER


@dataclass
class Answer:
    text: str = ""
    cells: list = field(default_factory=list)  # indices of the cells read, in the submitted notebook
    notes: list = field(default_factory=list)  # how they were found, when not simply by id and tag
    found: bool = False

    @property
    def answered(self) -> bool:
        return bool(" ".join(self.text.split()))

    @property
    def sha(self) -> str:
        return answer_sha(self.text)


def answer_sha(text: str) -> str:
    """A short hash of an answer's words (whitespace does not count), tying a TA's score to it."""
    return hashlib.sha256(" ".join(str(text).split()).encode()).hexdigest()[:12]


def _source(cell) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def _matches(cell, names) -> bool:
    return any(n in cell_tags(cell) or cell.get("id") == n for n in names)


def _without_markers(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if ln.strip() not in _MARKERS).strip()


# ---------------------------------------------------------------------------------------------
# The questions and their key, from the reference notebook


def questions(lab, reference: Path | None) -> dict[str, Question]:
    """{check name: Question} for the lab's analysis checks; without a reference notebook the
    answers are found by their names alone."""
    import nbformat

    nb = None
    if reference is not None and Path(reference).is_file():
        nb = nbformat.read(str(reference), as_version=4)
    out = {}
    for check in [c for c in lab.checks if c.manual]:
        names = list(check.spec.get("cells") or DEFAULT_NAMES)
        q = Question(lab.key, check.name, check.points, names, placeholder=check.spec.get("placeholder", PLACEHOLDER))
        if nb is not None:
            answer_cells = [i for i, c in enumerate(nb.cells) if _matches(c, names)]
            q.answer_ids = [nb.cells[i].get("id") for i in answer_cells]
            q.question_ids = [_question_cell(nb, i, check.spec.get("question"), names) for i in answer_cells]
            by_id = {c.get("id"): c for c in nb.cells}
            q.text = "\n\n".join(_source(by_id[qid]) for qid in dict.fromkeys(q.question_ids) if qid in by_id)
            q.key = "\n\n".join(_without_markers(_source(nb.cells[i])) for i in answer_cells)
        named = list(check.spec.get("records", []))
        q.records = named + [r for r in dict.fromkeys(_BACKTICKED.findall(q.text + "\n" + q.key)) if r not in named]
        out[check.name] = q
    return out


def _question_cell(nb, answer: int, named: str | None, names) -> str | None:
    """The id of the question's cell: the rubric's ``question``, else the nearest Markdown cell
    above the answer that is not an answer itself."""
    if named:
        return named
    for cell in reversed(nb.cells[:answer]):
        if cell.get("cell_type") == "markdown" and not _matches(cell, names) and "analysis" not in cell_tags(cell):
            return cell.get("id")
    return None


# ---------------------------------------------------------------------------------------------
# Finding the answers in a submission


def locate(nb, qs: dict[str, Question]) -> dict[str, Answer]:
    """{check name: Answer} in the submitted notebook ``nb`` (see the module docstring). Linear
    in the notebook's cells; whatever a notebook's shape raises leaves every answer not found,
    with the reason (the TA reads the notebook), never the batch's end."""
    try:
        return _locate(nb, qs)
    except Exception as e:  # noqa: BLE001 - one student's notebook: their answers' reason
        why = f"the grader could not read the answers: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        return {name: Answer(notes=[why]) for name in qs}


def _locate(nb, qs: dict[str, Question]) -> dict[str, Answer]:
    cells = nb.cells
    index = {c.get("id"): i for i, c in enumerate(cells) if c.get("id")}
    claimed: dict[int, str] = {}
    found = {name: Answer() for name in qs}
    for name, q in qs.items():
        a = found[name]
        if not q.answer_ids:  # no reference: the cells the names match
            for i, c in enumerate(cells):
                if _matches(c, q.names) and i not in claimed:
                    claimed[i] = name
                    a.cells.append(i)
            if not a.cells:
                a.notes.append(f"no cell tagged {', '.join(map(repr, q.names))} (keep the tag on your answer cells)")
            continue
        for aid, qid in zip(q.answer_ids, q.question_ids):
            i = index.get(aid)
            if i is None and qid in index:
                after = index[qid] + 1
                if after < len(cells) and after not in claimed and cells[after].get("id") not in _all_ids(qs):
                    i = after
                    a.notes.append(f"answer cell {aid} is gone; read the cell after the question ({qid}) instead")
            if i is None:
                a.notes.append(
                    f"answer cell {aid} is not in the notebook (deleted, or its content moved to a new "
                    f"cell): the TA reads the notebook"
                )
                continue
            claimed[i] = name
            a.cells.append(i)
            cell = cells[i]
            if cell.get("cell_type") != "markdown":
                a.notes.append(
                    f"answer cell {aid} is a {cell.get('cell_type')} cell now; its text is read as the answer"
                )
            elif not ({"analysis", *q.names} & set(cell_tags(cell))):
                a.notes.append(f"answer cell {aid} lost its tag; found by its cell id")
    _duplicates(cells, qs, found, claimed)
    for name, q in qs.items():
        a = found[name]
        a.cells.sort()
        a.found = bool(a.cells)
        texts = [_without_markers(_source(cells[i])) for i in a.cells]
        a.text = "\n\n".join(t for t in texts if t and q.placeholder.lower() not in t.lower())
    return found


def _all_ids(qs) -> set:
    return {aid for q in qs.values() for aid in q.answer_ids}


def _duplicates(cells, qs, found, claimed) -> None:
    """Tagged cells no id claimed (a copied answer cell): read with the nearest answer above.
    One pass in cell order (the nearest claimed cell above is carried along), so 40,000 tagged
    cells cost 40,000 steps, not their square."""
    tags = {"analysis"} | {n for q in qs.values() for n in q.names}
    owner = None
    for i, c in enumerate(cells):
        if i in claimed:
            owner = claimed[i]
            continue
        if not (set(cell_tags(c)) & tags):
            continue
        mine = owner if owner is not None else next(iter(qs))
        claimed[i] = owner = mine
        found[mine].cells.append(i)
        _note(
            found[mine],
            f"also read {cell_name(i)} (id {str(c.get('id'))[:64]}), tagged like an answer cell: a copy of one?",
        )


MAX_NOTES = 8  # notes kept per answer; the rest are counted (1,100 copied cells made 147 KB of notes)


def _note(a: "Answer", text: str) -> None:
    """Add a note to ``a``, or count it once MAX_NOTES are kept."""
    if len(a.notes) < MAX_NOTES:
        a.notes.append(text)
        return
    more = a.notes[MAX_NOTES:]
    n = int(more[0].split()[2]) + 1 if more else 1
    a.notes[MAX_NOTES:] = [f"... and {n} more note(s) like these"]


# ---------------------------------------------------------------------------------------------
# Scores: automatic where nothing needs judging, else pending until a TA's is merged


def score(q: Question, a: Answer | None, ta: dict | None):
    """The Score of one answer: the TA's (for this very answer), else pending or fail."""
    from labkit.grading.judge.rubric import Score

    notes = "; ".join(a.notes) if a else ""
    if a is None:
        return Score(0.0, q.max, "not-run", "the notebook could not be read, so neither could the answer")
    if ta is not None and ta.get("answer_sha") == a.sha and ta.get("score") not in ("", None):
        pts = min(max(float(ta["score"]), 0.0), q.max)
        status = "pass" if pts >= q.max else "partial" if pts > 0 else "fail"
        reason = "scored by a TA" + (f": {ta['comment']}" if ta.get("comment") else "")
        if not a.answered:  # the TA confirmed the automatic fail: keep saying why
            reason = f"{NOT_ANSWERED}; {reason}"
        return Score(pts, q.max, status, reason + (f" ({notes})" if notes else ""), a.sha)
    stale = (
        f"; a TA scored an earlier version of this answer ({ta['score']}/{q.max:g}): export the answers again"
        if ta is not None and ta.get("answer_sha") != a.sha
        else ""
    )
    if not a.found:
        return Score(0.0, q.max, "pending", f"answer not found: {notes}{stale}", a.sha)
    if not a.answered:
        return Score(0.0, q.max, "fail", NOT_ANSWERED + (f" ({notes})" if notes else "") + stale, a.sha)
    return Score(0.0, q.max, "pending", "awaiting a TA's score" + (f" ({notes})" if notes else "") + stale, a.sha)


def states(found: dict | None, qs: dict[str, Question]) -> dict[str, dict]:
    """{check: {"sha", "state"}}: each answer of a run as ``score`` reads it, kept with the run in
    the gradebook so its views count as the reports do. state: ``unread`` (the notebook could not
    be read), ``missing`` (no answer cell found), ``empty`` (the placeholder or nothing), ``given``."""
    out = {}
    for name in qs:
        a = None if found is None else found.get(name)
        state = "unread" if a is None else "missing" if not a.found else "empty" if not a.answered else "given"
        out[name] = {"sha": a.sha if a is not None else None, "state": state}
    return out


def read_scores(out: Path) -> dict[tuple, dict]:
    """{(lab, check, student): row}: the current TA scores of the output folder's gradebook
    (``ta_scores.csv`` is a view of them), or of the CSV in a folder that has none."""
    from labkit.grading.gradebook import store

    if not store.exists(out):
        return read_scores_csv(out)
    with store.Gradebook(out) as db:
        return db.current_ta_scores()


def read_scores_csv(out: Path) -> dict[tuple, dict]:
    """{(lab, check, student): row} from the output folder's ``ta_scores.csv`` (an earlier
    layout's, before the gradebook held them)."""
    from labkit.grading.gradebook.csvsafe import read_rows

    path = Path(out) / SCORES_FILE
    if not path.is_file():
        return {}
    return {(r["lab"], r["check"], r["student"]): r for r in read_rows(path)}


def write_scores_view(out: Path, current: dict[tuple, dict]) -> None:
    """``ta_scores.csv``: the gradebook's ``current`` TA scores, for a person to read."""
    from labkit.grading.gradebook.report import write_csv

    write_csv([current[k] for k in sorted(current)], Path(out) / SCORES_FILE, SCORE_FIELDS)


def named_values(records: dict, q: Question) -> list[tuple[str, str]]:
    """(name, value) of the student's own records the question and its key name, a dict's keys
    each on their own (``history.loss = [...]``), long lists shortened in the middle."""
    shown = []
    for ref in q.records:
        try:
            v = lookup(records, ref)
        except (Missing, TypeError, ValueError):
            continue
        shown += _flatten(ref, v, 0)
    return shown


def _flatten(name: str, v, depth: int) -> list[tuple[str, str]]:
    if isinstance(v, dict) and v and depth < 2:
        items = list(v.items())
        out = [p for k, x in items[:MAX_KEYS] for p in _flatten(f"{name}.{k}", x, depth + 1)]
        return out + ([(name, f"... {len(items) - MAX_KEYS} more key(s)")] if len(items) > MAX_KEYS else [])
    return [(name, _value(v))]


def _value(v) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (int, str)):
        text = str(v)
        return text if len(text) <= 80 else text[:77] + "..."
    if isinstance(v, list):
        if len(v) <= 8:
            return "[" + ", ".join(_value(x) for x in v) + "]"
        return f"[{', '.join(_value(x) for x in v[:3])}, ..., {', '.join(_value(x) for x in v[-2:])}] ({len(v)} values)"
    if isinstance(v, dict):
        return f"{{{', '.join(list(map(str, v))[:6])}{', ...' if len(v) > 6 else ''}}} ({len(v)} keys)"
    return _value(str(v))


MAX_KEYS = 12


def numbers(records: dict, q: Question) -> str:
    """``named_values`` as one line: "name = value; ..." (the CSV's ``numbers`` column)."""
    return "; ".join(f"{n} = {v}" for n, v in named_values(records, q))


# ---------------------------------------------------------------------------------------------
# The TA's files


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60] or "question"


def codes(out: Path, students) -> dict[str, str]:
    """{student: code} for anonymous grading: a random code per student, kept in
    ``.grader/anonymous.csv`` of the output folder (the instructor's; the TAs get the pages and
    CSVs in ``answers/``), so the same student has the same code in every export."""
    import secrets

    from labkit.grading.gradebook.csvsafe import read_rows
    from labkit.grading.gradebook.report import write_csv

    path = Path(out) / ".grader" / ANONYMOUS_FILE
    known = {r["student"]: r["code"] for r in read_rows(path)} if path.is_file() else {}
    taken = set(known.values())
    for s in sorted(set(students) - set(known)):
        code = f"S{secrets.token_hex(3)}"
        while code in taken:
            code = f"S{secrets.token_hex(3)}"
        known[s] = code
        taken.add(code)
    write_csv([{"student": s, "code": c} for s, c in sorted(known.items())], path, ["student", "code"])
    return known


def students_by_code(out: Path) -> dict[str, str]:
    """{code: student} from the output folder's anonymous-grading codes (none: {})."""
    from labkit.grading.gradebook.csvsafe import read_rows

    path = Path(out) / ".grader" / ANONYMOUS_FILE
    return {r["code"]: r["student"] for r in read_rows(path)} if path.is_file() else {}


def flag_notes(flags: list[dict], lab: str, check: str, name) -> dict[str, list[str]]:
    """{student: notes} for one question: the similarity report's flagged pairs whose answers
    to it match, and whose code matches; ``name`` shows a student (a code when anonymous)."""
    out: dict[str, list[str]] = {}
    for f in flags:
        if f["lab"] != lab:
            continue
        for me, other, where in (("student_a", "student_b", "parts_a"), ("student_b", "student_a", "parts_b")):
            if f["kind"] == "answers" and check not in f.get(where, "").split("; "):
                continue
            what = "this answer" if f["kind"] == "answers" else "the lab's code"
            out.setdefault(f[me], []).append(
                f"flagged: {what} matches {name(f[other])}'s "
                f"({float(f['similarity']):.0%} of fingerprints; similarity.html)"
            )
    return out


def groups_of(items: list[dict]) -> dict[tuple, list[str]]:
    """{(lab, student): everyone graded for that lab in the student's group, the student too, in
    order}, from the items' ``group`` (the other members the intake named); only group members."""
    graded = {(it["lab"], it["student"]) for it in items}
    out = {}
    for it in items:
        members = sorted({it["student"], *(m for m in it.get("group") or () if (it["lab"], m) in graded)})
        if len(members) > 1:
            out[(it["lab"], it["student"])] = members
    return out


def _shared(items: list[dict], check: str, groups: dict) -> dict[str, list[str]]:
    """{student: the members whose answer to ``check`` is the same as theirs}, for the students of
    one lab's ``items`` in a group (the first of them stands for the rest in the TA's files)."""
    by = {it["student"]: it for it in items}

    def sha(student):
        a = by[student]["answers"].get(check)
        return a.sha if a is not None else None

    out = {}
    for it in items:
        mine = sha(it["student"])
        members = groups.get((it["lab"], it["student"]), [])
        same = [m for m in members if mine is not None and sha(m) == mine]
        if len(same) > 1:
            out[it["student"]] = same
    return out


def export(
    out: Path, items: list[dict], qs: dict[tuple, Question], anonymous: bool = False, flags: list[dict] = ()
) -> list:
    """Write ``answers/<lab>/<check>.csv`` per question and return its ``.html`` page to render
    (``render.Task``). ``items``: one per (student, lab) with ``student``, ``lab``, ``records``,
    ``answers`` {check: Answer or None}, ``scores`` {check: Score} and ``group`` (the others of
    their group, if any: a group's same answer is one row). ``anonymous``: students as codes
    (``codes``), in the codes' order; ``flags``: the similarity report's pairs."""
    from labkit.grading.pages import render
    from labkit.grading.gradebook.report import write_csv

    code = codes(out, {it["student"] for it in items}) if anonymous else {}

    def name(student: str) -> str:
        return code.get(student, student)

    tasks, ta, groups = [], read_scores(out), groups_of(items)
    for (lab, check), q in qs.items():
        rows, marks = [], flag_notes(list(flags), lab, check, name)
        mine = sorted([i for i in items if i["lab"] == lab], key=lambda i: name(i["student"]))
        shared = _shared(mine, check, groups)
        for it in mine:
            members = sorted(shared.get(it["student"], []), key=name)
            if members and members[0] != it["student"]:
                continue  # the group's row is its first member's
            a, s = it["answers"].get(check), it["scores"][check]
            held = ta.get((lab, check, it["student"]))
            rows.append(
                {
                    "lab": lab,
                    "check": check,
                    "student": name(it["student"]),
                    "members": "; ".join(name(m) for m in members),
                    "answer": a.text if a else "",
                    "numbers": numbers(it["records"], q),
                    "values": named_values(it["records"], q),
                    "flags": [
                        *(
                            [f"a group's answer: the score given is each of its {len(members)} members'"]
                            if members
                            else []
                        ),
                        *marks.get(it["student"], []),
                    ],
                    "notes": "; ".join(a.notes) if a else s.reason,
                    "status": s.status,
                    "answer_sha": a.sha if a else "",
                    "base": version(held),
                    "max": f"{q.max:g}",
                    "score": f"{s.points:g}" if s.status not in ("pending", "not-run") else "",
                    "comment": held["comment"]
                    if held and a and held.get("answer_sha") == a.sha
                    else _comment(s.reason),
                }
            )
        base = Path(out) / "answers" / lab / slug(check)
        notes = [
            {"lab": lab, "check": check, "student": NOTE_ROWS[0], "answer": q.text},
            {"lab": lab, "check": check, "student": NOTE_ROWS[1], "answer": q.key},
        ]
        write_csv(
            notes + [{**r, "notes": "; ".join(r["flags"] + ([r["notes"]] if r["notes"] else []))} for r in rows],
            base.with_suffix(".csv"),
            EXPORT_FIELDS,
        )
        _read_back(base.with_suffix(".csv"), len(notes) + len(rows))
        path = base.with_suffix(".html")
        tasks.append(
            render.Task(
                write_page,
                {"path": str(path), "question": asdict(q), "rows": rows},
                path,
                lambda why, q=q, rows=rows, path=path: _page(q, rows, _plain, why, merge_command(path)),
                Path(out) / ".grader" / "answers.log",
            )
        )
    return tasks


ANONYMOUS_FILE = "anonymous.csv"


def _read_back(path: Path, count: int) -> None:
    """Read a written answers CSV as ``merge`` will (csv's own field limit), so a file the TAs
    could not merge is never handed out."""
    from labkit.grading.gradebook.csvsafe import read_rows

    try:
        got = len(read_rows(path))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ScoresError(f"{path}: the grader wrote a CSV it cannot read back ({e}); report this") from None
    if got != count:
        raise ScoresError(f"{path}: {count} row(s) written, {got} read back; report this")


def _comment(reason: str) -> str:
    m = re.search(r"scored by a TA: (.*?)(?: \(.*\))?$", reason)
    return m.group(1) if m else ""


def _plain(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def write_page(path: str, question: dict, rows: list[dict]) -> None:
    """A question's page for the TAs (run by ``render``, in a limited process)."""
    from labkit.grading.pages.feedback import markdown_html
    from labkit.grading.gradebook.report import write_text

    write_text(Path(path), _page(Question(**question), rows, markdown_html, merge=merge_command(Path(path))))


def merge_command(page: Path) -> str:
    """The command that merges the CSV beside a question's ``page`` (``answers/<lab>/`` of the
    class's folder, which ``OUT`` names unless it is make's default)."""
    out = Path(page).parents[2]
    return (
        f"make grade-merge{'' if out == Path('out/grade') else f' OUT={out}'} SCORES={Path(page).with_suffix('.csv')}"
    )


def _page(q: Question, rows: list[dict], render_markdown, why: str = "", merge: str = "") -> str:
    """The page (``templates/pages/answers.html.j2``, autoescaped): the question, the key and
    each answer rendered on its own (``render_markdown`` returns Markup; one that fails shows
    as written, never the others), every other text escaped."""
    from markupsafe import Markup

    from labkit.grading.pages.feedback import CSS
    from labkit.grading.pages.render import template
    from labkit.grading.pages.sanitize import Page

    def shown(text: str):
        return Markup(render_markdown(text)) if text else ""

    body = template(
        "answers.html.j2",
        q=q,
        why=why,
        question=shown(q.text),
        key=shown(q.key),
        slug=slug(q.check),
        merge=merge,
        rows=[(r, shown(r["answer"])) for r in rows],
    )
    css = (
        CSS + " body{font-family:sans-serif;margin:1em 2em} .labkit-flag{display:flex;gap:2em} "
        ".labkit-side{flex:1;border:1px solid #ccc;padding:0 1em} table{border-collapse:collapse;width:100%} "
        "td,th{border:1px solid #ccc;padding:4px;vertical-align:top;text-align:left} "
        ".labkit-note td,.labkit-note th{font-family:monospace;font-size:90%;border:none;padding:1px 4px} "
        ".labkit-warn{color:#cf222e;font-weight:bold} .labkit-desc{color:#666}"
    )
    return Page(f"{q.lab}: {q.check}").html(body, css)


def version(stored: dict | None) -> str:
    """The version of a stored TA score: an exported CSV row carries it (``base``), so a merge can
    tell an update of that score from a file that was scored before it ('' when none)."""
    if not stored:
        return ""
    text = "\0".join(str(stored.get(k) or "") for k in ("score", "comment", "answer_sha", "given"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass
class _Given:
    """One scored row of one file."""

    path: Path
    row: int
    value: tuple  # (score, comment, answer_sha)
    base: str | None  # the version it started from; None: the file has no base column


def merge(
    out: Path,
    files: list[Path],
    known: dict[tuple, Question],
    answers: dict[tuple, str],
    prefer: Path | None = None,
    aliases: dict[str, str] | None = None,
    groups: dict[tuple, list[str]] | None = None,
) -> list[str]:
    """Read filled-in CSVs into the gradebook of ``out`` (one transaction) and its view
    ``ta_scores.csv``; returns what was merged, one line per file.

    ``known``: {(lab, check): Question}; ``answers``: {(lab, check, student): current answer sha};
    ``aliases``: {code: student} of anonymous grading (``codes``); ``groups``: {(lab, student):
    the group's members} (``groups_of``): a row's score is also every member's whose answer is
    the same.
    A file with any bad row merges nothing and raises ScoresError listing every bad row. So does
    a conflict, listing each: two files (or two rows) that score one answer differently; a file
    that scored an earlier version of an answer whose current version has a score; a score that
    differs from the stored one, which changed after the file was exported (its ``base``) or
    which the file does not say it started from. ``prefer`` (one of ``files``) wins every
    conflict it takes part in."""
    from labkit.grading.gradebook import store

    stored = read_scores(out)
    given: dict[tuple, list[_Given]] = {}
    for path in map(Path, files):
        for key, g in _read_scored(path, known, answers, aliases or {}):
            for member in _members(key, answers, groups or {}):
                given.setdefault(member, []).append(g)
    prefer = Path(prefer) if prefer else None
    if prefer is not None and all(prefer.resolve() != Path(f).resolve() for f in files):
        raise ScoresError(f"--prefer {prefer}: not one of the files being merged ({', '.join(map(str, files))})")
    merged, conflicts, counts = {}, [], {}
    for key, gs in sorted(given.items()):
        choice, why = _decide(key, gs, stored.get(key), answers[key], prefer)
        if why:
            conflicts.append(why)
            continue
        if choice is not None:
            merged[key] = choice
        contested = (
            bool(prefer) and choice is not None and bool(_decide(key, gs, stored.get(key), answers[key], None)[1])
        )
        for g in gs:
            c = counts.setdefault(g.path, {"merged": 0, "unchanged": 0, "stale": 0, "won": 0, "lost": 0})
            if choice is None:
                c["unchanged" if not _differs(stored.get(key), g) or _same_points(stored.get(key), g) else "lost"] += 1
            elif (g.value[0], g.value[2]) == (choice.value[0], choice.value[2]):
                c["merged"] += 1
                c["stale"] += g.value[2] != answers[key]
                c["won"] += contested and g.path == choice.path
            else:
                c["lost"] += 1
    if conflicts:
        raise ScoresError(
            f"{len(conflicts)} conflict(s), nothing merged:\n  "
            + "\n  ".join(conflicts)
            + "\nSay which file wins with --prefer FILE (make grade-merge SCORES=... PREFER=FILE), or "
            "correct the files and merge them again."
        )
    now = _now()
    scores = {
        key: {
            "score": g.value[0],
            "max": f"{known[key[:2]].max:g}",
            "comment": g.value[1],
            "answer_sha": g.value[2],
            "source": g.path.name,
            "given": now,
        }
        for key, g in merged.items()
    }
    with store.Gradebook(out) as db:
        db.ta_scores(scores)
        write_scores_view(out, db.current_ta_scores())
    summary = []
    for path in map(Path, files):
        c = counts.get(path, {})
        done, same, stale, won, lost = (c.get(k, 0) for k in ("merged", "unchanged", "stale", "won", "lost"))
        summary.append(
            f"{path}: {done} score(s) merged"
            + (f", {same} unchanged" if same else "")
            + (f", {stale} for an answer that has changed since (still pending)" if stale else "")
            + (f", {won} conflict(s) won (--prefer)" if won else "")
            + (f", {lost} conflict(s) lost (--prefer {prefer.name})" if lost else "")
        )
    return summary


def _members(key: tuple, answers: dict, groups: dict) -> list[tuple]:
    """``key`` and the same question of every other member of its student's group whose answer
    is the same now (a group's row scores them all)."""
    lab, check, student = key
    mates = [m for m in groups.get((lab, student), []) if m != student]
    return [key] + [(lab, check, m) for m in mates if answers.get((lab, check, m)) == answers[key]]


def _read_scored(path: Path, known: dict, answers: dict, aliases: dict) -> list[tuple[tuple, _Given]]:
    """The scored rows of one CSV as (key, _Given), its cells unescaped (``csvsafe``) and
    anonymous codes mapped back to students; ScoresError lists every bad row."""
    from labkit.grading.gradebook.csvsafe import unescape

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [{k: unescape(v) for k, v in r.items()} for r in csv.DictReader(f)]
            header = rows and list(rows[0]) or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ScoresError(f"{path}: cannot read it as a CSV file: {e}") from None
    missing = [c for c in ("lab", "check", "student", "score") if c not in header]
    if missing:
        raise ScoresError(
            f"{path}: no column(s) {', '.join(missing)}; merge the CSV `grade-answers` wrote, "
            f"with its score and comment columns filled in"
        )
    out, bad = [], []
    for n, r in enumerate(rows, start=2):
        if (r.get("student") or "") in NOTE_ROWS:
            continue
        score_text = (r.get("score") or "").strip()
        if not score_text:
            continue  # not scored yet: stays pending
        key = (r["lab"], r["check"], aliases.get(r["student"], r["student"]))
        q = known.get(key[:2])
        if q is None:
            bad.append(f"row {n}: no analysis check {key[1]!r} in lab {key[0]!r}")
            continue
        if key not in answers:
            bad.append(f"row {n}: no graded notebook of student {key[2]!r} for {key[0]}")
            continue
        try:
            pts = float(score_text)
        except ValueError:
            bad.append(f"row {n}: score {score_text!r} is not a number")
            continue
        if not 0 <= pts <= q.max:
            bad.append(f"row {n}: score {pts:g} is outside 0..{q.max:g}")
            continue
        sha = (r.get("answer_sha") or "").strip() or answers[key]
        base = (r.get("base") or "").strip() if "base" in header else None
        out.append((key, _Given(path, n, (f"{pts:g}", (r.get("comment") or "").strip(), sha), base)))
    if bad:
        raise ScoresError(f"{path}: nothing merged; fix these rows and merge it again:\n  " + "\n  ".join(bad))
    return out


def _decide(key: tuple, gs: list[_Given], st: dict | None, current: str, prefer: Path | None):
    """(the row to store or None to keep the stored one, '' or the conflict in words)."""
    where = "/".join(key)
    gs = _agreeing(gs, prefer)
    preferred = [g for g in gs if prefer is not None and _same(g.path, prefer)]
    if len({g.value for g in preferred}) > 1:
        return None, f"{where}: {_rows(preferred)} of the preferred file disagree"
    if preferred:
        return (preferred[0] if _differs(st, preferred[0]) else None), ""
    if len({g.value for g in gs}) > 1:
        return None, f"{where}: " + ", ".join(f"{_rows([g])} gives {_shown(g.value)}" for g in gs)
    g = gs[0]
    if not _differs(st, g):
        return None, ""
    if (st or {}).get("score") == g.value[0] and st.get("answer_sha") == g.value[2]:
        return _commented(st, g), ""  # the points stand; only what was said of them changed
    if st is None or (st.get("answer_sha") != current and g.value[2] == current):
        return g, ""
    held = f"{SCORES_FILE} holds {_shown((st.get('score'), st.get('comment')))} (from {st.get('source')}"
    held += f", merged {st['given']})" if st.get("given") else ")"
    if g.value[2] != current and st.get("answer_sha") == current:
        return None, (
            f"{where}: {_rows(gs)} scored an earlier version of the answer ({_shown(g.value)}); "
            f"{held} for the answer as it is now"
        )
    if any(x.base == version(st) for x in gs):
        return g, ""
    if all(x.base is None for x in gs):
        return None, (
            f"{where}: {_rows(gs)} gives {_shown(g.value)}; {held}, and the file has no base column to "
            f"say which score it started from"
        )
    return None, f"{where}: {_rows(gs)} gives {_shown(g.value)}; {held}, given after the file was exported"


def _commented(st: dict, g: _Given) -> _Given | None:
    """``g`` as it updates the comment of the stored score ``st`` it agrees with on the points
    (None: nothing to change): a comment already there changes nothing; the file the stored score
    came from replaces its own comment (the last one: another file's is added after those before);
    another file's comment is added, so the student reads both."""
    said = [c for c in (st.get("comment") or "").split(" / ") if c]
    if g.value[1] in (st.get("comment"), *said):
        return None
    if st.get("source") == g.path.name:
        comment = " / ".join([*said[:-1], *([g.value[1]] if g.value[1] else [])])
    elif not g.value[1]:
        return None
    else:
        comment = " / ".join([*said, g.value[1]])
    return _Given(g.path, g.row, (g.value[0], comment, g.value[2]), g.base)


def _agreeing(gs: list[_Given], prefer: Path | None) -> list[_Given]:
    """``gs``, or one row when they give the same score for the same answer: two TAs who agree on
    the points do not conflict, and the student reads every comment they wrote (the preferred
    file's first)."""
    if len(gs) < 2 or len({(g.value[0], g.value[2]) for g in gs}) > 1:
        return gs
    first = sorted(gs, key=lambda g: not (prefer is not None and _same(g.path, prefer)))
    comments = list(dict.fromkeys(g.value[1] for g in first if g.value[1]))
    bases = [g.base for g in first if g.base is not None]
    return [
        _Given(
            first[0].path,
            first[0].row,
            (first[0].value[0], " / ".join(comments), first[0].value[2]),
            bases[0] if bases else None,
        )
    ]


def _differs(st: dict | None, g: _Given) -> bool:
    return st is None or (st.get("score"), st.get("comment") or "", st.get("answer_sha")) != g.value


def _same_points(st: dict | None, g: _Given) -> bool:
    return st is not None and (st.get("score"), st.get("answer_sha")) == (g.value[0], g.value[2])


def _same(a: Path, b: Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _rows(gs: list[_Given]) -> str:
    return ", ".join(f"{g.path.name} row {g.row}" for g in gs)


def _shown(value: tuple) -> str:
    score, comment = value[0], value[1]
    return f"{score}" + (f" ({comment!r})" if comment else "")


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def to_json(a: Answer) -> dict:
    return asdict(a)
