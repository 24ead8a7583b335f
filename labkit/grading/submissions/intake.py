"""Submissions as Canvas and Gradescope download them, laid out for the grader.

The grader reads one layout, ``DIR/<student>/<lab notebook>.ipynb``. ``import_download`` builds
it from a Canvas "Download Submissions" zip or a Gradescope "Export Submissions" zip, and
``intake.json`` next to it keeps what the LMS said of each file (who, when, late or not, what it
was called), which every report then shows. Students are named by the roster (Canvas's gradebook
export); a file's lab is found by its name, else by its cell ids; of several files the latest
counts, and every file not graded is noted, never dropped in silence.

Archives are hostile: read entry by entry, never joined to a path, with links, absolute and
``..`` paths refused and every size bounded (``MAX_READ_BYTES``, ``MAX_FILES``).

More in docs/internals.md, section labkit.grading (each LMS's file names and metadata, how names
are resolved, the limits).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import stat
import zipfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath

RECORD = "intake.json"
NO_DUE = (
    "lateness was not computed: Gradescope's export marks nothing late, and no due date was given "
    "(--due, or DUE= with make) to compare each submission's :created_at with"
)
METADATA = "submission_metadata.yml"
MAX_ENTRIES = 100_000
MAX_READ_BYTES = 3 * 2**30  # bytes read out of one download in all (checked on the sizes first, then as read)
MAX_FILES = 20  # files read per submission folder (a lab takes one or two); the rest are listed
MAX_FIELD = 200  # characters of a submitter's :name, :sid or :email
MATCH_SHARE = 0.5  # share of a lab's cell ids a notebook must hold to be that lab's under another name
_ID = re.compile(r"[1-9][0-9]*")  # Canvas's user and attachment ids
_RESUBMITTED = re.compile(r"^(?P<stem>.*?)(?:-(?P<n>[0-9]+)| \((?P<copy>[0-9]+)\))?(?P<ext>\.[A-Za-z0-9]+)$")
_SAFE = re.compile(r"[^\w.@+-]+")
ENTRIES = {"link": "a website URL entry (link.html)", "text": "a text entry (text.html)"}  # Canvas's other kinds


class IntakeError(ValueError):
    """A download the grader cannot read; the message says what to give it instead."""


def _cap() -> int:
    from labkit.grading.run.runner import MAX_NOTEBOOK_BYTES

    return MAX_NOTEBOOK_BYTES + 1


# ---------------------------------------------------------------------------------------------
# Reading a download: a zip or a folder, entry by entry


class Budget:
    """The bytes one download may still give (``MAX_READ_BYTES``): every read draws on it, so a
    zip bomb ends in an IntakeError, not in gigabytes on the disk."""

    def __init__(self, source, total: int = MAX_READ_BYTES):
        self.source, self.left = source, total

    def take(self, data: bytes) -> bytes:
        self.left -= len(data)
        if self.left < 0:
            raise IntakeError(
                f"{self.source}: more than {MAX_READ_BYTES / 2**30:g} GB read out of it, more than a "
                f"class's notebooks hold (a zip bomb?); nothing was imported"
            )
        return data


@dataclass
class Entry:
    path: str  # relative, '/'-separated, as the archive or folder names it
    size: int
    read: object  # () -> bytes, at most _cap() of them

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


def entries(source: Path, notes: list[str]) -> list[Entry]:
    """Every regular file in the zip or folder ``source``; what is skipped is noted."""
    source = Path(source)
    if source.is_dir():
        return _folder_entries(source, notes)
    if zipfile.is_zipfile(source):
        return _zip_entries(source, notes)
    raise IntakeError(
        f"{source} is neither a folder nor a zip file; give Canvas's or Gradescope's download as it "
        f"came (a .zip), or a folder DIR/<student>/<notebook>.ipynb"
    )


def _skipped(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return any(p.startswith(".") or p == "__MACOSX" for p in parts)  # Finder's ._ and __MACOSX copies


def _zip_entries(source: Path, notes: list[str]) -> list[Entry]:
    out = []
    zf = zipfile.ZipFile(source)
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise IntakeError(f"{source} holds {len(infos)} entries, over the {MAX_ENTRIES} an LMS download has")
    declared = sum(min(i.file_size, _cap()) for i in infos)
    if declared > MAX_READ_BYTES:
        raise IntakeError(
            f"{source}: its entries hold {declared / 2**30:.1f} GB uncompressed, over the "
            f"{MAX_READ_BYTES / 2**30:g} GB the grader reads out of one download (a zip bomb?)"
        )
    budget = Budget(source)
    for info in infos:
        name = info.filename
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts or "\\" in name:  # before _skipped: '..' starts with a dot
            notes.append(f"not read: {name!r} (a path out of the archive)")
        elif info.is_dir() or _skipped(name):
            continue
        elif stat.S_ISLNK(info.external_attr >> 16):
            notes.append(f"not read: {name} (a symbolic link)")
        else:
            out.append(Entry(name, info.file_size, lambda i=info: budget.take(_read_capped(zf.open(i)))))
    return out


def _folder_entries(source: Path, notes: list[str]) -> list[Entry]:
    out, budget = [], Budget(source)
    for p in sorted(source.rglob("*")):
        rel = p.relative_to(source).as_posix()
        if _skipped(rel) or (p.is_dir() and not p.is_symlink()):
            continue
        if p.is_symlink():
            notes.append(f"not read: {rel} (a symbolic link)")
        elif p.is_file():
            out.append(Entry(rel, p.stat().st_size, lambda q=p: budget.take(_read_capped(open(q, "rb")))))
        if len(out) > MAX_ENTRIES:
            raise IntakeError(f"{source} holds over {MAX_ENTRIES} files, more than an LMS download has")
    return out


def _read_capped(f) -> bytes:
    with f:
        return f.read(_cap())


# ---------------------------------------------------------------------------------------------
# The layouts


@dataclass
class CanvasName:
    """One reading of a Canvas download's file name."""

    name: str  # Canvas's lower-case name (smithjohn)
    late: bool
    user_id: str
    attachment_id: str  # '' for a URL or text entry
    original: str  # the file's own name, as the student uploaded it (with Canvas's -N)
    anonymous_id: str = ""  # anonymous grading: Canvas's anonymous id, and no name or user id
    kind: str = "file"  # file | link (a website URL entry) | text (a text entry)

    @property
    def prefix(self) -> str:
        """What Canvas matches a re-uploaded file by: name, LATE, user id and attachment id
        (anonymous grading: LATE, anon_<anonymous id>, attachment id)."""
        if self.anonymous_id:
            head = (["LATE"] if self.late else []) + ["anon", self.anonymous_id]
        else:
            head = [self.name] + (["LATE"] if self.late else []) + [self.user_id]
        return "_".join(head + ([self.attachment_id] if self.attachment_id else []))

    def describe(self) -> str:
        who = f"anonymous id {self.anonymous_id}" if self.anonymous_id else f"user {self.user_id} ({self.name})"
        what = ENTRIES[self.kind] if self.kind != "file" else f"attachment {self.attachment_id}, file {self.original!r}"
        return f"{who}: {what}"


