"""One writer per output folder (``labkit.core.folderlock``), and no half-written file for a reader.

Two ``grade`` commands started at the same moment on one new folder: one grades, the other says
whose lock it waits for (by pid) and then keeps what the first graded, while a reader polling the
reports and the gradebook finds every file whole and the gradebook intact. Then ``--no-wait``
refuses with the holder named, a SIGKILLed holder leaves the folder free, a child it forked does
not keep it locked, and a failure of the grader's own folders stops the command (exit 1) with no
row for the student. A class of two students and one lab of the workflow tests' fixture labs (no
TensorFlow), run without the sandbox: the lock, not the sandbox, is under test.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from helpers import read_csv, wait_until
from labkit.core import atomic, folderlock
from labkit.grading.gradebook import store
from labkit.grading.run import ledger
from _class import make_class

CLASS = ("ann", "bob")
TABLES = ("grades.csv", "final_grades.csv", "canvas.csv")


def start(*args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "labkit", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def grading(k: dict, *extra) -> list:
    return [
        "grade",
        k["subs"],
        "--out",
        k["out"],
        "--rubric",
        k["rubric"],
        "--notebooks",
        k["notebooks"],
        "--lab",
        "alpha",
        "--no-sandbox",
        "-j",
        "1",
        *extra,
    ]


def finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def integrity(out: Path) -> str:
    with sqlite3.connect(f"file:{out / store.FILE}?mode=ro", uri=True, timeout=30) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def executions(out: Path) -> dict:
    """{student: status} of the execution rows of grades.csv (each student once)."""
    rows = [r for r in read_csv(out / "grades.csv") if r["check"] == "execution"]
    assert Counter(r["student"] for r in rows) == Counter(CLASS), rows
    return {r["student"]: r["status"] for r in rows}


class Reader(threading.Thread):
    """Reads the folder as a TA, a browser or Canvas would, every 20 ms while writers run: each
    table, summary and page it finds must be whole, and the gradebook must pass its integrity check."""

    def __init__(self, out: Path):
        super().__init__(daemon=True)
        self.out, self.halt = out, threading.Event()
        self.bad: list[tuple[str, str]] = []
        self.seen: Counter = Counter()

    def run(self) -> None:
        while not self.halt.is_set():
            self.look()
            time.sleep(0.02)

    def look(self) -> None:
        for name in TABLES:
            text = self._read(self.out / name)
            if text is not None:
                rows = list(csv.reader(io.StringIO(text)))
                whole = text.endswith("\n") and rows and len(rows[0]) > 1 and {len(r) for r in rows} == {len(rows[0])}
                self._judge(name, whole, text)
        text = self._read(self.out / "summary.md")
        if text is not None:
            self._judge("summary.md", text.startswith("#") and text.endswith("\n"), text)
        for page in [self.out / "summary.html", *self.out.glob("*/alpha.html")]:
            text = self._read(page)
            if text is not None:
                self._judge(page.name, text.rstrip().endswith("</html>"), text)
        if (self.out / store.FILE).is_file():
            try:
                self._judge(store.FILE, integrity(self.out) == "ok", "integrity_check")
            except sqlite3.OperationalError as e:  # being made (its schema, WAL mode) this moment: not yet readable
                self.seen["gradebook busy"] += 1
                if "locked" not in str(e) and "busy" not in str(e) and "no such" not in str(e):
                    self.bad.append((store.FILE, str(e)))

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _judge(self, name: str, whole: bool, text: str) -> None:
        self.seen[name] += 1
        if not whole:
            self.bad.append((name, text[-300:]))

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    """Two graders started at the same moment on one new folder, with a reader polling it throughout."""
    k = make_class(tmp_path_factory.mktemp("one_writer"), CLASS, labs=("alpha",))
    reader = Reader(k["out"])
    reader.start()
    t0, kit = time.monotonic(), ledger.kit_hash.__wrapped__()
    first, second = start(*grading(k)), start(*grading(k))
    try:
        ends = {p.pid: finish(p) for p in (first, second)}
    finally:
        for p in (first, second):
            p.kill()
        reader.stop()
    k.update(ends=ends, reader=reader, seconds=time.monotonic() - t0, kit_changed=ledger.kit_hash.__wrapped__() != kit)
    return k


@pytest.mark.notebook
def test_the_second_grader_waits_for_the_first_then_keeps_its_runs(race):
    (a, (rc_a, out_a, err_a)), (b, (rc_b, out_b, err_b)) = race["ends"].items()
    assert rc_a == 0 and rc_b == 0, (err_a[-2000:], err_b[-2000:])
    waited = [(pid, out, err) for pid, (_, out, err) in race["ends"].items() if "is being written by" in err]
    assert len(waited) == 1, (err_a[-1500:], err_b[-1500:])
    pid, out, err = waited[0]
    holder = b if pid == a else a
    line = next(ln for ln in err.splitlines() if "is being written by" in ln)
    assert f"(pid {holder} on " in line and " grade " in line and "waiting for it to finish" in line, line
    assert "is free after" in err, err[-1500:]
    if not race["kit_changed"]:  # (a work tree edited meanwhile runs them again, as any change of the kit does)
        assert "kept 2 notebook(s)" in out and "running" not in out, out[-1500:]
    ran = race["ends"][holder][1]
    assert "running 2 notebook(s)" in ran and "kept" not in ran, ran[-1500:]
    assert executions(race["out"]) == {s: "ok" for s in CLASS}
    assert not any(r["status"] == "unreadable" for r in read_csv(race["out"] / "grades.csv"))
    assert integrity(race["out"]) == "ok"


@pytest.mark.notebook
def test_a_reader_polling_the_folder_never_sees_a_torn_file(race):
    reader = race["reader"]
    assert reader.bad == [], reader.bad[:3]
    written = [name for name in (*TABLES, "summary.md", store.FILE) if (race["out"] / name).is_file()]
    assert {"grades.csv", "summary.md", store.FILE} <= set(written)
    for name in [*written, "alpha.html"]:  # it read each of them, many times over
        assert reader.seen[name] >= 5, reader.seen


@pytest.mark.notebook
def test_no_wait_refuses_naming_the_holder(race):
    holder = start(*grading(race, "--force"))
    try:
        wait_until(lambda: holds(race["out"], holder.pid), 60, message="the grader to hold the folder")
        holder.send_signal(signal.SIGSTOP)  # it holds the folder for as long as the others take
        refused = [
            start("grade-export", "--out", race["out"], "--no-wait"),
            start("grade-merge", race["root"] / "scores.csv", "--out", race["out"], "--no-wait"),
            start(*grading(race), "--no-wait"),
        ]
        for p in refused:
            rc, _, err = finish(p, 120)
            assert rc == folderlock.BUSY_EXIT, (p.args, err[-1500:])
            assert f"(pid {holder.pid} on " in err and " grade " in err and "since 20" in err, err[-1500:]
            assert "is being written by" in err and "without --no-wait to wait for it" in err, err[-1500:]
        holder.send_signal(signal.SIGCONT)
        rc, _, err = finish(holder)
        assert rc == 0, err[-1500:]
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(30)
    assert executions(race["out"]) == {s: "ok" for s in CLASS}


def holds(out: Path, pid: int) -> bool:
    who = folderlock.holder(out)
    return who is not None and who.pid == pid


@pytest.mark.notebook
def test_a_grader_fault_is_the_commands_error_and_no_students_row(race):
    """Another process's folder where the grader makes its own (as the second of two graders found
    one made meanwhile) stops the batch: exit 1 and the reason, every student as graded before."""
    blocked = [race["out"] / ".work" / s / "alpha" for s in CLASS]
    for path in blocked:  # a file where the grader makes a folder
        shutil.rmtree(path, ignore_errors=True)
        path.write_text("not the grader's")
    try:
        rc, out, err = finish(start(*grading(race, "--force")))
    finally:
        for path in blocked:
            path.unlink()
    assert rc == 1, (out[-1500:], err[-1500:])
    assert "error: the grader could not make its own folders for " in err and "alpha.ipynb" in err, err[-1500:]
    assert "unreadable" not in out
    assert executions(race["out"]) == {s: "ok" for s in CLASS}
    assert not any(r["status"] == "unreadable" for r in read_csv(race["out"] / "grades.csv"))


@pytest.mark.notebook
def test_a_sigkilled_holder_leaves_the_folder_free(race):
    holder = start(*grading(race, "--force"))
    try:
        wait_until(lambda: holds(race["out"], holder.pid), 60, message="the grader to hold the folder")
        tree = psutil.Process(holder.pid).children(recursive=True)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        psutil.wait_procs(tree, timeout=30)
        assert folderlock.holder(race["out"]) is None
        rc, out, err = finish(start(*grading(race)))  # resumes what the killed batch left, without waiting
    finally:
        holder.kill()
        holder.wait(30)
    assert rc == 0 and "is being written by" not in err, err[-1500:]
    assert executions(race["out"]) == {s: "ok" for s in CLASS}
    assert integrity(race["out"]) == "ok"


# ----------------------------------------------------------------------- the lock and the writes alone

HOLD = """
import os, sys, time
from labkit.core import folderlock
with folderlock.hold(sys.argv[1]):
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    time.sleep(60)
"""


def test_a_killed_holders_forked_child_does_not_keep_the_folder(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    try:
        held = folderlock.holder(tmp_path)
        assert held is not None and held.pid == p.pid and held.since.endswith("+00:00")
        with pytest.raises(folderlock.FolderBusy, match=rf"\(pid {p.pid} on .*since "):
            with folderlock.hold(tmp_path, wait=0.5, say=lambda _: None):
                pass
        p.kill()
        p.wait(10)
        assert psutil.pid_exists(child)
        t0 = time.monotonic()
        with folderlock.hold(tmp_path, wait=5):
            assert time.monotonic() - t0 < 1
            with folderlock.hold(tmp_path, wait=0):  # re-entrant within a process
                assert folderlock.holder(tmp_path).pid == os.getpid()
        assert folderlock.holder(tmp_path) is None
    finally:
        p.kill()
        if psutil.pid_exists(child):
            os.kill(child, signal.SIGKILL)


def test_a_bounded_wait_refuses_and_a_stopped_wait_writes_nothing(tmp_path):
    (tmp_path / ".grader").mkdir()  # a graded folder, as far as the lock goes
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    try:
        t0 = time.monotonic()
        rc, _, err = finish(start("grade-export", "--out", tmp_path, "--wait", "1.5"), 60)
        assert rc == folderlock.BUSY_EXIT and time.monotonic() - t0 >= 1.5, err
        assert f"(pid {p.pid} on " in err and "waiting for it to finish (up to 1.5 s" in err, err
        assert "with a longer --wait than 1.5 s, or without it, to wait for it" in err, err
        waiting = start("grade-merge", tmp_path / "scores.csv", "--out", tmp_path)
        said = waiting.stderr.readline()  # it says so once, as it starts to wait
        assert f"(pid {p.pid} on " in said and "Ctrl-C stops waiting" in said, said
        waiting.send_signal(signal.SIGTERM)
        rc, _, err = finish(waiting, 60)
        assert rc == 130 and "interrupted while waiting for" in err, err
        assert sorted(q.name for q in tmp_path.iterdir()) == [".grader", folderlock.LOCK]
    finally:
        p.kill()
        os.kill(child, signal.SIGKILL)


def test_a_folder_that_cannot_be_locked_is_refused_with_the_reason(tmp_path, capsys):
    (tmp_path / folderlock.LOCK).mkdir()  # where the lock file goes
    ran = []
    assert folderlock.command(tmp_path, None, lambda: ran.append(1) or 0) == 2 and ran == []
    err = capsys.readouterr().err
    assert f"cannot open {tmp_path / folderlock.LOCK} to lock {tmp_path} (Is a directory)" in err, err
    (tmp_path / "file").write_text("")
    with pytest.raises(folderlock.LockError, match="cannot make .*; give a folder you may write"):
        with folderlock.hold(tmp_path / "file" / "out"):
            pass


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "grades.csv"
    atomic.write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic.replacing(path) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]
    atomic.write_bytes(path, b"new\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]
