"""A hostile class graded end to end, and every page it gets opened in headless Chromium.

The corpus of ``_hostile.py`` sits in every place a student controls: Markdown cells, math, cell
attachments, an analysis answer, ``text/html``, ``text/markdown``, ``text/latex`` and
``image/svg+xml`` outputs, a notebook's file name and a student folder's name; a second student
copies the first (so the similarity report shows the payloads too), and a third answers with a
spreadsheet formula. The class is graded, the TA pages exported and a score merged (the pages
rebuilt). Then every ``.html`` file the grader wrote is

- audited element by element in Python (``_hostile.audit``), and
- opened in Chromium twice: under its Content-Security-Policy, and with the policy bypassed
  (so the allow-list alone must hold). Every payload points at a local server that logs hits;
  the test asserts that no page navigates, that no request leaves the page (Playwright's request
  events, and the server's log), that every element and attribute in the live DOM is on the
  allow-list, that nothing is positioned over the page (fixed, absolute or sticky), that the fake
  grades stay below the real one, and that clicking every link keeps the page where it is.

Every CSV the grader wrote is read back raw: no cell starts a formula, and no cell (nor
summary.md) holds a control character of the student who wrote terminal escapes and bidi
controls into an answer and an exception. An output nested 9,000 deep is a page like the others,
flattened with a note.
"""

from __future__ import annotations

import csv
import http.server
import json
import os
import threading
from pathlib import Path

import nbformat
import pytest

from _hostile import FAKE, audit, hostile_notebook
from helpers import runs_at_once
from labkit.grading.pages import sanitize
from labkit.grading.run.sandbox import SANDBOXES

pytestmark = [pytest.mark.notebook, pytest.mark.browser]
CHROMIUM = os.environ.get("LABKIT_CHROMIUM", "/usr/bin/chromium")
NO_SANDBOX = SANDBOXES["bwrap"].unavailable()

RUBRIC = """
[defaults]
cell_timeout = 60
notebook_timeout = 180
start_timeout = 90
memory_mb = 1500

[labs.evil]
notebook = "evil.ipynb"
title = "Evil <b>lab</b>"
[[labs.evil.checks]]
name = "ok recorded"
kind = "record"
points = 1
record = "ok"
description = "the record <i>ok</i> exists"
[[labs.evil.checks]]
name = "answer Q1"
kind = "analysis"
points = 2
cells = ["hostile-answer"]
"""
MISNAMED = "<img src=x onerror=alert(1)>.ipynb"
ESCAPES = "\x1b[1A\x1b[2K\r[1/6] mallory/evil.ipynb: timeout, 0/3 points\n\u202e3/3\u202c\x1b[8m"
DEEP = "from IPython.display import HTML, display\ndisplay(HTML('<div>' * 9000 + 'deep' + '</div>' * 9000))"


