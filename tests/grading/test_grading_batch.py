"""The grader end to end on fixture submissions built here (tiny notebooks that use
labkit.notebook.record, not the real labs): every failure mode becomes a row with the right status and
reason, the fake claim is a ``mismatch``, the released notebook fails where the solution was
removed, nothing is left running, and ``-j 2`` grades exactly like ``-j 1``."""

from __future__ import annotations

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from _fixlab import FAKE_CLAIMS, RUBRIC, lab_notebook
from helpers import alive, runs_at_once, read_csv, wait_until
from labkit.grading.grade import GradeOptions, grade
from labkit.grading.kit.release import release_notebook

from labkit.grading.run.sandbox import SANDBOXES

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)"),
]

# The processes these start carry a marker in their command line (a sleep of an odd length), so a
# test finds them from outside the sandbox, where the pids they see are not the machine's.
HANG_MARK, DETACH_MARK = "4242.1", "4242.2"
# the kernel's own stderr (ipykernel sends fd 2 to the notebook; this is the one it started with),
# which the runner copies into the run's capped .log as it comes
KERNEL_STDERR = "getattr(sys.stderr, '_original_stdstream_copy', None) or 2"
HANG = (
    "import os, subprocess, sys, time\n"
    f"child = subprocess.Popen(['sleep', '{HANG_MARK}'], start_new_session=True)\n"
    f"os.write({KERNEL_STDERR}, f'started child {{child.pid}}\\n'.encode())\n"
    "time.sleep(10**6)"
)
# a grandchild that leaves the kernel's tree (double fork) and hides in its own session
DETACH = (
    "import subprocess, sys, time\n"
    f"subprocess.run(['bash', '-c', 'setsid sleep {DETACH_MARK} & echo started grandchild $! >&2'], check=True, "
    f"stderr={KERNEL_STDERR})\n"
    "time.sleep(10**6)"
)