def canvas_readings(filename: str) -> list[CanvasName]:
    """Every way ``filename`` reads as Canvas names a download's file, Canvas's own first.

    Canvas writes ``<name>_[LATE_]<user id>_<attachment id>_<file>`` (canvas-lms
    ``ContentZipper#add_upload_submission``), ``<name>_[LATE_]<user id>_link.html`` and ``..._text.html``
    for a website URL and a text entry (``#add_text_or_url``), and ``[LATE_]anon_<anonymous id>_...``
    under anonymous grading (``#get_filename``). The name is the student's, lower case with its
    punctuation dropped, and may hold ``_<digits>`` (``evil_12345``), so a name may read several ways;
    ids are Canvas's (no leading zero), which keeps ``01_single_node_lr.ipynb`` out of them."""
    parts = filename.split("_")
    out = []
    at = 1 if parts[:1] == ["LATE"] else 0
    if parts[at : at + 1] == ["anon"] and len(parts) > at + 2 and parts[at + 1]:
        anon, rest = parts[at + 1], parts[at + 2 :]
        if rest in (["link.html"], ["text.html"]):
            out.append(CanvasName(f"anon_{anon}", bool(at), "", "", rest[0], anon, rest[0][:4]))
        elif len(rest) > 1 and _ID.fullmatch(rest[0]) and "_".join(rest[1:]):
            out.append(CanvasName(f"anon_{anon}", bool(at), "", rest[0], "_".join(rest[1:]), anon))
    for i in range(1, len(parts) - 1):
        tail = parts[i + 1 :]
        if not _ID.fullmatch(parts[i]):
            continue
        head = parts[:i]
        late = len(head) > 1 and head[-1] == "LATE"
        name = "_".join(head[:-1] if late else head)
        if not name:
            continue
        if tail in (["link.html"], ["text.html"]):
            out.append(CanvasName(name, late, parts[i], "", tail[0], kind=tail[0][:4]))
        elif len(tail) > 1 and _ID.fullmatch(tail[0]) and "_".join(tail[1:]):
            out.append(CanvasName(name, late, parts[i], tail[0], "_".join(tail[1:])))
    return out


def canvas_name(filename: str) -> CanvasName | None:
    """Canvas's own reading of a download's file name (the first ids), or None when it is not
    one; ``canvas_readings`` gives every reading, ``resolve_readings`` the one the intake takes."""
    found = canvas_readings(filename)
    return found[0] if found else None


