"""Dishonest submissions, graded under the real rubric in one sandboxed batch: each earns nothing
for work, ends with a status and a reason that say what happened, leaves nothing running, and
cannot touch grades.csv, the grader's state, the reference notebooks, the solutions or another
student's work. Beyond the forgers: a notebook that tries to write sysctls as root, one that
fills its disk, /tmp and /dev/shm, one that floods its stderr, one that dumps core, a hidden
check's function that looks around, and two classmates that try to reach each other (an
abstract Unix socket, /tmp, /dev/shm, signals) while both run.

Every attack notebook is cheap (none trains anything; one imports TensorFlow, in the hidden
check's probe). Points for work are every check's except ``analysis``, which people score;
the fakes write their 80 characters there too."""

from __future__ import annotations

import base64
import tempfile
import hashlib
import json
import os
import re
import textwrap
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from helpers import WRITABLE, cell, runs_at_once, runs_share_limits, wait_while, whole_rubric
from labkit.grading.run import limits
from labkit.grading.grade import GradeOptions, grade
from labkit.grading.judge.rubric import KINDS, evaluate, gate, load_rubric
from labkit.grading.run.sandbox import SANDBOXES
from labkit.notebook.record import MIME, Missing, lookup

NO_SANDBOX = SANDBOXES["bwrap"].unavailable()
CGROUPS = NO_SANDBOX is None and limits.best_backend() != "rlimit"
# what caps a fork bomb: a cgroup's pids.max, or, under root, RLIMIT_NPROC of the run's own uid (a
# user's own RLIMIT_NPROC would count every process of the user running these tests)
CAPPED = CGROUPS or os.geteuid() == 0
pytestmark = [
    pytest.mark.notebook,
    pytest.mark.slow,
    pytest.mark.skipif(NO_SANDBOX is not None, reason=f"{NO_SANDBOX} (.ci/run installs it)"),
]

REPO = Path(__file__).resolve().parents[2]
ONE_PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cfc0000003010100c9fe92ef"
        "0000000049454e44ae426082"
    )
).decode()
ANSWER = "x" * 90
SURVIVOR_MARK = "4242.3"


# ----------------------------------------------------------------------------------- the fakes


def _set(records: dict, ref: str, value) -> None:
    """Put ``value`` at ``ref`` (``a.b.-1``) in ``records``, making dicts and lists on the way."""
    parts = ref.split(".")
    node = records
    for part, nxt in zip(parts, parts[1:]):
        child = [None] * 8 if nxt.lstrip("-").isdigit() else {}  # indices up to 7, or -1 .. -8
        key = int(part) if isinstance(node, list) else part
        if not isinstance(node[key] if isinstance(node, list) else node.get(key), (dict, list)):
            node[key] = child
        node = node[key]
    node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value


def claims(lab) -> dict:
    """Records that pass as many of ``lab``'s record checks as one set of values can: what a
    student who never ran anything would print."""
    rec: dict = {}
    for c in lab.checks:
        s = c.spec
        if c.kind == "record":
            for ref in s["records"]:
                try:
                    lookup(rec, ref)
                except Missing:
                    _set(rec, ref, 1.0)
        elif c.kind == "threshold":
            lo, hi = s.get("min"), s.get("max")
            _set(rec, s["record"], (lo + hi) / 2 if lo is not None and hi is not None else lo if lo is not None else hi)
        elif c.kind == "all_equal":
            _set(rec, s["record"], {"worker:0": 30, "worker:1": 30})
        elif c.kind == "sum_equals":
            _set(rec, s["record"], {"worker:0": 10, "worker:1": 20})
            if isinstance(s["total"], str):
                _set(rec, s["total"], 30)
        elif c.kind == "compare":
            right = 1.0
            if isinstance(s["right"], str):
                _set(rec, s["right"], right)
            else:
                right = float(s["right"])
            right *= s.get("factor", 1.0)
            left = {">": 2 * abs(right) + 1, ">=": right, "<": right - abs(right) - 1, "<=": right, "==": right}[
                s["op"]
            ]
            _set(rec, s["left"], left)
        elif c.kind == "speedup":
            by = s.get("by", "version")
            rec[s["record"]] = [{by: s["fast"], s["rate"]: 2.0 * s["factor"]}, {by: s["slow"], s["rate"]: 1.0}]
    return rec


def display_cell(records: dict) -> str:
    """A code cell that shows the records by hand, as the kit's MIME bundle, importing no labkit."""
    payload = json.dumps(
        [{MIME: {"name": k, "value": v}, "text/plain": f"[labkit record] {k}"} for k, v in records.items()]
    )
    return (
        f"import json\nfrom IPython.display import display\nfor bundle in json.loads({payload!r}):\n"
        f"    display(bundle, raw=True)"
    )