class _Hits(http.server.BaseHTTPRequestHandler):
    hits: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def beacon():
    """A local server that logs every request (the payloads' target); its port is the OS's pick."""
    hits = []
    handler = type("Hits", (_Hits,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hit", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, beacon):
    """The class graded, its TA pages exported, a score merged: the output folder."""
    from labkit.grading.grade import GradeOptions, grade
    from labkit.grading.gradebook.publish import export_answers, merge_scores

    if NO_SANDBOX:
        pytest.skip(f"{NO_SANDBOX} (.ci/run installs it)")
    url, _ = beacon
    root = tmp_path_factory.mktemp("hostile")
    (root / "notebooks").mkdir()
    nbformat.write(hostile_notebook(url), str(root / "notebooks" / "evil.ipynb"))
    (root / "rubric.toml").write_text(RUBRIC)
    subs = root / "subs"
    for student in ("mallory", "mallory2", "formula", "escapes", "deep"):
        (subs / student).mkdir(parents=True)
        nb = hostile_notebook(url)
        if student == "formula":
            next(c for c in nb.cells if c.id == "hostile-answer").source = f'=HYPERLINK("{url}/csv","my grade")'
        elif student == "escapes":  # terminal escapes and bidi controls in an answer and an exception
            next(c for c in nb.cells if c.id == "hostile-answer").source = ESCAPES
            nb.cells.append(nbformat.v4.new_code_cell(f"raise RuntimeError({ESCAPES!r})", id="hostile-raise"))
        elif student == "deep":  # an output nested as deep as it likes
            nb.cells.append(nbformat.v4.new_code_cell(DEEP, id="hostile-deep"))
        nbformat.write(nb, str(subs / student / "evil.ipynb"))
    (subs / "misnamed").mkdir()
    nbformat.write(hostile_notebook(url), str(subs / "misnamed" / MISNAMED))
    for refused in ("+cmd", "x<b>y"):
        (subs / refused).mkdir()
        nbformat.write(hostile_notebook(url), str(subs / refused / "evil.ipynb"))
    out = root / "out"
    grade(
        GradeOptions(root / "rubric.toml", subs, out, parallel=runs_at_once(2), notebooks=root / "notebooks"),
        log=lambda m: None,
    )
    export_answers(out, log=lambda m: None)
    q1 = out / "answers" / "evil" / "answer-q1.csv"
    with open(q1, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["student"] == "mallory":
            r["score"], r["comment"] = "1", "@see me"
    scored = root / "ta-answer-q1.csv"  # the TA's copy (the grader's own CSVs are checked below)
    with open(scored, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    merge_scores(out, [scored], log=lambda m: None)
    return out


def _pages(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*.html") if not {".grader", ".work"} & set(p.relative_to(out).parts))


@pytest.mark.slow
def test_every_page_kind_is_written_and_clean(hostile, beacon):
    url, _ = beacon
    pages = _pages(hostile)
    names = {p.relative_to(hostile).as_posix() for p in pages}
    assert {
        "mallory/evil.html",
        "mallory2/evil.html",
        "formula/evil.html",
        "misnamed/evil.html",
        "similarity.html",
        "answers/evil/answer-q1.html",
    } <= names, names
    for p in pages:
        text = p.read_text()
        assert audit(text, url) == [], (p, audit(text, url))
    mallory = (hostile / "mallory" / "evil.html").read_text()
    assert FAKE in mallory and "the record &lt;i&gt;ok&lt;/i&gt; exists" in mallory
    assert "scored by a TA: @see me" in mallory
    assert "<img src=x onerror=alert(1)>" not in (hostile / "misnamed" / "evil.html").read_text()
    assert "mallory2" in (hostile / "similarity.html").read_text()
    q1 = (hostile / "answers" / "evil" / "answer-q1.html").read_text()
    assert "flagged: this answer matches mallory2" in q1


@pytest.mark.slow
def test_no_csv_cell_starts_a_formula(hostile):
    from labkit.grading.gradebook.csvsafe import TRIGGERS, _NUMBER

    seen = set()
    for path in sorted(hostile.rglob("*.csv")):
        with open(path, newline="") as f:
            for row in csv.reader(f):
                for cell in row:
                    seen.add(cell[:1])
                    assert cell[:1] not in TRIGGERS or _NUMBER.fullmatch(cell), (path, cell)
    answers_csv = (hostile / "answers" / "evil" / "answer-q1.csv").read_text()
    assert "'=HYPERLINK(" in answers_csv and "'+cmd" in (hostile / "grades.csv").read_text()
    assert "'" in seen


@pytest.mark.slow
def test_every_csv_and_summary_md_is_inert(hostile):
    from labkit.core import inert

    written = sorted(hostile.rglob("*.csv")) + [hostile / "summary.md"]
    for path in written:
        assert inert.is_inert(path.read_text(encoding="utf-8")), path
    answers_csv = (hostile / "answers" / "evil" / "answer-q1.csv").read_text()
    assert '"\\x1b[1A\\x1b[2K\n[1/6] mallory/evil.ipynb: timeout' in answers_csv  # shown, as text (CR: a newline)
    assert "\\u202e3/3" in answers_csv and "RuntimeError: \\x1b[1A" in (hostile / "summary.md").read_text()


@pytest.mark.slow
def test_a_deeply_nested_output_is_flattened_with_a_note(hostile):
    from labkit.grading.pages import nesting

    page = (hostile / "deep" / "evil.html").read_text()
    assert nesting.NOTE.format(nesting.MAX_DEPTH) in page and "deep" in page


# ------------------------------------------------------------------------------------- Chromium

LIVE_DOM = """() => [...document.querySelectorAll('*')].map(e => [e.localName,
    [...e.attributes].map(a => [a.name, a.value]), getComputedStyle(e).position,
    e.namespaceURI])"""

FAKES_BELOW = """(fake) => {
    const visible = (e) => {          // its box, clipped by every ancestor that clips
        let r = e.getBoundingClientRect(), [t, l, b, rr] = [r.top, r.left, r.bottom, r.right];
        for (let a = e.parentElement; a; a = a.parentElement) {
            if (getComputedStyle(a).overflow !== 'visible') {
                const c = a.getBoundingClientRect();
                [t, l, b, rr] = [Math.max(t, c.top), Math.max(l, c.left), Math.min(b, c.bottom), Math.min(rr, c.right)];
            }
        }
        return {top: t, left: l, bottom: b, right: rr, empty: b <= t || rr <= l};
    };
    const inside = (box, x, y) => {
        const hit = document.elementFromPoint(x, y);
        return !hit || hit === box || box.contains(hit);
    };
    window.scrollTo(0, 0);
    const head = document.querySelector('main > section, h1');
    const h = head.getBoundingClientRect();
    const bad = [];
    for (const e of document.querySelectorAll('body *')) {    // no fake grade shows above the real one
        if (e.childElementCount === 0 && e.textContent.includes(fake)) {
            const v = visible(e);
            if (!v.empty && v.top < h.bottom) bad.push([e.localName, e.textContent.slice(0, 40), v.top, h.bottom]);
        }
    }
    let covered = false;                                        // nothing is drawn over the real grade
    for (let i = 1; i < 8; i++) for (let j = 1; j < 5; j++)
        covered = covered || !inside(head, h.left + i * h.width / 8, h.top + j * h.height / 5);
    const spilled = [];                                         // nor over another cell of a table
    for (const td of document.querySelectorAll('td')) {
        td.scrollIntoView({block: 'center'});
        const r = td.getBoundingClientRect();
        if (r.width > 4 && r.height > 4 && !inside(td, r.left + r.width / 2, r.top + Math.min(r.height / 2, 8)))
            spilled.push(td.textContent.slice(0, 60));
    }
    window.scrollTo(0, 0);
    return {bad, covered, spilled};
}"""


OPEN_AT_ONCE = 8  # pages loaded side by side: each waits for its refreshes and late scripts at the same time


class _Visit:
    """One page opened in a context of its own, what it requested and where it went."""

    def __init__(self, browser, path: Path, bypass_csp: bool):
        self.path, self.uri = path, path.as_uri()
        self.context = browser.new_context(bypass_csp=bypass_csp)
        self.page = self.context.new_page()
        self.requests, self.navigations, self.result = [], [], None
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("framenavigated", lambda f: self.navigations.append(f.url))

    def load(self) -> None:
        from playwright.sync_api import Error as PlaywrightError

        try:
            self.page.goto(self.uri, wait_until="domcontentloaded", timeout=30_000)
        except PlaywrightError as e:  # a script or a refresh took the page elsewhere while it loaded
            self.result = {
                "requests": self.requests,
                "navigations": self.navigations + [str(e).splitlines()[0]],
                "moved": [self.page.url],
                "dom": [],
                "fakes": None,
            }

    def inspect(self) -> None:
        """Once its refreshes, lazy images and delayed scripts had their time: read it, click what can be clicked."""
        from playwright.sync_api import Error as PlaywrightError

        if self.result is not None:
            return
        self.where = self.page.url
        if self.where.split("#")[0] != self.uri:  # it navigated away on its own
            self.result = {"requests": self.requests, "navigations": self.navigations, "moved": [self.where]}
            self.result.update(dom=[], fakes=None)
            return
        self.dom = self.page.evaluate(LIVE_DOM)
        self.fakes = self.page.evaluate(FAKES_BELOW, FAKE)
        for selector in ("a", "summary", "button", "input"):  # a synthetic click activates what a real one would
            for i in range(self.page.locator(selector).count()):
                try:
                    self.page.locator(selector).nth(i).dispatch_event("click", timeout=5000)
                except PlaywrightError as e:  # the page went away under the click
                    self.navigations.append(f"clicking {selector} #{i}: {str(e).splitlines()[0]}")
                    break

    def finish(self) -> dict:
        if self.result is None:
            self.result = {
                "requests": [u for u in self.requests if not u.startswith(("file:", "data:"))],
                "navigations": [u for u in self.navigations if u.split("#")[0] != self.uri],
                "moved": [u for u in (self.where, self.page.url) if u.split("#")[0] != self.uri],
                "dom": self.dom,
                "fakes": self.fakes,
            }
        return self.result


def _open_all(browser, targets: list[tuple[Path, bool]]) -> list[dict]:
    """Each (page, bypass the policy?) in a context of its own, OPEN_AT_ONCE side by side: the waits
    (1.5 s for a meta refresh of 0 s, a lazy image, a delayed script; 0.5 s after the clicks) are
    spent once per group instead of once per page."""
    results = []
    for first in range(0, len(targets), OPEN_AT_ONCE):
        visits = [_Visit(browser, path, bypass) for path, bypass in targets[first : first + OPEN_AT_ONCE]]
        try:
            for v in visits:
                v.load()
            visits[0].page.wait_for_timeout(1500)  # every page's events are handled while any waits
            for v in visits:
                v.inspect()
            visits[0].page.wait_for_timeout(500)
            results += [v.finish() for v in visits]
        finally:
            for v in visits:
                v.context.close()
    return results


def _live_problems(dom: list) -> list[str]:
    problems = []
    for tag, attrs, position, ns in dom:
        if tag in ("html", "head", "meta", "title", "style", "body"):
            continue
        if tag not in sanitize.TAGS:
            problems.append(f"<{tag}> ({ns}) is not on the allow-list")
        allowed = sanitize.ATTRS["*"] | sanitize.ATTRS.get(tag, set())
        problems += [f"<{tag} {n}={v[:60]!r}>" for n, v in attrs if n not in allowed]
        problems += [f"<{tag} src={v[:60]!r}>" for n, v in attrs if n == "src" and not v.startswith("data:image/")]
        if position in ("fixed", "absolute", "sticky"):
            problems.append(f"<{tag}> is position: {position}")
    return problems


@pytest.mark.slow
def test_no_page_navigates_requests_or_shows_what_is_not_allowed_in_chromium(hostile, beacon):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's browser (apt-get install -y chromium)")
    pytest.importorskip("playwright", reason="pip package playwright is not installed (requirements-test.txt)")
    from playwright.sync_api import sync_playwright

    url, hits = beacon
    seen = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            targets = [(path, bypass) for path in _pages(hostile) for bypass in (False, True)]
            for (path, bypass), got in zip(targets, _open_all(browser, targets)):
                name = f"{path.relative_to(hostile)} ({'policy bypassed' if bypass else 'under its policy'})"
                seen[name] = got
                assert got["requests"] == [] and got["navigations"] == [] and got["moved"] == [], (name, got)
                assert _live_problems(got["dom"]) == [], (name, _live_problems(got["dom"]))
                assert got["fakes"] == {"bad": [], "covered": False, "spilled": []}, (name, got["fakes"])
        finally:
            browser.close()
    assert hits == [], hits
    assert len(seen) == 2 * len(_pages(hostile)) and any(
        any(tag == "math" for tag, *_ in got["dom"]) for got in seen.values()
    )
    (Path(__file__).resolve().parents[2] / "out" / "browser").mkdir(parents=True, exist_ok=True)
    (Path(__file__).resolve().parents[2] / "out" / "browser" / "hostile-pages.json").write_text(
        json.dumps({k: len(v["dom"]) for k, v in seen.items()}, indent=1)
    )