def resolve_readings(files: dict[str, list[CanvasName]], known_ids: set, lab_names: set) -> dict[str, list]:
    """{path: the readings left}: one is the file's; several (or none) are refused, never guessed.

    A student's display name may hold ``_<digits>`` (``Evil_12345``), so ``evil_12345_555_999_x.ipynb``
    is evil_12345 (user 555) handing in ``x.ipynb``, or evil (user 12345) handing in ``999_x.ipynb``.
    Canvas anonymizes a whole assignment or none of it, so a download is read one way. A reading is
    then dropped when another file settles its user id under another name (it would make two
    students one), and kept when it is better on every count below and worse on none: it agrees
    with a settled file (one student stays one person); its user id is on the roster or in the
    group set (``known_ids``); its file names a lab, else (with a roster) starts with no id."""
    anonymous = all(any(r.anonymous_id for r in rs) for rs in files.values() if rs)
    left = {p: [r for r in rs if bool(r.anonymous_id) == anonymous] or rs for p, rs in files.items()}
    while True:
        settled = [rs[0] for rs in left.values() if len(rs) == 1 and not rs[0].anonymous_id]
        names = {}
        for r in settled:
            names.setdefault(r.user_id, set()).add(r.name)
        pairs = {(r.user_id, r.name) for r in settled}
        step = {}
        for path, rs in left.items():
            if len(rs) < 2:
                step[path] = rs
                continue
            rs = [r for r in rs if r.anonymous_id or r.name in names.get(r.user_id, {r.name})]
            step[path] = _dominant(rs, pairs, known_ids, lab_names)
        if step == left:
            return left
        left = step


def _dominant(readings: list[CanvasName], pairs: set, known_ids: set, lab_names: set) -> list[CanvasName]:
    """The readings no other is better than on some count and as good on all: one is the file's."""

    def counts(r: CanvasName) -> tuple:
        lab = plain_name(r.original).lower() in lab_names
        plain = bool(known_ids) and not re.match(r"[1-9][0-9]*_", r.original)
        return ((r.user_id, r.name) in pairs, r.user_id in known_ids, 2 if lab else int(plain))

    scored = [(counts(r), r) for r in readings]
    return [r for c, r in scored if not any(o != c and all(x >= y for x, y in zip(o, c)) for o, _ in scored)]


def _gradescope_root(items: list[Entry]) -> str | None:
    """The export's root (``''`` for the top, else the one folder the whole export is in), by
    where submission_metadata.yml is: at the top, else one level down with every entry under
    that folder. A copy inside a submission folder is never the export's (``gradescope_candidates``
    refuses it); two candidate roots are an IntakeError."""
    metas = [PurePosixPath(e.path) for e in items if PurePosixPath(e.path).name == METADATA]
    if any(len(m.parts) == 1 for m in metas):
        return ""
    wrapped = sorted({m.parts[0] for m in metas if len(m.parts) == 2})
    if not wrapped:
        return None
    if len(wrapped) > 1:
        raise IntakeError(
            f"{METADATA} is in {len(wrapped)} folders ({', '.join(wrapped[:5])}): which is the export? "
            f"Give Gradescope's export as it came, one at a time"
        )
    outside = [e.path for e in items if PurePosixPath(e.path).parts[0] != wrapped[0]]
    if outside:
        raise IntakeError(
            f"{METADATA} is in {wrapped[0]}/, but {len(outside)} file(s) are outside it "
            f"({', '.join(outside[:3])}): give Gradescope's export as it came"
        )
    return wrapped[0]


def detect(source: Path) -> str:
    """``folders`` (the grader's own layout), ``canvas`` or ``gradescope``."""
    source = Path(source)
    if source.is_dir():
        if (
            _gradescope_root(
                [
                    Entry(p.relative_to(source).as_posix(), 0, None)
                    for p in [source / METADATA, *source.glob(f"*/{METADATA}")]
                    if p.is_file()
                ]
            )
            is not None
        ):
            return "gradescope"
        loose = [
            p.name for p in source.iterdir() if p.is_file() and p.name.endswith((".ipynb", "_link.html", "_text.html"))
        ]
        return "canvas" if any(canvas_name(n) for n in loose) else "folders"
    notes: list[str] = []
    items = entries(source, notes)
    if _gradescope_root(items) is not None:
        return "gradescope"
    if any(canvas_name(e.name) for e in items):
        return "canvas"
    raise IntakeError(
        f"{source}: neither Canvas's download (files named name_userid_attachmentid_file) nor "
        f"Gradescope's export (with {METADATA}); unzip it into DIR/<student>/<notebook>.ipynb instead"
    )


# ---------------------------------------------------------------------------------------------
# Which lab a notebook is


def plain_name(filename: str) -> str:
    """``filename`` without the decorations an LMS or a browser adds: ``-2`` and `` (1)``."""
    m = _RESUBMITTED.match(filename)
    return f"{m['stem']}{m['ext']}" if m else filename


def resubmission(filename: str) -> int:
    """The ``-N`` or `` (N)`` a file name carries (0: none)."""
    m = _RESUBMITTED.match(filename)
    return int(m["n"] or m["copy"] or 0) if m else 0