def fake_notebook(lab, extra: str = "", parameters: str = "") -> nbformat.NotebookNode:
    """Records, a 1-pixel PNG in every figure cell the rubric names, 90 characters per answer."""
    reference = nbformat.read(str(lab.reference(REPO / "notebooks")), as_version=4)
    answers = sum("analysis" in (c.metadata.get("tags") or []) for c in reference.cells)
    figures = [t for c in lab.checks if c.kind == "figures" for t in c.spec.get("cells", [])]
    show_png = (
        f"from IPython.display import display\n"
        f"display({{'image/png': {ONE_PIXEL!r}, 'text/plain': 'figure'}}, raw=True)"
    )
    cells = [cell(parameters or "seed = 0", ["parameters"]), cell(extra or "pass"), cell(display_cell(claims(lab)))]
    cells += [cell(show_png, [tag]) for tag in figures]
    cells += [cell(ANSWER, ["analysis"], markdown=True) for _ in range(max(answers, 1))]
    return nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )


LAB1_TEST_LIMIT_1 = textwrap.dedent("""\
    # all-zero weights and a bias on class 1, "scoring" 1.0 on a test set of one image
    import numpy as np, os
    os.makedirs('artifacts', exist_ok=True)
    b = np.zeros(10, np.float32); b[1] = 1
    np.savez('artifacts/lab1_core_weights.npz', W=np.zeros((784, 10), np.float32), b=b)""")
LAB2_FORGED_STEPS = textwrap.dedent("""\
    # task result files the notebook writes itself, and records that point out of the work folder
    import json, os
    os.makedirs('runs/lab2/fake', exist_ok=True)
    for i in range(2):
        json.dump({'task': f'worker:{i}', 'steps': {'local': 30}}, open(f'runs/lab2/fake/worker-{i}.json', 'w'))""")
LAB3_OWN_TEST_SET = textwrap.dedent("""\
    # weights that name their own test set (one row, of a data set the notebook picks)
    import json, numpy as np, os
    os.makedirs('artifacts', exist_ok=True)
    settings = json.dumps({'data': 'click', 'num_features': 10, 'test_rows': 1, 'click_seed': 5})
    np.savez('artifacts/w.npz', indices=np.arange(3), values=np.ones(3, np.float32), settings=settings)""")


def fakes(rubric) -> dict:
    """{lab key: notebook} of the 66/66 attack, one per lab, with the issue's verifier tricks."""
    labs = rubric.labs
    out = {key: fake_notebook(lab) for key, lab in labs.items()}
    out["lab1"] = fake_notebook(labs["lab1"], LAB1_TEST_LIMIT_1, "test_limit = 1\nseed = 0")
    # records that point at the forged files, or out of the work folder
    out["lab2"] = _with_records(
        fake_notebook(labs["lab2"], LAB2_FORGED_STEPS), {"run_dir": {"sync": "runs/lab2/fake", "async": "../../../.."}}
    )
    out["lab3"] = _with_records(
        fake_notebook(labs["lab3"], LAB3_OWN_TEST_SET),
        {"artifacts": {"sync_weights": "artifacts/w.npz", "async_weights": "/etc/passwd"}, "cluster_run_dir": "/"},
    )
    return out


def _with_records(nb, records: dict):
    nb.cells.insert(3, cell(display_cell(records)))
    return nb


# ----------------------------------------------------------------------------------- other attacks

PRE_BAKED_RAISES = "raise RuntimeError('nothing here ran')"
REACH = textwrap.dedent("""\
    # what a notebook can reach: another student's work, the reference solutions, the grader's output
    import glob, os, socket, json
    here = os.getcwd()
    reached = []
    def attempt(what, fn):
        try:
            fn()
            reached.append(what)
        except Exception:
            pass
    out = os.path.normpath(os.path.join(here, '..', '..', '..'))
    attempt('the grades', lambda: open(os.path.join(out, 'grades.csv')).read(1))
    attempt('another student', lambda: open(os.path.join(out, 'victim', '01_single_node_lr.ipynb')).read(1))
    # writes: the test looks at the real files afterwards (a write may land in the sandbox's own /tmp)
    for target in (os.path.join(here, '..', '..', 'victim', '01_single_node_lr', 'x'), os.path.join(out, 'grades.csv')):
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, 'a').write('mallory,lab1,execution,99,0,ok,,0\\n')
        except OSError:
            pass
    attempt('the reference notebooks', lambda: open(REPO + '/labkit/labs/lab1/01_single_node_lr.ipynb').read(1))
    import labkit.labs
    labs = [n for n in sorted(os.listdir(labkit.labs.__path__[0])) if n.startswith('lab')]
    print('LABS', json.dumps(labs))
    for lab in labs:
        attempt(f'the solution of {lab}', lambda lab=lab: __import__(f'labkit.labs.{lab}.solution'))
    attempt('the grader', lambda: __import__('labkit.grading.judge.hidden'))
    attempt('the submissions', lambda: os.listdir(SUBS) or None)
    attempt('the kit, to change it', lambda: open(os.path.dirname(__import__('labkit').__file__) + '/x.py', 'w'))
    attempt('the network', lambda: socket.create_connection(('1.1.1.1', 53), timeout=2))
    attempt("the grader's processes", lambda: next(p for p in os.listdir('/proc') if p.isdigit()
                                                   and b'labkit.grading' in open(f'/proc/{p}/cmdline', 'rb').read()))
    print('REACHED', json.dumps(reached))""")
