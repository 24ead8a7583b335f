"""Pages rendered once: a page is written again only when what it shows has changed.

Every command rebuilds the reports, and a page may cost its whole CPU limit (a deeply nested
output), so rendering every page each time made a merge that changed nothing take minutes.
Instead, what a page is made of (for a feedback page: the signed run it shows, its rows with the
TAs' scores and comments, the lab's check descriptions, the batch's warning, the page's limits)
and the renderer itself (the kit's code, its page templates, the libraries that convert a
notebook: ``renderer``) reduce to a key (``key``). An ``Entry`` keeps, in the grader's own folder
(``.grader``, which no run can reach), the key a page was last written for, how it ended (rendered,
or the fallback page after its limits) and the page file's hash, signed with the grader's key
(``ledger.sign``). A page whose entry holds, names the same key and hashes to the file on disk is
not rendered again, a fallback included: a page past its limits costs them once per change of what
it shows. A page removed or edited, or an entry changed, unsigned or copied, renders again.
``summary.html`` keeps an entry too (``stats.write_html``): its figures are drawn once per change.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).parents[1] / "templates"
# what turns a notebook and its rows into a page, besides the kit's own code and templates
LIBRARIES = ("nbconvert", "nbformat", "mistune", "latex2mathml", "pygments", "jinja2", "markupsafe", "nh3")
RENDERED, FELL_BACK = "rendered", "fell back"
RECORD = "page.json"  # in a run's .grader folder: what its feedback page was last written for
SUMMARY = "summary.json"  # in the output folder's .grader: what summary.html was last written for


@functools.lru_cache(maxsize=1)
def renderer() -> str:
    """The renderer's version: the kit's code, its templates and the converting libraries' versions."""
    from importlib import metadata

    from labkit.grading.run import ledger

    h = hashlib.sha256(ledger.kit_hash().encode())
    for p in sorted(q for q in TEMPLATES.rglob("*") if q.is_file()):
        h.update(b"\0" + p.relative_to(TEMPLATES).as_posix().encode() + b"\0" + p.read_bytes())
    for name in LIBRARIES:
        try:
            h.update(f"\0{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"\0{name} absent".encode())
    return h.hexdigest()[:16]


def key(*inputs) -> str:
    """The key of a page made of ``inputs`` by this renderer. They are taken as they read back
    from JSON (as the gradebook stores a run), so a run just recorded and the same run read back
    from the gradebook give one key."""
    plain = json.loads(json.dumps([renderer(), *inputs], default=str))
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha(path: Path) -> str | None:
    """The SHA-256 of the file at ``path`` (None: none there, or not a regular file)."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


@dataclass(frozen=True)
class Entry:
    """What one page was last written for: ``record`` (a file in ``.grader``) vouches for ``page``
    under ``context`` (whose page it is: an entry of one student's page is not another's)."""

    record: Path
    page: Path
    context: str
    key: str

    def read(self) -> dict | None:
        """The record, when it is the grader's (signed for this context) and names this page."""
        from labkit.grading.run import ledger

        try:
            data = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        body = {k: v for k, v in data.items() if k != ledger.SIGNATURE}
        if not ledger.verify(body, data.get(ledger.SIGNATURE), self._context()):
            return None
        return body

    def current(self) -> str | None:
        """How the page on disk ended (``RENDERED``, ``FELL_BACK``) when it is the one written for
        this key (its record holds, names this key, and the file hashes as it did when written);
        None when it must be written again."""
        held = self.read()
        if held is None or held.get("key") != self.key or held.get("sha256") != file_sha(self.page):
            return None
        return str(held.get("ended") or RENDERED)

    def keep(self, ended: str) -> None:
        """Record that the page now on disk was written for this key and ended so."""
        from labkit.grading.gradebook.report import write_text
        from labkit.grading.run import ledger

        body = {"key": self.key, "sha256": file_sha(self.page), "ended": ended, "page": self.page.name}
        self.record.parent.mkdir(parents=True, exist_ok=True)
        write_text(self.record, json.dumps({**body, ledger.SIGNATURE: ledger.sign(body, self._context())}))

    def _context(self) -> str:
        return f"page\0{self.context}\0{self.page.name}"