def reference_ids(labs, notebooks: Path) -> dict[str, set]:
    """{lab key: the cell ids of its reference notebook} (empty when it is missing)."""
    out = {}
    for lab in labs:
        try:
            nb = json.loads(lab.reference(notebooks).read_text())
            out[lab.key] = {c.get("id") for c in nb.get("cells", []) if isinstance(c, dict) and c.get("id")}
        except (OSError, ValueError, AttributeError):
            out[lab.key] = set()
    return out


def match_lab(filename: str, data: bytes | None, labs, refs: dict[str, set]):
    """(lab, note) for a submitted file, or (None, why not). By name first (the note says how
    it differed), then by content."""
    by_name = {lab.notebook.lower(): lab for lab in labs}
    lab = by_name.get(plain_name(filename).lower())
    if lab is not None:
        return lab, "" if filename == lab.notebook else f"submitted as {filename!r}, read as {lab.notebook}"
    if not filename.lower().endswith(".ipynb"):
        return None, f"{filename!r} is not a notebook"
    ids = _cell_ids(data)
    shares = sorted(
        ((len(ids & refs.get(lab.key, set())) / len(refs[lab.key]), lab.key) for lab in labs if refs.get(lab.key)),
        reverse=True,
    )
    if shares and shares[0][0] >= MATCH_SHARE and (len(shares) == 1 or shares[1][0] < shares[0][0]):
        lab = next(x for x in labs if x.key == shares[0][1])
        return lab, (
            f"submitted as {filename!r}, which names no lab; graded as {lab.notebook}, whose cells "
            f"it holds ({shares[0][0]:.0%})"
        )
    return None, f"{filename!r} matches no lab by name or by its cells"


def _cell_ids(data: bytes | None) -> set:
    try:
        nb = json.loads(data or b"")
        return {c.get("id") for c in nb.get("cells", []) if isinstance(c, dict) and isinstance(c.get("id"), str)}
    except (ValueError, AttributeError, UnicodeDecodeError):
        return set()


# ---------------------------------------------------------------------------------------------
# People: who submitted, and the grader's name for them


@dataclass
class Person:
    lms: str  # canvas | gradescope
    key: str  # the LMS's own id: Canvas's user id, Gradescope's sid or email
    name: str  # as the LMS shows it
    ids: dict = field(default_factory=dict)  # canvas_user_id / canvas_name, or sid / email
    roster: dict | None = None  # the roster's row, when found
    conflict: str = ""  # another submitter gives the same id: matched to the roster by email alone


def find_in_roster(person: Person, index: dict) -> dict | None:
    """The roster row of ``person`` (``index``: ``exports.roster_index``). Canvas's user id is
    matched to the ``ID`` column alone: another student's SIS User ID of the same digits is not them."""
    if person.lms == "canvas":
        uid = str(person.ids.get("canvas_user_id") or "").strip()
        return next((row for row in index.values() if uid and (row.get("ID") or "").strip() == uid), None)
    tries = [
        None if person.conflict else person.ids.get("sid"),
        person.ids.get("email"),
        (person.ids.get("email") or "").split("@")[0],
    ]
    for value in tries:
        if value and str(value).strip().lower() in index:
            return index[str(value).strip().lower()]
    return None


def folder_name(person: Person) -> str:
    """The student's folder: the roster's SIS Login ID, SIS User ID or ID, else the LMS's name."""
    candidates = ([person.roster.get(k) for k in ("SIS Login ID", "SIS User ID", "ID")] if person.roster else []) + (
        [person.ids.get("canvas_name"), person.ids.get("canvas_user_id")]
        if person.lms == "canvas"
        else [person.ids.get("sid"), person.ids.get("email"), person.key]
    )
    for c in candidates:
        safe = _safe(c)
        if safe:
            return safe
    return _safe(f"{person.lms}-{person.key}") or person.lms


def _safe(text) -> str:
    """``text`` as one plain path component (letters, digits, . _ @ + -), or ''."""
    return _SAFE.sub("-", str(text or "").strip()).strip("-._")[:100]


# ---------------------------------------------------------------------------------------------
# Candidates: one submitted file each


@dataclass
class Candidate:
    person: Person
    entry: Entry
    filename: str  # the file's own name (without Canvas's prefix)
    order: tuple  # larger is later
    late: bool = False
    late_seconds: float | None = None
    submitted_at: str | None = None
    marker: str = ""
    canvas_prefix: str = ""
    notes: list = field(default_factory=list)
    group: list = field(default_factory=list)  # the other submitters' person keys (a group submission)
    kind: str = "file"  # Canvas's kind of entry: file, link or text (``ENTRIES``)