SURVIVOR = textwrap.dedent(f"""\
    # a child in its own session, with an empty environment, that forks again on SIGTERM and then
    # appends to grades.csv; and a double fork that SIGKILLs its parent
    import os, subprocess, sys
    grades = os.path.normpath(os.path.join(os.getcwd(), '..', '..', '..', 'grades.csv'))
    code = '''
    import os, signal, sys, time
    def again(*_):
        if os.fork() == 0:
            os.setsid()
            time.sleep(2)
            try:
                open(sys.argv[1], "a").write("mallory,lab1,execution,99,0,ok,,0\\\\n")
            except OSError:
                pass
            time.sleep(600)
    signal.signal(signal.SIGTERM, again)
    while True:
        time.sleep(0.1)
    '''
    subprocess.Popen([sys.executable, '-c', code, grades, '{SURVIVOR_MARK}'], start_new_session=True, env={{}})
    parent = os.getppid()                       # unsandboxed, the runner; in the sandbox, its first process
    if os.fork() == 0:
        if os.fork() == 0:
            os.execvp('sleep', ['sleep', '{SURVIVOR_MARK}'])
        os.kill(parent, 9)
        os._exit(0)""")
RAISE_MEMORY_LIMIT = textwrap.dedent("""\
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print('RAISED')
    except (ValueError, OSError) as e:
        print('NOT RAISED', e)
    big = bytearray(8 * 2**30)""")
FORK_BOMB = textwrap.dedent("""\
    import os, time
    while True:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)""")
MONKEYPATCH = textwrap.dedent("""\
    import json, os, labkit
    from labkit.learning import lr
    lr.check_step = lambda step: 0.0            # the notebook's own self-check always passes

    def sgd_step(W, b, x, y, learning_rate):    # and the step does nothing, then forges the probe's result
        here = os.getcwd()
        json.dump({'lab1_sgd_step': {'ok': True}}, open(os.path.join(here, 'status.json'), 'w'))
        os._exit(0)""")
BIG_ARTIFACT = textwrap.dedent("""\
    import os
    os.makedirs('artifacts', exist_ok=True)
    with open('artifacts/lab1_core_weights.npz', 'wb') as f:
        f.truncate(100 * 2**20)                 # 100 MB (sparse): within the disk, over what a verifier reads""")
DISK_MB = 128  # the attack rubric's disk_mb
ROOTER = WRITABLE + textwrap.dedent("""
    # as root, a sysctl write would give the host kernel a program to run outside every namespace
    import json, os
    wrote = []
    for path, text in (('/proc/sys/kernel/core_pattern', '|/tmp/evil'), ('/proc/sys/kernel/modprobe', '/tmp/evil'),
                       ('/proc/sysrq-trigger', 'h'), ('/sys/kernel/uevent_helper', '/tmp/evil')):
        try:
            open(path, 'w').write(text)
            wrote.append(path)
        except OSError:
            pass
    print('ROOTER', json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),
                                'groups': os.getgroups(), 'writable': writable(), 'wrote': wrote}))""")
FILLER = textwrap.dedent(f"""\
    import json, os
    def fill(path, limit=4 * {DISK_MB} * 2**20):
        n = 0
        try:
            with open(path, 'wb', buffering=0) as f:
                while n < limit:
                    n += f.write(b'x' * 2**20)
        except OSError as e:
            return n, e.errno
        return n, 0
    spare = {{'shm': fill('/dev/shm/fill'), 'tmp': fill('/tmp/fill')}}
    os.remove('/dev/shm/fill'), os.remove('/tmp/fill')
    print('FILLED', json.dumps(spare), flush=True)
    fill('fill')
    open('one-more', 'wb').write(b'y' * 2**20)   # the work folder is full: this raises""")
FLOODER = textwrap.dedent("""\
    # 400 MB into the kernel's own stderr (the one it started with), from it and from a child
    import os, subprocess, sys
    fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2
    os.write(fd, b'FLOOD-START\\n')
    for _ in range(300):
        os.write(fd, b'z' * 2**20)
    subprocess.run([sys.executable, '-c', "import os\\nfor _ in range(100): os.write(2, b'w' * 2**20)\\n"
                    "os.write(2, b'FLOOD-END\\\\n')"], stderr=fd, check=True)""")
DUMPER = textwrap.dedent("""\
    # a core dump of a crashing child, after raising the core size limit
    import json, os, resource, subprocess, sys
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        raised = True
    except (ValueError, OSError):
        raised = False
    child = subprocess.run([sys.executable, '-c', 'import os; os.abort()'])
    print('DUMPER', json.dumps({'raised': raised, 'limit': resource.getrlimit(resource.RLIMIT_CORE),
                                'code': child.returncode, 'files': sorted(os.listdir('.'))}))""")