def running_with(marker: str) -> list[int]:
    """Processes on this machine whose command line holds ``marker`` (zombies do not count)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p.pid)
    return found


CRASH = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
# two children, each under the per-process limit, together over the tree's RSS cap
FORK_HOGS = (
    "import subprocess, sys, time\n"
    "code = 'import time; x = bytes([1]) * (700 * 2**20); time.sleep(1000)'\n"
    "kids = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(2)]\n"
    "time.sleep(10**6)"
)


def submissions(root):
    ref = lab_notebook()
    subs = {
        "good": ref,
        "released": release_notebook(ref, "fixlab.ipynb")[0],
        "raises": lab_notebook({3: "x = 1\nraise ValueError('boom in cell 3')"}),
        "hangs": lab_notebook({3: HANG}),
        "hog": lab_notebook({3: "big = np.ones(2 * 2**30 // 8)"}),
        "faker": lab_notebook({6: FAKE_CLAIMS}),
        "lazy": lab_notebook({8: "YOUR ANSWER HERE"}),
    }
    for student, nb in subs.items():
        (root / student).mkdir(parents=True)
        nbformat.write(nb, str(root / student / "fixlab.ipynb"))
    (root / "broken").mkdir()
    (root / "broken" / "fixlab.ipynb").write_text('{"cells": [{"cell_type": "code", "source": ')
    (root / "absent").mkdir()  # a notebook of no lab (a misnamed one is graded: test_grading_intake)
    nbformat.write(new_notebook(cells=[new_code_cell("print('scratch')")]), str(root / "absent" / "notes.ipynb"))
    for student, code in (("good", DETACH), ("crasher", CRASH), ("forker", FORK_HOGS)):
        (root / student).mkdir(exist_ok=True)
        slow = new_notebook(cells=[new_code_cell("import time"), new_code_cell(code)])
        nbformat.write(slow, str(root / student / "fixslow.ipynb"))
    return root


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    subs = submissions(root / "subs")
    (root / "rubric.toml").write_text(RUBRIC)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    runs = {}
    for jobs, labs in ((2, None), (1, ["fix"])):  # the whole-notebook timeout (lab "slow") runs once
        out = root / f"out-j{jobs}"  # -j 2 where this user's grader may run two at once (runs_at_once)
        outcome = grade(
            GradeOptions(root / "rubric.toml", subs, out, parallel=runs_at_once(jobs), labs=labs), log=lambda m: None
        )
        runs[jobs] = (outcome, out)
    return {"root": root, "runs": runs, "before": before}


def rows_by(outcome):
    return {(r["student"], r["lab"], r["check"]): r for r in outcome.rows}


def status(rows, student, check, lab="fix"):
    r = rows[(student, lab, check)]
    return r["status"], r["reason"], r["points"]


def test_correct_submission_passes_everything(batch):
    rows = rows_by(batch["runs"][2][0])
    assert [
        status(rows, "good", c)[0] for c in ("execution", "total", "plot", "steps add up", "accuracy", "analysis")
    ] == ["ok", "pass", "pass", "pass", "pass", "pending"]  # the answer awaits a TA
    assert sum(r["points"] for r in batch["runs"][2][0].rows if r["student"] == "good" and r["lab"] == "fix") == 7


def test_exception_reports_cell_name_and_message(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "raises", "execution")
    assert st == "error" and reason == "cell 4 raised ValueError: boom in cell 3"  # counted from 1, as JupyterLab does
    st, reason, pts = status(rows, "raises", "total")
    assert (st, pts) == ("missing", 0) and reason.endswith("(the run stopped in cell 4: ValueError)")
    assert status(rows, "raises", "analysis")[0] == "pending"  # what was written still counts


def test_cell_timeout_kills_the_kernel_and_its_children(batch):
    rows = rows_by(batch["runs"][2][0])
    assert status(rows, "hangs", "execution")[:2] == ("timeout", "cell 4 ran past the 10 s cell timeout")
    for jobs, (_, out) in batch["runs"].items():
        assert "started child" in (out / "hangs" / "fixlab.log").read_text()  # the child did start
        assert not (out / ".work" / "hangs" / "fixlab").exists()  # its work folder is gone with its disk
    assert running_with(HANG_MARK) == []


def test_notebook_timeout_kills_the_whole_tree(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "good", "execution", lab="slow")
    assert st == "timeout" and reason == "the notebook ran past its 15 s limit (in cell 2); its processes were killed"
    assert status(rows, "good", "never", lab="slow")[0] == "missing"
    assert "started grandchild" in (batch["runs"][2][1] / "good" / "fixslow.log").read_text()
    assert running_with(DETACH_MARK) == []


def test_dead_kernel(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "crasher", "execution", lab="slow")
    assert st == "dead-kernel" and reason.startswith("the kernel died (in cell 2)")


def test_tree_memory_cap_kills_the_tree(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "forker", "execution", lab="slow")
    assert (st, reason) == ("memory", "the notebook's processes used more than 1200 MB (in cell 2); they were killed")


def test_memory_limit(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "hog", "execution")
    assert st == "memory" and reason.startswith("cell 4 ran out of memory (limit 1200 MB): ")
    assert "MemoryError" in reason


def test_fake_claims_are_mismatches(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, pts = status(rows, "faker", "accuracy")
    assert (st, pts) == ("mismatch", 0)
    assert reason.startswith("recorded 0.9900 but the saved weights give 0.0")  # all-zero weights: class 0, ~10%
    st, reason, pts = status(rows, "faker", "steps add up")
    assert (st, pts) == ("mismatch", 0) and "task result files say {'0': 100, '1': 80}" in reason
    assert status(rows, "faker", "total")[0] == "pass"


def test_unanswered_analysis(batch):
    rows = rows_by(batch["runs"][2][0])
    assert status(rows, "lazy", "execution")[0] == "ok"
    st, reason, pts = status(rows, "lazy", "analysis")
    assert (st, pts) == ("fail", 0) and "still holds the placeholder" in reason


def test_unreadable_and_missing_notebooks(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "broken", "execution")
    assert st == "unreadable" and "invalid JSON" in reason
    assert status(rows, "broken", "total")[0] == "not-run"
    st, reason, _ = status(rows, "absent", "execution")
    assert st == "not-submitted" and reason == "no fixlab.ipynb in absent/ (found: notes.ipynb)"


def test_released_notebook_fails_where_the_solution_was_removed(batch):
    rows = rows_by(batch["runs"][2][0])
    st, reason, _ = status(rows, "released", "execution")
    assert (st, reason) == ("error", "cell 4 raised NotImplementedError")
    for check in ("total", "plot", "steps add up", "accuracy", "analysis"):
        assert status(rows, "released", check)[0] in ("missing", "fail"), check
        assert status(rows, "good", check)[0] == ("pending" if check == "analysis" else "pass"), check


def test_reports_and_feedback_pages(batch):
    outcome, out = batch["runs"][2]
    csv_rows = read_csv(out / "grades.csv")
    assert list(csv_rows[0]) == ["student", "lab", "check", "points", "max", "status", "reason", "seconds"]
    assert len(csv_rows) == len(outcome.rows) == 11 * (1 + 5) + 11 * (1 + 1)  # students x (execution + checks) per lab
    summary = (out / "summary.md").read_text()
    assert "| good | 7/8 (+1 pending) | 0/1 | 7/9 (+1 pending) |" in summary and "boom in cell 3" in summary
    page = (out / "raises" / "fixlab.html").read_text()
    top, notebook = page.split("What to do next", 1)
    assert "cell 4</a> raised ValueError: boom in cell 3" in top and "boom in cell 3" in notebook
    assert (out / "good" / "fixlab.ipynb").exists() and (out / "broken" / "fixlab.html").exists()
    assert outcome.exit_code == 0  # submissions: the batch completed


def test_parallel_grades_like_serial_and_leaves_nothing_behind(batch):
    def strip(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows if r["lab"] == "fix"]

    j2, j1 = (read_csv(batch["runs"][j][1] / "grades.csv") for j in (2, 1))
    assert strip(j2) == strip(j1) and len(strip(j1)) == 11 * 6
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in batch["before"]]
    assert left == [], [p.cmdline() for p in left]
    inside = []  # anything still running in one of the batch's working directories
    for p in psutil.process_iter():
        try:
            if p.cwd().startswith(str(batch["root"])):
                inside.append(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    assert inside == []


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_stopping_the_grader_leaves_nothing_running(tmp_path, sandbox):
    """Ctrl-C stops the grader cleanly; even SIGKILL leaves no kernel or child behind: each runner
    gets SIGTERM when the grader dies and SIGKILLs its descendants from the signal handler (a
    subreaper, so orphans are its own), and in the sandbox the PID namespace ends with it."""
    import signal
    import subprocess
    import sys

    (tmp_path / "rubric.toml").write_text(RUBRIC.replace("cell_timeout = 10", "cell_timeout = 300"))
    graders, pid_files = {}, {}
    for sig in (signal.SIGINT, signal.SIGKILL):
        subs, out = tmp_path / f"subs-{sig.name}", tmp_path / f"out-{sig.name}"
        (subs / "s").mkdir(parents=True)
        nbformat.write(lab_notebook({3: HANG}), str(subs / "s" / "fixlab.ipynb"))
        graders[sig] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "labkit",
                "grade",
                str(subs),
                "--out",
                str(out),
                "--rubric",
                str(tmp_path / "rubric.toml"),
                "--lab",
                "fix",
            ]
            + (["--no-sandbox"] if sandbox == "none" else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        pid_files[sig] = out / "s" / "fixlab.log"  # the kernel's stderr, capped, flushed as it comes
    try:
        wait_until(
            lambda: all(p.exists() and "started child" in p.read_text() for p in pid_files.values()),
            120,
            0.2,
            "both runs' kernels to log that their child started",
        )
        assert len(running_with(HANG_MARK)) == 2  # both children run
        # every process of the two runs (runners, kernels, children): each must end by itself. The
        # sleeping children die first; a runner still tearing down after them is no leak, so the
        # test waits for each of these processes to end, not for a fixed time.
        started = [p for p in psutil.process_iter(["cwd"]) if str(tmp_path) in (p.info["cwd"] or "")]
        started += [p for g in graders.values() for p in psutil.Process(g.pid).children(recursive=True)]
        for sig, g in graders.items():
            g.send_signal(sig)
        assert graders[signal.SIGINT].wait(30) == 130
        assert "interrupted" in graders[signal.SIGINT].stdout.read().decode()
        graders[signal.SIGKILL].wait(30)
        _, left = psutil.wait_procs(started, timeout=30)
        assert alive([p.pid for p in left]) == []
        assert running_with(HANG_MARK) == []
        stray = [p for p in psutil.process_iter(["cwd"]) if str(tmp_path) in (p.info["cwd"] or "")]
        assert stray == []
    finally:
        for g in graders.values():
            if g.poll() is None:
                g.kill()


def test_reference_mode_writes_report_and_fails_on_a_failed_check(tmp_path, monkeypatch):
    """As ``make grade`` runs it: the rubric, the notebooks and the output folder named relative
    to the current folder (the grader's checks run elsewhere, and still find them)."""
    monkeypatch.chdir(tmp_path)
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    nbformat.write(lab_notebook(), str(nbs / "fixlab.ipynb"))
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(RUBRIC.replace("min = 210\nmax = 210", "min = 211"))  # the reference cannot reach it
    outcome = grade(GradeOptions("rubric.toml", None, "out", labs=["fix"], notebooks="notebooks"), log=lambda m: None)
    assert outcome.exit_code == 1
    assert {r["check"]: r["status"] for r in outcome.rows}["accuracy"] == "pass"  # its verifier ran
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## fix: Fixture lab" in report and "| total | 0/2 | fail | 210 |" in report
    assert "| core_test_accuracy |" in report and (tmp_path / "out" / "fixlab.ipynb").exists()
    assert any(r["kind"] == "record" and r["name"] == "worker_steps" for r in read_csv(tmp_path / "out" / "report.csv"))


def outcome_lab(rubric, key="lab1"):
    from labkit.grading.judge.rubric import load_rubric

    return load_rubric(rubric).labs[key]


def test_without_bubblewrap_submissions_are_refused_and_no_sandbox_warns_everywhere(tmp_path, monkeypatch):
    """Where the sandbox tool is missing, grading students stops before anything runs and says what
    to install and how to override; --no-sandbox runs anyway and every report says so. The
    reference notebooks may run without it."""
    from labkit.grading import grade as grading
    from labkit.grading.run.sandbox import SANDBOXES, Bubblewrap

    monkeypatch.setitem(SANDBOXES, "bwrap", Bubblewrap("labkit-no-such-bwrap"))
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    (tmp_path / "subs" / "s").mkdir(parents=True)
    nbformat.write(
        new_notebook(cells=[new_code_cell("import labkit\nlabkit.record('never', 1)")]),
        str(tmp_path / "subs" / "s" / "fixslow.ipynb"),
    )
    with pytest.raises(grading.GradeError) as e:
        grade(
            GradeOptions(tmp_path / "rubric.toml", tmp_path / "subs", tmp_path / "out", labs=["slow"]),
            log=lambda m: None,
        )
    assert "sudo apt-get install bubblewrap" in str(e.value) and "--no-sandbox" in str(e.value)
    assert not (tmp_path / "out").exists()

    outcome = grade(
        GradeOptions(tmp_path / "rubric.toml", tmp_path / "subs", tmp_path / "out", labs=["slow"], sandbox="none"),
        log=lambda m: None,
    )
    rows = rows_by(outcome)
    assert status(rows, "s", "execution", lab="slow")[0] == "ok" and status(rows, "s", "never", lab="slow")[0] == "pass"
    assert "WITHOUT a sandbox" in status(rows, "s", "execution", lab="slow")[1]
    for page in ("summary.md", "s/fixslow.html"):
        assert (
            "WARNING" in (tmp_path / "out" / page).read_text()
            and "WITHOUT a sandbox" in (tmp_path / "out" / page).read_text()
        ), page

    notes = []
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    nbformat.write(
        new_notebook(cells=[new_code_cell("import labkit\nlabkit.record('never', 1)")]), str(nbs / "fixslow.ipynb")
    )
    ref = grade(
        GradeOptions(tmp_path / "rubric.toml", None, tmp_path / "ref", labs=["slow"], notebooks=nbs), log=notes.append
    )
    assert ref.exit_code == 0 and any("the reference notebooks run without a sandbox" in n for n in notes)


def test_default_parallelism_is_one_per_core_within_memory(monkeypatch):
    """`make grade` without JOBS: a notebook per usable core, but never more than memory holds at
    the largest lab's limit (a run's own or its checks'), and always at least one."""
    import os
    from types import SimpleNamespace

    from labkit.grading import grade as grading

    labs = [
        SimpleNamespace(memory_mb=4096, check_memory_mb=3072),
        SimpleNamespace(memory_mb=6144, check_memory_mb=3072),
    ]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    for free_gib, want in ((64, 4), (13, 2), (5, 1)):
        monkeypatch.setattr(psutil, "virtual_memory", lambda g=free_gib: SimpleNamespace(available=g * 2**30))
        assert grading.auto_parallel(labs) == want, free_gib
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert grading.auto_parallel(labs) == 1