def canvas_candidates(
    items: list[Entry], notes: list[str], known_ids: set | None = None, labs=(), ambiguous: list | None = None
) -> list[Candidate]:
    """A candidate per file of Canvas's download, its student read as ``resolve_readings`` reads
    them (``known_ids``: the roster's and the group set's user ids); a file whose name still reads
    several ways is graded as no one: it is noted, and listed in ``ambiguous``."""
    readings = {}
    for e in items:
        found = canvas_readings(e.name) if "/" not in e.path else []
        if found:
            readings[e.path] = found
        else:
            notes.append(f"not graded: {e.path} (not named as Canvas names a submitted file)")
    left = resolve_readings(readings, set(known_ids or ()), {lab.notebook.lower() for lab in labs})
    people: dict[str, Person] = {}
    out = []
    for e in items:
        if e.path not in left:
            continue
        if len(left[e.path]) != 1:
            shown = left[e.path] or readings[e.path]
            notes.append(
                f"not graded: {e.path} (its name reads {len(shown)} ways: "
                + "; ".join(f"as {r.describe()}" for r in shown)
                + "; neither the roster's user ids, the lab's file name nor the student's other files tell "
                "which: open each user id on Canvas (.../courses/<course>/users/<user id>) to see who handed "
                "it in, then grade their file laid out as DIR/<student>/<lab notebook>.ipynb into the same "
                "--out"
                + ("" if known_ids else ", or give the roster (ROSTER=, --roster), whose user ids may tell")
                + ")"
            )
            if ambiguous is not None:
                ambiguous.append({"file": e.path, "readings": [asdict(r) for r in shown]})
            continue
        parts = left[e.path][0]
        ids = (
            {"canvas_anon_id": parts.anonymous_id, "canvas_name": parts.name}
            if parts.anonymous_id
            else {"canvas_user_id": parts.user_id, "canvas_name": parts.name}
        )
        key = f"anon:{parts.anonymous_id}" if parts.anonymous_id else parts.user_id
        person = people.setdefault(key, Person("canvas", key, parts.name, ids))
        out.append(
            Candidate(
                person,
                e,
                parts.original,
                (int(parts.attachment_id or 0), resubmission(parts.original)),
                late=parts.late,
                marker="Canvas's LATE mark" if parts.late else "",
                canvas_prefix=parts.prefix,
                kind=parts.kind,
            )
        )
        if len(readings[e.path]) > 1:
            out[-1].notes.append(
                f"its name also reads as {', '.join(r.describe() for r in readings[e.path] if r is not parts)}; "
                f"read as {parts.describe()}"
            )
    return out


def canvas_group_candidates(found: list[Candidate], members: dict, notes: list[str]) -> list[Candidate]:
    """A group's file (named after the group, with the user id of the member who handed it in)
    laid out for every member of the group set ``members`` (``groups.read_group_set``), each
    naming the others, as Gradescope's groups are."""
    from labkit.grading.submissions.groups import mates

    if any(c.person.ids.get("canvas_anon_id") for c in found):
        notes.append("the group set is not applied to anonymous files: they carry no Canvas user id")
    people = {c.person.key: c.person for c in found}
    out = []
    for c in found:
        group = mates(members, c.person.ids.get("canvas_user_id", ""))
        if not group:
            out.append(c)
            continue
        for m in group:
            person = people.setdefault(m.user_id, Person("canvas", m.user_id, m.name, {"canvas_user_id": m.user_id}))
            person.name = m.name or person.name  # the handed-in file is named after the group, not its member
            person.ids["canvas_name"] = m.login_id or _canvas_slug(m.name) or person.ids.get("canvas_name", "")
            others = [o for o in group if o is not m]
            out.append(
                replace(
                    c,
                    person=person,
                    notes=[
                        *c.notes,
                        f"a group submission with {', '.join(o.name or o.user_id for o in others)} "
                        f"({m.group_name} in Canvas's group set)",
                    ],
                    group=[o.user_id for o in others],
                )
            )
    return out


def _canvas_slug(name: str) -> str:
    """A name as Canvas writes it in a download's file names: lower case, word characters only."""
    return re.sub(r"\W", "", name).lower()