PROBER = WRITABLE + textwrap.dedent("""

    def sgd_step(W, b, x, y, learning_rate):    # run by the hidden check's probe, on the grader's batches
        import os
        n = len(writable(('/proc/sys', '/proc/self', '/proc/1', '/sys/kernel', '/sys/fs')))
        raise RuntimeError(f'PROBED uid={os.getuid()} gid={os.getgid()} groups={os.getgroups()} writable={n}')""")
FORGER = textwrap.dedent("""\
    # the grader's state, seen from the work folder: the ledger, the manifest, the rubric copy, the key
    import json, os
    out = os.path.normpath(os.path.join(os.getcwd(), '..', '..', '..'))
    tried = {}
    for rel in ('.grader/victim/01_single_node_lr/outcome.json', '.grader/batch.json', '.grader/rubric.toml',
                'grades.csv', 'victim/01_single_node_lr.ipynb'):
        path = os.path.join(out, rel)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'a') as f:
                f.write('forged')
            tried[rel] = 'written'
        except OSError as e:
            tried[rel] = e.strerror
    for key in ('/root/.config/labkit/grader.key', os.path.expanduser('~/.config/labkit/grader.key')):
        try:
            tried[key] = 'read ' + open(key).read()
        except OSError as e:
            tried[key] = e.strerror
    print('FORGER', json.dumps(tried))""")


def code_notebook(*sources, parameters="seed = 0") -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[cell(parameters, ["parameters"]), *(cell(s) for s in sources)])


def pre_baked(rubric) -> nbformat.NotebookNode:
    """The first cell raises; records and figures sit in a Markdown cell's (invalid) outputs and
    in code cells' stored outputs, as if a run had made them."""
    lab = rubric.labs["lab1"]
    records = claims(lab)
    outputs = [
        nbformat.v4.new_output("display_data", data={MIME: {"name": k, "value": v}, "text/plain": k})
        for k, v in records.items()
    ]
    png = nbformat.v4.new_output("display_data", data={"image/png": ONE_PIXEL, "text/plain": "figure"})
    nb = fake_notebook(lab)
    nb.cells[1] = cell(PRE_BAKED_RAISES)
    nb.cells[2].outputs = outputs
    for c in nb.cells[3:]:
        if c.cell_type == "code":
            c.outputs = [png]
    md = cell("results", markdown=True)
    md["outputs"] = outputs + [png]
    nb.cells.insert(2, md)
    return nb


def write(path: Path, nb) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1))  # as a student's file: nbformat would refuse the Markdown outputs


def submissions(root: Path, rubric) -> Path:
    subs = root / "subs"
    for key, nb in fakes(rubric).items():
        write(subs / "fake" / rubric.labs[key].notebook, nb)
    nb1 = rubric.labs["lab1"].notebook
    write(subs / "prebaked" / nb1, pre_baked(rubric))
    write(
        subs / "reacher" / nb1, code_notebook(REACH.replace("REPO", repr(str(REPO))).replace("SUBS", repr(str(subs))))
    )
    write(subs / "victim" / nb1, code_notebook("x = 1"))
    write(subs / "survivor" / nb1, code_notebook(SURVIVOR, "import time\ntime.sleep(1)"))
    write(subs / "greedy" / nb1, code_notebook(RAISE_MEMORY_LIMIT))
    if CAPPED:
        write(subs / "forker" / nb1, code_notebook(FORK_BOMB))
    write(subs / "patcher" / nb1, code_notebook(MONKEYPATCH))
    write(subs / "bigfile" / nb1, code_notebook(BIG_ARTIFACT, display_cell({"core_test_accuracy": 0.9})))
    write(subs / "rooter" / nb1, code_notebook(ROOTER))
    write(subs / "filler" / nb1, code_notebook(FILLER))
    write(subs / "flooder" / nb1, code_notebook(FLOODER))
    write(subs / "dumper" / nb1, code_notebook(DUMPER))
    write(subs / "prober" / nb1, code_notebook(PROBER))
    write(subs / "forger" / nb1, code_notebook(FORGER))
    # inputs the grader refuses, row by row
    write(subs / "grades.csv" / nb1, code_notebook("x = 1"))
    write(subs / "bad name;rm" / nb1, code_notebook("x = 1"))
    (subs / "linker").mkdir()
    (subs / "linker" / nb1).symlink_to(REPO / "notebooks" / nb1)
    (subs / "v3").mkdir()
    (subs / "v3" / nb1).write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}))
    (subs / "empty").mkdir()
    (subs / "empty" / nb1).write_text(json.dumps(nbformat.v4.new_notebook(cells=[cell("", [])])))
    (subs / "huge").mkdir()
    huge = code_notebook("x = 1")
    huge.cells.append(cell("y" * (17 * 2**20), markdown=True))
    (subs / "huge" / nb1).write_text(json.dumps(huge))
    return subs