def gradescope_candidates(items: list[Entry], notes: list[str], due: dt.datetime | None) -> list[Candidate]:
    root = _gradescope_root(items)
    meta_entry = next(e for e in items if e.path == (f"{root}/{METADATA}" if root else METADATA))
    meta = read_metadata(meta_entry.read())
    people: dict[str, Person] = {}
    out = []
    folders = {}
    for e in items:
        rel = PurePosixPath(e.path).parts[1:] if root else PurePosixPath(e.path).parts
        if e is meta_entry:
            continue
        if PurePosixPath(e.path).name == METADATA:
            notes.append(f"not read: {e.path} (a {METADATA} inside a submission folder is not the export's)")
        elif len(rel) < 2:
            notes.append(f"not graded: {e.path} (not in a submission folder)")
        elif len(folders.setdefault(rel[0], [])) >= MAX_FILES:
            notes.append(f"not read: {e.path} (over the {MAX_FILES} files read of one submission)")
        else:
            folders[rel[0]].append(e)
    for folder in sorted(set(folders) - set(meta)):
        notes.append(f"not graded: {folder}/ ({METADATA} names no such submission)")
    conflicts = _sid_conflicts(meta)
    for sub_id, info in meta.items():
        submitters = info.get(":submitters") or []
        if not submitters:
            notes.append(f"not graded: {sub_id} ({METADATA} names no submitter)")
            continue
        if not isinstance(submitters, list) or (bad := _bad_submitter(submitters)):
            notes.append(
                f"not graded: {sub_id} ({METADATA}: {bad if isinstance(submitters, list) else ':submitters is not a list'})"
            )
            continue
        created = _when(info.get(":created_at"))
        late_s = (created - due).total_seconds() if created and due else None
        for s in submitters:
            sid, email, name = _text(s.get(":sid")), _text(s.get(":email")), _text(s.get(":name"))
            key = sid or email or f"{sub_id}:{name}"
            clash = conflicts.get(sid)
            if clash:  # one :sid, several people: never merged; each apart, and flagged
                key = f"{sid}:{email or name}"
            person = people.setdefault(key, Person("gradescope", key, name, {"sid": sid, "email": email}))
            person.conflict = clash or ""
            group = [_text(o.get(":name")) for o in submitters if o is not s]
            for e in folders.get(sub_id, []):
                c = Candidate(
                    person,
                    e,
                    PurePosixPath(e.path).name,
                    (created.timestamp() if created else 0.0, _number(sub_id), resubmission(e.name)),
                    late=late_s is not None and late_s > 0,
                    late_seconds=late_s if late_s and late_s > 0 else None,
                    submitted_at=created.isoformat() if created else None,
                    marker=f"Gradescope's :created_at {created.isoformat()} is after the due date {due.isoformat()}"
                    if late_s and late_s > 0
                    else "",
                )
                if group:
                    c.notes.append(f"a group submission with {', '.join(group)}")
                    c.group = [
                        _text(o.get(":sid")) or _text(o.get(":email")) or f"{sub_id}:{_text(o.get(':name'))}"
                        for o in submitters
                        if o is not s
                    ]
                if clash:
                    c.notes.append(f"flagged: {clash}")
                out.append(c)
        if sub_id not in folders:
            notes.append(f"not graded: {sub_id} (no folder of it in the export)")
    return out


def _sid_conflicts(meta: dict) -> dict[str, str]:
    """{sid: what to say} for every :sid given by submitters with different names or emails."""
    seen: dict[str, set] = {}
    for info in meta.values():
        for s in info.get(":submitters") or [] if isinstance(info.get(":submitters"), list) else []:
            if isinstance(s, dict) and _text(s.get(":sid")):
                seen.setdefault(_text(s.get(":sid")), set()).add((_text(s.get(":name")), _text(s.get(":email"))))
    return {
        sid: (
            f":sid {sid} is given by {len(who)} different submitters ("
            + "; ".join(f"{n or '?'} <{e or '?'}>" for n, e in sorted(who))
            + "): graded apart, not merged; "
            "check who is who on Gradescope"
        )
        for sid, who in seen.items()
        if len(who) > 1
    }


def _bad_submitter(submitters: list) -> str:
    """Why a submission's :submitters cannot be read ('' when they can): each a mapping whose
    :name, :sid and :email are short texts (or numbers)."""
    for s in submitters:
        if not isinstance(s, dict):
            return "a submitter is not a mapping"
        for k in (":name", ":sid", ":email"):
            v = s.get(k)
            if v is not None and (not isinstance(v, (str, int)) or isinstance(v, bool) or len(str(v)) > MAX_FIELD):
                return f"a submitter's {k} is not a text of at most {MAX_FIELD} characters"
    return ""


def _no_aliases():
    """A YAML safe loader that refuses anchors' aliases (a 484-byte alias bomb took 964 MB):
    Gradescope's export has none."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    "holds a YAML alias (*name), which Gradescope's export never has",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)

    return Loader


def read_metadata(data: bytes) -> dict:
    """Gradescope's submission_metadata.yml as {submission id: its mapping}."""
    import yaml

    try:
        meta = yaml.load(data.decode("utf-8"), Loader=_no_aliases())
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        raise IntakeError(
            f"{METADATA} is not readable YAML ({e}); export the submissions from Gradescope again"
        ) from None
    if not isinstance(meta, dict) or not all(isinstance(v, dict) for v in meta.values()):
        raise IntakeError(
            f"{METADATA} does not map submission folders to their submitters; is this Gradescope's export?"
        )
    return {str(k): v for k, v in meta.items()}


def _text(v) -> str:
    return "" if v is None else str(v).strip()


def _number(text: str) -> int:
    found = re.findall(r"[0-9]+", text)
    return int(found[-1]) if found else 0