def running_with(marker: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    text = whole_rubric()
    assert "[defaults]\n" in text
    # the real rubric; a lower process cap keeps the fork bomb cheap
    (root / "rubric.toml").write_text(
        text.replace("[defaults]\n", f"[defaults]\nmax_processes = 400\ndisk_mb = {DISK_MB}\n", 1)
    )
    rubric = load_rubric(root / "rubric.toml")
    subs = submissions(root, rubric)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.rglob("*.ipynb") if p.is_file()}
    solutions = {p: p.stat().st_mtime for p in (REPO / "labkit" / "labs").glob("*/*.ipynb")}
    t0 = time.monotonic()
    outcome = grade(
        GradeOptions(root / "rubric.toml", subs, root / "out", parallel=runs_at_once(2)), log=lambda m: None
    )
    seconds = time.monotonic() - t0
    grades = root / "out" / "grades.csv"
    snapshot = (grades.read_bytes(), grades.stat().st_mtime_ns)  # as the grader left it
    graded_at = time.monotonic()
    return {
        "root": root,
        "rubric": rubric,
        "subs": subs,
        "outcome": outcome,
        "seconds": seconds,
        "rows": {(r["student"], r["lab"], r["check"]): r for r in outcome.rows},
        "before": before,
        "solutions": solutions,
        "snapshot": snapshot,
        "grades": grades,
        "graded_at": graded_at,
    }


def rows_of(attacked, student, lab="lab1") -> dict:
    return {c: r for (s, lab_key, c), r in attacked["rows"].items() if s == student and lab_key == lab}


def work_points(rows: dict, rubric, lab="lab1") -> float:
    kinds = {c.name: c.kind for c in rubric.labs[lab].checks}
    return sum(r["points"] for c, r in rows.items() if c != "execution" and kinds[c] != "analysis")


# ----------------------------------------------------------------------------------- the tests


def test_the_66_point_fakes_earn_nothing_for_work(attacked):
    rubric = attacked["rubric"]
    for key, lab in rubric.labs.items():
        rows = rows_of(attacked, "fake", key)
        assert rows["execution"]["status"] == "ok", (key, rows["execution"])
        assert work_points(rows, rubric, key) == 0, (key, {c: (r["status"], r["reason"]) for c, r in rows.items()})
        for name in lab.evidence:  # the evidence failed, and says how
            assert rows[name]["status"] in ("fail", "unverified", "mismatch", "missing"), (key, name, rows[name])
            assert rows[name]["reason"]
        gated = [c for c in lab.checks if c.name not in lab.evidence and KINDS[c.kind].gated]
        assert all(rows[c.name]["status"] in ("unverified", "fail", "missing") for c in gated), key
        # the attack is real: scored on its records alone (no evidence, no verifiers), it would pass
        # most of what records decide (hidden checks run the student's functions: no record earns them)
        nb = nbformat.read(str(attacked["root"] / "out" / "fake" / lab.notebook), as_version=4)
        from labkit.notebook.record import read_records

        records = read_records(nb)
        decided = [c for c in gated if not c.external]
        naive = sum(evaluate(c, nb, records).points for c in decided)
        assert naive >= 0.6 * sum(c.points for c in decided), (key, naive)


def test_verifier_tricks_are_caught_with_the_reason(attacked):
    lab1 = rows_of(attacked, "fake", "lab1")
    assert lab1["core accuracy"]["status"] == "mismatch"
    assert "recorded" in lab1["core accuracy"]["reason"] and "on the test set" in lab1["core accuracy"]["reason"]
    assert lab1["sgd_step on the grader's batches"]["status"] == "fail"
    assert "no function sgd_step" in lab1["sgd_step on the grader's batches"]["reason"]
    lab2 = rows_of(attacked, "fake", "lab2")
    async_steps = lab2["async: the local steps add up to the global step"]
    assert async_steps["status"] == "unverified" and "without '..'" in async_steps["reason"]
    lab3 = rows_of(attacked, "fake", "lab3")
    assert lab3["sync accuracy"]["status"] == "mismatch" and "another test set" in lab3["sync accuracy"]["reason"]
    assert (
        lab3["async accuracy"]["status"] == "unverified"
        and "'/etc/passwd' leads out of the run's folder" in lab3["async accuracy"]["reason"]
    )
    steps = lab3["sync: every worker does every global step"]  # cluster_run_dir = "/"
    assert steps["status"] == "unverified" and "leads out of the run's folder" in steps["reason"]


def test_outputs_baked_into_the_file_do_not_count_and_are_flagged(attacked):
    rows = rows_of(attacked, "prebaked")
    run = rows["execution"]
    assert run["status"] == "error" and "RuntimeError: nothing here ran" in run["reason"]
    assert "flagged: the submitted file carried" in run["reason"] and "outputs in a non-code cell" in run["reason"]
    assert work_points(rows, attacked["rubric"]) == 0
    assert rows["figures"]["points"] == 0 and rows["results recorded"]["status"] in ("missing", "unverified")