def _when(value) -> dt.datetime | None:
    """A Gradescope timestamp (YAML's datetime, or its text) as an aware datetime (UTC if it says none)."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, str) and value.strip():
        return parse_time(value)
    return None


def parse_time(text: str, local: bool = False) -> dt.datetime:
    """An ISO-8601 time (``2024-10-01T23:59:00-07:00``, or Gradescope's ``2024-10-01 06:58:05.7 Z``);
    without a zone it is UTC (Gradescope's own), or this machine's time zone with ``local`` (a
    due date as an instructor writes it)."""
    t = re.sub(r"\s*Z$", "+00:00", text.strip())
    t = re.sub(r"(\.\d{6})\d+", r"\1", t)
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise IntakeError(f"{text!r} is not a date and time; write it as 2024-10-01T23:59:00-07:00") from None
    if when.tzinfo:
        return when
    return when.astimezone() if local else when.replace(tzinfo=dt.timezone.utc)


# ---------------------------------------------------------------------------------------------
# The import


@dataclass
class Intake:
    """What an import did: the folder it wrote and its record (``intake.json``)."""

    folder: Path
    record: dict

    @property
    def students(self) -> dict:
        return self.record["students"]


def import_download(
    source,
    dest,
    labs,
    notebooks="notebooks",
    roster: list[dict] | None = None,
    due: str | None = None,
    log=print,
    groups: dict | None = None,
) -> Intake:
    """Lay out Canvas's or Gradescope's download ``source`` (zip or folder) as
    ``dest/<student>/<lab notebook>.ipynb`` with ``dest/intake.json``; ``dest`` is replaced.
    ``groups``: Canvas's group set (``groups.read_group_set``), for a group assignment's download."""
    import shutil

    from labkit.grading.gradebook.exports import roster_index

    source, dest = Path(source), Path(dest)
    layout = detect(source)
    if layout == "folders":
        raise IntakeError(f"{source} is already laid out as DIR/<student>/<notebook>.ipynb; grade it as it is")
    notes: list[str] = []
    items = entries(source, notes)
    due_at = parse_time(due, local=True) if due else None
    ambiguous: list[dict] = []  # files whose Canvas name reads several ways: graded as no one
    if layout == "canvas":
        known = {(row.get("ID") or "").strip() for row in roster or []} | set(groups or {})
        found = canvas_candidates(items, notes, known - {""}, labs, ambiguous)
    else:
        found = gradescope_candidates(items, notes, due_at)
    if layout == "canvas" and groups:
        found = canvas_group_candidates(found, groups, notes)
    elif groups:
        notes.append("the group set is for Canvas's downloads; Gradescope's export names each group's members itself")
    if layout == "canvas" and due:
        notes.append("--due is not used for Canvas: its download marks late files itself (LATE)")
    if layout == "gradescope" and not due:
        notes.append(NO_DUE)
        log(f"note: {NO_DUE}")
    index = roster_index(roster) if roster else {}
    names = _name_people({c.person.key: c.person for c in found}.values(), index, notes)
    refs = reference_ids(labs, Path(notebooks))
    chosen, extra = _choose(found, labs, refs, notes)
    if dest.exists() and any(dest.iterdir()) and not (dest / RECORD).is_file():
        raise IntakeError(f"{dest} is not empty and no import wrote it; give a new or empty folder to import into")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    students: dict[str, dict] = {}
    for (person_key, lab_key), (c, lab, how, others) in sorted(chosen.items()):
        student = names[person_key]
        _write(dest / student / lab.notebook, c.entry.read())
        entry = students.setdefault(student, {"person": _person_record(c.person), "labs": {}})
        entry["labs"][lab.key] = {
            "file": c.filename,
            "submitted_as": c.entry.path,
            "late": c.late,
            "late_seconds": c.late_seconds,
            "submitted_at": c.submitted_at,
            "marker": c.marker,
            "canvas_prefix": c.canvas_prefix,
            "notes": [n for n in [how, *c.notes, _others(others)] if n],
            **({"group": sorted(names[k] for k in c.group if k in names)} if c.group else {}),
        }
    for c, why in extra:  # listed, never copied: a student's folder holds the notebooks graded
        student = names[c.person.key]
        (dest / student).mkdir(parents=True, exist_ok=True)  # a row for them all the same, saying what came
        entry = students.setdefault(student, {"person": _person_record(c.person), "labs": {}})
        entry.setdefault("received", []).append({"file": ENTRIES.get(c.kind, c.filename), "why": why})
        notes.append(f"{student}: not graded: {c.entry.path} ({why})")
    record = {
        "version": 1,
        "lms": layout,
        "source": str(source.resolve()),
        "due": due_at.isoformat() if due_at else None,
        "imported": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "students": students,
        "notes": notes,
        **({"ambiguous": ambiguous} if ambiguous else {}),
    }
    (dest / RECORD).write_text(json.dumps(record, indent=1))
    late = sum(1 for s in students.values() for v in s["labs"].values() if v["late"])
    log(
        f"imported {sum(len(s['labs']) for s in students.values())} notebook(s) of {len(students)} student(s) from "
        f"{layout.title()}'s download {source.name} into {dest}"
        + (f"; {late} late" if late else "")
        + (f"; {len(ambiguous)} file(s) whose Canvas name reads two ways NOT graded" if ambiguous else "")
        + (f"; {len(notes)} note(s) in {dest / RECORD}" if notes else "")
    )
    return Intake(dest, record)


def _name_people(people, index: dict, notes: list[str]) -> dict[str, str]:
    """{person key: folder name}, unique even where case is not (macOS, Windows); roster matches
    first. Anonymous ids keep their case: two that differ only in it (``anon_AbCdE``, ``anon_abcde``)
    are two people, and each folder gets ``-`` and 6 hex digits of its id's SHA-256."""
    people = sorted(people, key=lambda p: (p.lms, p.key))
    for p in people:
        p.roster = find_in_roster(p, index) if index else None
        if index and p.roster is None:
            notes.append(f"{p.name or p.key} ({p.lms} id {p.key}) is not in the roster")
    wanted = {p.key: folder_name(p) for p in people}
    anon = [wanted[p.key].lower() for p in people if p.ids.get("canvas_anon_id")]
    out, taken = {}, {}
    for p in people:
        name = wanted[p.key]
        if p.ids.get("canvas_anon_id") and anon.count(name.lower()) > 1:
            name = f"{name}-{_tag(p.key)}"
        if name.lower() in taken:
            other = name
            name = _safe(f"{name}-{p.key}")
            if name.lower() in taken:
                name = f"{other}-{_tag(p.key)}"
            notes.append(
                f"{p.name or p.key} ({p.lms} id {p.key}) and {taken[other.lower()]} would share the folder "
                f"{other!r}; this one is {name!r}"
            )
        taken[name.lower()] = f"{p.name or p.key} ({p.lms} id {p.key})"
        out[p.key] = name
    return out


def _tag(key: str) -> str:
    """6 hex digits of ``key``'s SHA-256: a suffix that tells apart ids differing only in case."""
    return hashlib.sha256(key.encode()).hexdigest()[:6]


def _choose(found: list[Candidate], labs, refs, notes) -> tuple[dict, list]:
    """({(person, lab): (latest candidate, how it matched, the others)}, [(candidate, why not graded)])."""
    by: dict[tuple, list] = {}
    extra = []
    for c in found:
        if c.kind != "file":  # a URL or a text entry: the student's, and nothing the grader runs
            extra.append((c, f"{ENTRIES[c.kind]}, not a notebook: the lab expects its notebook file"))
            continue
        lab, how = match_lab(c.filename, c.entry.read() if c.filename.lower().endswith(".ipynb") else None, labs, refs)
        if lab is None:
            extra.append((c, how))
        else:
            exact = c.filename == lab.notebook
            by.setdefault((c.person.key, lab.key), []).append((c.order, exact, c, lab, how))
    chosen = {}
    for key, options in by.items():
        options.sort(key=lambda o: (o[0], o[1]))
        *older, (_, _, c, lab, how) = options
        chosen[key] = (c, lab, how, [o[2] for o in older])
    return chosen, extra


def _others(older: list[Candidate]) -> str:
    if not older:
        return ""
    return f"the latest of {len(older) + 1} files for this lab; not graded: " + ", ".join(
        c.entry.path for c in reversed(older)
    )


def _person_record(p: Person) -> dict:
    return {
        "lms": p.lms,
        "id": p.key,
        "name": p.name,
        **{k: v for k, v in p.ids.items() if v},
        "roster": {k: p.roster.get(k, "") for k in ("Student", "ID", "SIS User ID", "SIS Login ID")}
        if p.roster
        else None,
    }


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def read_record(folder) -> dict:
    """The ``intake.json`` of a submissions folder ({} when it has none)."""
    try:
        data = json.loads((Path(folder) / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("students"), dict) else {}


def digest(source: Path) -> str:
    """A short hash of a download's content (its files' names and bytes), to name its import."""
    h = hashlib.sha256()
    notes: list[str] = []
    for e in sorted(entries(source, notes), key=lambda e: e.path):
        h.update(e.path.encode() + b"\0" + e.read() + b"\0")
    return h.hexdigest()[:10]


# ---------------------------------------------------------------------------------------------
# The grader's own layout: a notebook under another name


def find_notebook(folder: Path, lab, labs, refs: dict[str, set]) -> tuple[Path | None, str]:
    """(the file of ``lab`` in a student's ``folder``, the note when it is not ``lab.notebook``).
    A file named like it (`` (1)``, ``-2``, another case) counts first, the latest (highest
    number) of several; else the one notebook that holds the lab's cells."""
    exact = folder / lab.notebook
    if exact.is_file() or exact.is_symlink():
        return exact, ""
    files = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.is_symlink())
    named = [p for p in files if plain_name(p.name).lower() == lab.notebook.lower()]
    if named:
        best = max(named, key=lambda p: resubmission(p.name))
        rest = [p.name for p in named if p != best]
        return best, (
            f"submitted as {best.name!r}, read as {lab.notebook}"
            + (f"; the latest of {len(named)} (not graded: {', '.join(rest)})" if rest else "")
        )
    others = [p for p in files if match_lab(p.name, None, labs, {})[0] is None]
    hits = [
        (p, note)
        for p in others
        if (m := match_lab(p.name, _head(p), labs, refs))[0] is not None and m[0].key == lab.key
        for note in [m[1]]
    ]
    return hits[0] if len(hits) == 1 else (None, "")


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(_cap())