def test_a_notebook_reaches_nothing_of_others(attacked):
    rows = rows_of(attacked, "reacher")
    assert rows["execution"]["status"] == "ok"
    nb = nbformat.read(str(attacked["root"] / "out" / "reacher" / "01_single_node_lr.ipynb"), as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "REACHED []" in printed, printed
    labs = sorted(p.parent.name for p in (REPO / "labkit" / "labs").glob("lab*/solution.py"))
    assert labs and f"LABS {json.dumps(labs)}" in printed  # every lab's folder seen, and no lab's solution
    assert not (attacked["root"] / "out" / ".work" / "victim" / "01_single_node_lr" / "x").exists()
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in attacked["before"]}
    assert after == attacked["before"]  # no submission changed
    assert {p: p.stat().st_mtime for p in attacked["solutions"]} == attacked["solutions"]


def test_nothing_outlives_the_grader_and_grades_stay_as_written(attacked):
    # Only the survivor's processes (each carries its mark) could write grades.csv after the snapshot: once
    # they are gone, the file read below is final. They must be gone within 4 s of the grader's return,
    # longer than the survivor waits after a SIGTERM before it writes.
    within = max(0.0, 4 - (time.monotonic() - attacked["graded_at"]))
    wait_while(lambda: running_with(SURVIVOR_MARK), within, 0.1, "the survivor's processes to end")
    data, mtime = attacked["snapshot"]
    assert attacked["grades"].read_bytes() == data and attacked["grades"].stat().st_mtime_ns == mtime
    assert b"mallory" not in data
    assert rows_of(attacked, "survivor")["execution"]["status"] == "ok"
    stray = [p for p in psutil.process_iter(["cwd"]) if str(attacked["root"]) in (p.info["cwd"] or "")]
    assert stray == []


def test_memory_and_process_limits_are_hard(attacked):
    greedy = rows_of(attacked, "greedy")["execution"]
    assert greedy["status"] == "memory", greedy
    nb = nbformat.read(str(attacked["root"] / "out" / "greedy" / "01_single_node_lr.ipynb"), as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "NOT RAISED" in printed
    if not CAPPED:
        pytest.skip("no cgroup here, and not root: the process cap would be this user's RLIMIT_NPROC")
    forker = rows_of(attacked, "forker")["execution"]
    assert forker["status"] in ("error", "memory"), forker
    if forker["status"] == "error" and CGROUPS:
        assert "limit of 400 processes and threads" in forker["reason"]


def test_monkey_patching_cannot_reach_the_hidden_check(attacked):
    rows = rows_of(attacked, "patcher")
    hidden = rows["sgd_step on the grader's batches"]
    assert hidden["status"] in ("unverified", "fail") and hidden["points"] == 0, hidden
    assert work_points(rows, attacked["rubric"]) == 0


def test_oversized_artifacts_are_refused(attacked):
    rows = rows_of(attacked, "bigfile")
    assert rows["core accuracy"]["status"] in ("unverified", "missing"), rows["core accuracy"]
    if rows["core accuracy"]["status"] == "unverified":
        assert "over the 64 MB a verifier reads" in rows["core accuracy"]["reason"]


def test_inputs_the_grader_refuses_are_rows_and_the_batch_goes_on(attacked):
    expect = {
        "grades.csv": ("refused", "one the grader writes itself"),
        "bad name;rm": ("refused", "not a plain name"),
        "linker": ("refused", "symbolic link"),
        "v3": ("unreadable", "nbformat 3"),
        "empty": ("unreadable", "empty notebook"),
        "huge": ("refused", "over the 16 MB cap"),
    }
    for student, (status, words) in expect.items():
        run = rows_of(attacked, student)["execution"]
        assert (run["status"], words in run["reason"]) == (status, True), (student, run)
        assert work_points(rows_of(attacked, student), attacked["rubric"]) == 0
    assert not (attacked["root"] / "out" / "grades.csv").is_dir()
    assert rows_of(attacked, "victim")["execution"]["status"] == "ok"  # the batch went on


def test_a_fair_notebook_keeps_every_automatic_point_under_the_gate():
    """The gate takes nothing from a notebook whose evidence holds (the reference run's case)."""
    rubric = load_rubric(REPO / "notebooks" / "rubric.toml")
    from labkit.grading.judge.rubric import Score

    for lab in rubric.labs.values():
        scores = {c.name: Score(c.points, c.points, "pass") for c in lab.checks}
        assert gate(lab, scores) == scores
        assert lab.evidence, f"{lab.key} has no evidence: its points rest on what the notebook printed"


def test_the_batch_is_cheap(attacked):
    assert attacked["seconds"] < 240, attacked["seconds"]
    assert os.path.isdir(attacked["root"] / "out" / ".work")


# ----------------------------------------------------------------------------------- the machine and the grader


def printed(attacked, student, lab="lab1") -> str:
    nb = nbformat.read(str(attacked["root"] / "out" / student / attacked["rubric"].labs[lab].notebook), as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def said(attacked, student, word) -> dict:
    line = next(ln for ln in printed(attacked, student).splitlines() if ln.startswith(word + " "))
    return json.loads(line.split(" ", 1)[1])


def test_no_notebook_runs_as_root_or_writes_the_host_kernels_settings(attacked):
    """As root, the kernel is a leased uid with no groups; whoever grades, nothing under /proc
    or /sys opens for writing (sysctls, sysrq-trigger, /proc/self/*), so none was written."""
    seen = said(attacked, "rooter", "ROOTER")
    assert seen["writable"] == [] and seen["wrote"] == []
    if os.geteuid() == 0:
        assert 0 not in (seen["uid"], seen["euid"], seen["gid"]) and seen["groups"] == []
    else:
        assert seen["uid"] == os.geteuid()
    assert rows_of(attacked, "rooter")["execution"]["status"] == "ok"


def test_the_hidden_checks_probe_is_no_more_privileged(attacked):
    hidden = rows_of(attacked, "prober")["sgd_step on the grader's batches"]
    assert hidden["status"] == "fail" and "PROBED" in hidden["reason"], f"{hidden['status']}: {hidden['reason']}"
    # what the probe saw, as its exception said it (TensorFlow may wrap it: the step is traced first)
    facts = re.search(r"PROBED uid=(\d+) gid=(\d+) groups=(\[[^\]]*\]) writable=(\d+)", hidden["reason"])
    assert facts, hidden["reason"]
    uid, gid, groups, writable = facts.groups()
    assert writable == "0"
    if os.geteuid() == 0:
        assert int(uid) != 0 and int(gid) != 0 and groups == "[]"


def test_a_full_disk_is_a_row_and_leaves_the_machine_its_space(attacked):
    """The work folder, /tmp and /dev/shm each stop at the rubric's disk_mb; the run is a `disk`
    row that says so; nothing of it is left on the host once it was checked."""
    run = rows_of(attacked, "filler")["execution"]
    assert run["status"] == "disk" and f"filled its {DISK_MB} MB of disk" in run["reason"], run
    spare = said(attacked, "filler", "FILLED")
    for where, (written, errno) in spare.items():
        assert written <= DISK_MB * 2**20 and errno in (27, 28), (where, written, errno)  # EFBIG or ENOSPC
    out = attacked["root"] / "out"
    assert [p for p in (out / ".work").rglob("*") if p.is_file()] == []
    on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    assert on_disk < 100 * 2**20, on_disk
    assert not list(Path(tempfile.gettempdir()).glob("labkit-disks-*/*/work/fill"))


def test_a_stderr_flood_leaves_a_capped_log(attacked):
    from labkit.grading.run import logcap

    assert rows_of(attacked, "flooder")["execution"]["status"] == "ok"
    log = (attacked["root"] / "out" / "flooder" / "01_single_node_lr.log").read_bytes()
    assert len(log) <= logcap.HEAD + logcap.TAIL + 4096, len(log)
    assert b"FLOOD-START" in log[: logcap.HEAD] and b"FLOOD-END" in log[-logcap.TAIL :]
    assert b"bytes of output were cut here" in log


def test_no_core_dump(attacked):
    seen = said(attacked, "dumper", "DUMPER")
    assert not seen["raised"] and seen["limit"] == [0, 0] and seen["code"] == -6
    assert not [f for f in seen["files"] if f.startswith("core")]


def test_the_graders_state_cannot_be_forged(attacked):
    """From its work folder a notebook reaches no ledger, manifest, rubric copy, grades or key;
    the victim's stored outcome still holds its signature."""
    from labkit.grading.run import ledger
    from labkit.grading.gradebook.publish import Book

    tried = said(attacked, "forger", "FORGER")
    assert not [k for k, v in tried.items() if v == "written" or v.startswith("read ")], tried
    book = Book.load(attacked["root"] / "out")  # the manifest and the rubric copy hold
    victim = next(j for j in book.jobs if j.student == "victim")
    assert ledger.load_outcome(victim)["rows"][0]["status"] == "ok"
    assert b"forged" not in attacked["grades"].read_bytes()
    assert b"forged" not in (attacked["root"] / "out" / "victim" / "01_single_node_lr.ipynb").read_bytes()


CLASSMATE_A = textwrap.dedent("""\
    # listens on an abstract Unix socket and leaves files in /tmp and /dev/shm, for 15 s
    import json, os, socket, time
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind('\\0labkit-classmates')
    s.listen()
    s.settimeout(0.5)
    for folder in ('/tmp', '/dev/shm'):
        open(f'{folder}/labkit-classmates', 'w').write('secret')
    start, got = time.time(), []
    while time.time() - start < 15:
        try:
            conn, _ = s.accept()
            got.append(conn.recv(100).decode())
        except socket.timeout:
            pass
    print('A', json.dumps({'start': start, 'end': time.time(), 'got': got, 'uid': os.getuid()}))""")
CLASSMATE_B = textwrap.dedent("""\
    # for 15 s: connects to A's socket, looks for A's files and processes, and signals all it may
    import json, os, signal, socket, time
    start, reached, seen = time.time(), [], set()
    try:
        os.kill(-1, signal.SIGKILL)            # every process this user may signal, but itself
    except OSError:
        pass
    while time.time() - start < 15:
        try:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect('\\0labkit-classmates')
            c.send(b'hello')
            reached.append('socket')
        except OSError:
            pass
        seen |= {f for f in ('/tmp/labkit-classmates', '/dev/shm/labkit-classmates') if os.path.exists(f)}
        time.sleep(0.3)
    procs = [p for p in os.listdir('/proc') if p.isdigit()]
    print('B', json.dumps({'start': start, 'end': time.time(), 'reached': reached, 'seen': sorted(seen),
                           'procs': len(procs), 'uid': os.getuid()}))""")


def test_classmates_running_together_cannot_reach_each_other(tmp_path):
    """Two notebooks at once: no abstract socket, file in /tmp or /dev/shm, or signal crosses
    from one run to the other (a network, mount and PID namespace each, and, as root, a uid each)."""
    if runs_share_limits():
        pytest.skip(f"needs two runs at once; this user's grader runs one at a time: {runs_share_limits()}")
    subs = tmp_path / "subs"
    (tmp_path / "rubric.toml").write_text(
        textwrap.dedent("""\
        [labs.pair]
        notebook = "pair.ipynb"
        [[labs.pair.checks]]
        name = "ran"
        kind = "record"
        points = 1
        record = "never"
    """)
    )
    write(subs / "a" / "pair.ipynb", code_notebook(CLASSMATE_A))
    write(subs / "b" / "pair.ipynb", code_notebook(CLASSMATE_B))
    outcome = grade(
        GradeOptions(tmp_path / "rubric.toml", subs, tmp_path / "out", parallel=runs_at_once(2)), log=lambda m: None
    )
    assert [r["status"] for r in outcome.rows if r["check"] == "execution"] == ["ok", "ok"]

    def said_by(student, word):
        nb = nbformat.read(str(tmp_path / "out" / student / "pair.ipynb"), as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        return json.loads(next(ln for ln in text.splitlines() if ln.startswith(word + " ")).split(" ", 1)[1])

    a, b = said_by("a", "A"), said_by("b", "B")
    assert a["start"] < b["end"] and b["start"] < a["end"], (a, b)  # they did run at the same time
    assert a["got"] == [] and b["reached"] == [] and b["seen"] == []
    assert b["procs"] < 20  # its own kernel's few processes, none of A's
    if os.geteuid() == 0:
        assert a["uid"] != b["uid"]


def test_a_forged_outcome_is_run_again_with_a_note(tmp_path):
    """Between two batches someone rewrites one stored outcome (full points) and copies another
    student's over a third: neither is trusted, both notebooks run again and their rows say why;
    the untouched one is kept."""
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(
        textwrap.dedent("""\
        [labs.one]
        notebook = "one.ipynb"
        [[labs.one.checks]]
        name = "recorded"
        kind = "record"
        points = 1
        record = "x"
    """)
    )
    for student, value in (("ann", None), ("bob", 1), ("cat", None)):
        code = "import labkit\nlabkit.record('x', 1)" if value else "pass"
        write(tmp_path / "subs" / student / "one.ipynb", code_notebook(code))
    out = tmp_path / "out"
    first = grade(GradeOptions(rubric, tmp_path / "subs", out, parallel=runs_at_once(2)), log=lambda m: None)
    assert {r["student"]: r["points"] for r in first.rows if r["check"] == "recorded"} == {"ann": 0, "bob": 1, "cat": 0}
    forged = json.loads((out / ".grader" / "ann" / "one" / "outcome.json").read_text())
    forged["rows"][1].update(points=1.0, status="pass", reason="")
    (out / ".grader" / "ann" / "one" / "outcome.json").write_text(json.dumps(forged))
    (out / ".grader" / "cat" / "one" / "outcome.json").write_bytes(
        (out / ".grader" / "bob" / "one" / "outcome.json").read_bytes()
    )
    notes = []
    second = grade(GradeOptions(rubric, tmp_path / "subs", out, parallel=runs_at_once(2)), log=notes.append)
    assert sorted(second.ran) == [("ann", "one"), ("cat", "one")] and second.kept == [("bob", "one")]
    rows = {(r["student"], r["check"]): r for r in second.rows}
    assert {s: rows[(s, "recorded")]["points"] for s in ("ann", "bob", "cat")} == {"ann": 0, "bob": 1, "cat": 0}
    for student in ("ann", "cat"):
        assert "not as the grader wrote it" in rows[(student, "execution")]["reason"]
        assert any(n.startswith(f"note: {student}/one.ipynb: its stored outcome") for n in notes)
