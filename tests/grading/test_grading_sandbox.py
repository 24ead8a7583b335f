"""The sandbox and the limits on their own, without a kernel: what a sandboxed process sees and
cannot do (as which user, which files, which /proc), limits it cannot raise or escape, the run's
disk and capped log, the probe's plain definitions, and the grader's signed state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import WRITABLE, wait_until, wait_while
from labkit.grading.run import limits
from labkit.grading.run.sandbox import SANDBOXES, View, lease_account

BWRAP = SANDBOXES["bwrap"]
needs_bwrap = pytest.mark.skipif(BWRAP.unavailable() is not None, reason=f"{BWRAP.unavailable()} (.ci/run installs it)")
ROOT = os.geteuid() == 0


def run_inside(tmp_path, code: str, **view_args) -> subprocess.CompletedProcess:
    """``code`` in the sandbox as a run's account (a leased uid under root), its folder writable."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    account = view_args.pop("account", None) or lease_account()
    if account.uid is not None:
        os.chown(work, account.uid, account.gid)
    view = View(cwd=work, env={"SEEN": "yes"}, scratch=tmp_path, rw=[work], account=account, **view_args)
    cmd, env = BWRAP.command([sys.executable, "-c", textwrap.dedent(code)], view)
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        account.release()


@needs_bwrap
def test_a_grader_in_a_symlinked_venv_runs_the_sandbox_in_that_venv(tmp_path):
    """``.venv`` may be a link (to a shared or cached environment): inside, the interpreter is
    still found by the link's name and still runs the venv, with its packages."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a venv")
    link = tmp_path / "linked-venv"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = link / "bin" / Path(sys.executable).name
    code = f"""
        import sys
        from labkit.grading.run.sandbox import SANDBOXES, View
        cmd, env = SANDBOXES["bwrap"].command(
            [sys.executable, "-c", "import sys, nbformat; print(sys.prefix)"],
            View(cwd=__import__("pathlib").Path("/"), env={{}}, scratch=__import__("pathlib").Path({str(tmp_path)!r})))
        import subprocess
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        print(r.returncode, r.stdout.strip(), r.stderr.strip()[-500:])
    """
    r = subprocess.run(
        [str(python), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).parents[2],
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["0", str(link)], r.stdout


@needs_bwrap
def test_a_sandboxed_process_sees_its_folder_and_nothing_of_the_grader(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_GRADER_SECRET", "x")
    (tmp_path / "outside.txt").write_text("the grader's")
    r = run_inside(
        tmp_path,
        f"""
        import os, socket
        print(os.getpid(), os.getcwd() == {str(tmp_path / "work")!r})
        open('mine.txt', 'w').write('ok')
        for path in ({str(tmp_path / "outside.txt")!r}, '/root/.bashrc', '/etc/shadow'):
            print(path, os.path.exists(path))
        try:
            open('/usr/x', 'w')
        except OSError as e:
            print('usr', e.errno)
        try:
            socket.create_connection(('1.1.1.1', 53), timeout=2)
        except OSError as e:
            print('net', type(e).__name__)
        print('env', sorted(k for k in os.environ if k in ('SEEN', 'LABKIT_GRADER_SECRET')))
    """,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] in ("2 True", "1 True")  # a PID namespace of its own
    assert (tmp_path / "work" / "mine.txt").read_text() == "ok"
    assert lines[1:4] == [f"{tmp_path / 'outside.txt'} False", "/root/.bashrc False", "/etc/shadow False"]
    assert lines[4] == "usr 30"  # EROFS
    assert lines[5].startswith("net ") and lines[6] == "env ['SEEN']"


@needs_bwrap
def test_no_sandboxed_process_is_root_and_nothing_under_proc_or_sys_opens_for_writing(tmp_path):
    """As root, the run's user is a leased uid with no groups and no capabilities; as anyone,
    no file under /proc (sysctls, sysrq-trigger, /proc/self/*) or /sys opens for writing, so a
    notebook cannot change the host kernel's settings, and no core dump is written."""
    r = run_inside(
        tmp_path,
        WRITABLE
        + textwrap.dedent("""
        import json, os, resource
        print('WRITABLE', json.dumps(writable()))
        status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
        print('ID', json.dumps([os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), status['CapEff'].strip(),
                                status['CapBnd'].strip(), status['NoNewPrivs'].strip()]))
        print('CORE', json.dumps(resource.getrlimit(resource.RLIMIT_CORE)))
        for path, text in (('/proc/sys/kernel/core_pattern', '|/bin/sh'), ('/proc/sysrq-trigger', 'h'),
                           ('/proc/self/oom_score_adj', '-1000'), ('/proc/sys/vm/drop_caches', '1')):
            try:
                open(path, 'w').write(text)
                print('WROTE', path)
            except OSError as e:
                print('REFUSED', path)
    """),
    )
    assert r.returncode == 0, r.stderr
    out = {line.split()[0]: line.split(None, 1)[1] for line in r.stdout.splitlines() if " " in line}
    assert json.loads(out["WRITABLE"]) == []
    uid, euid, gid, groups, cap_eff, cap_bnd, nnp = json.loads(out["ID"])
    if ROOT:
        assert min(uid, euid, gid) >= 1_000_000 and groups == []
        assert (cap_eff, cap_bnd, nnp) == ("0" * 16, "0" * 16, "1")
    else:
        assert uid == os.geteuid()
    assert json.loads(out["CORE"]) == [0, 0]
    assert "WROTE" not in out and r.stdout.count("REFUSED") == 4


@needs_bwrap
@pytest.mark.skipif(not ROOT, reason="uids are leased only by a root grader")
def test_a_leased_uid_is_one_runs_alone(monkeypatch):
    """Two leases never share a uid; a uid that still has a process is skipped; a released
    uid may be leased again; the leases are locks, so another grader process sees them too."""
    from labkit.grading.run import sandbox

    a, b = lease_account(), lease_account()
    try:
        assert a.uid != b.uid and a.uid >= sandbox.UID_BASE and a.gid == a.uid
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import fcntl, os, sys\n"
                f"fd = os.open('{sandbox._lease_folder()}/{a.uid}', os.O_RDWR)\n"
                "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('got')\n"
                "except BlockingIOError:\n    print('held')",
            ],
            capture_output=True,
            text=True,
        )
        assert other.stdout.strip() == "held"
        free = b.uid
        b.release()
        squatter = subprocess.Popen(
            ["setpriv", f"--reuid={free}", f"--regid={free}", "--clear-groups", "sleep", "4242.7"]
        )
        try:
            wait_until(lambda: sandbox.uid_in_use(free), 10, 0.05, f"a process to run as uid {free}")
            monkeypatch.setattr(sandbox.random, "randrange", lambda n: free - sandbox.UID_BASE)
            c = lease_account()
            assert c.uid == free + 1  # skipped: a process still runs as it
            c.release()
        finally:
            squatter.kill()
            squatter.wait()
        d = lease_account()
        assert d.uid == free
        d.release()
    finally:
        a.release()
        b.release()


@needs_bwrap
def test_nothing_a_sandboxed_process_starts_outlives_it(tmp_path):
    marker = "4242.4"
    r = run_inside(
        tmp_path,
        f"""
        import os, subprocess
        subprocess.Popen(['setsid', 'sleep', '{marker}'])
        if os.fork() == 0:
            os.setsid()
            os.execvp('sleep', ['sleep', '{marker}'])
        print('started')
    """,
    )
    assert r.stdout.strip() == "started"
    wait_while(lambda: _running(marker), 10, 0.1, "what the sandboxed process started to end with it")


def _running(marker: str) -> list[int]:
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def test_the_data_limit_cannot_be_raised_again(tmp_path):
    code = textwrap.dedent("""
        import resource, sys
        from labkit.grading.run.limits import limit_self
        limit_self(2**30)
        print(resource.getrlimit(resource.RLIMIT_DATA))
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print('raised')
        except ValueError:
            print('refused')
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == [f"({2**30}, {2**30})", "refused"], r.stderr


cgroups = pytest.mark.skipif(limits.best_backend() == "rlimit", reason="no cgroup this process may create here")


@cgroups
def test_a_group_caps_memory_and_tasks_and_ends_everything_in_it(tmp_path):
    group = limits.open_group(f"test-{os.getpid()}", 150 * 2**20, 40)
    try:
        r = subprocess.run(
            group.enter_command([sys.executable, "-c", "x = bytearray(400 * 2**20); print('got it')"]),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "got it" not in r.stdout and group.oom_kills() >= 1
        forks = subprocess.Popen(
            group.enter_command(
                [
                    sys.executable,
                    "-c",
                    textwrap.dedent("""
            import os, time
            n = 0
            try:
                while True:
                    if os.fork() == 0:
                        os.setsid()
                        time.sleep(600)
                    n += 1
            except OSError:
                print(n, flush=True)
            time.sleep(600)
        """),
                ]
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        n = int(forks.stdout.readline())
        assert n < 40 and group.task_limit_hits() >= 1
        assert len(group.pids()) == n + 1
        killed = group.kill()
        assert len(killed) >= n + 1 and group.pids() == []
        forks.wait(10)
    finally:
        group.close()
    assert not any(d.exists() for d in group.dirs)


@cgroups
def test_a_grader_starting_beside_another_leaves_its_empty_groups_alone():
    """A group is empty from its making until its process enters it. A grader starting then (a
    second batch, another test worker) removes only the empty groups whose maker has ended: a run
    of a class once found its group gone ("cgroup.procs: Directory nonexistent") and its check
    unverified."""
    live = limits.open_group("waiting", 2**30, 64)  # made here, entered by nobody yet
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [d.parent / f"{limits.PREFIX}{dead.pid}-left" for d in live.dirs]
    for d in stale:
        d.mkdir()
    try:
        removed = limits.remove_stale()
        assert all(d.exists() for d in live.dirs) and not any(d in removed for d in live.dirs)
        assert set(stale) <= set(removed) and not any(d.exists() for d in stale)
        assert all(d.name.startswith(f"{limits.PREFIX}{os.getpid()}-") for d in live.dirs)
    finally:
        live.close()
        for d in stale:
            if d.exists():
                d.rmdir()


def test_an_unconfined_run_is_not_sent_into_the_graders_slurm_allocation(tmp_path, monkeypatch):
    """``--no-sandbox`` inside ``salloc``: the notebook's clusters must still run on this machine,
    so neither the grader's Slurm allocation nor its LABKIT_* settings reach the kernel."""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_NODELIST", "node[0-1]")
    monkeypatch.setenv("LABKIT_LAUNCHER", "slurm")
    view = View(cwd=tmp_path, env={"SEEN": "yes"}, scratch=tmp_path)
    _, env = SANDBOXES["none"].command(["true"], view)
    assert env["SEEN"] == "yes" and "PATH" in env
    assert not [k for k in env if k.startswith(("SLURM_", "LABKIT_"))]


# ----------------------------------------------------------------------------------- the run's disk


def test_a_runs_disk_is_capped_private_and_gone_after(tmp_path):
    """A tmpfs of the run's size in the holder's namespace, bound over the work folder: full at
    its size, its files invisible on the host (but to the grader through the holder), owned by
    the run's user, and gone once closed, as is everything when the holder ends."""
    from labkit.grading.run import disks

    try:
        holder = disks.Holder()
    except OSError as e:
        pytest.skip(str(e))
    account = lease_account()
    work = tmp_path / "work"
    work.mkdir()
    try:
        disk = holder.open(work, 8 * 2**20, account.uid, account.gid)
        write = ["dd", "if=/dev/zero", f"of={work}/fill", "bs=1M", "count=20"]  # root has no reserve there
        r = subprocess.run([*disk.prefix, *write], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "No space left on device" in r.stderr
        assert list(work.iterdir()) == []  # not on the host
        inside = disk.outside(work / "fill")
        assert 7 * 2**20 <= inside.stat().st_size <= 8 * 2**20 and disk.full()
        for part in disks.PARTS:
            st = disk.outside(disk.root / part).stat()
            assert (st.st_uid, oct(st.st_mode & 0o777)) == (account.uid if ROOT else os.geteuid(), "0o700")
        disk.close()
        assert not work.exists() and not disk.outside(disk.root).exists()
        (tmp_path / "w2").mkdir()
        again = holder.open(tmp_path / "w2", 2**20, account.uid, account.gid)
        assert again.outside(again.root).is_dir()
    finally:
        holder.close()
        account.release()
    assert not holder.container.exists()


def test_usage_of_a_host_folder_counts_files_not_links(tmp_path):
    from labkit.grading.run import disks

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to("/usr")
    assert 100_000 <= disks.usage(tmp_path) < 200_000


# ----------------------------------------------------------------------------------- the capped log


def test_a_flood_keeps_the_head_the_tail_and_a_note(tmp_path):
    """300 MB through ``logcap`` (as the grader's check processes run) leave at most the head,
    a note of the cut and the tail; the exit code is the command's."""
    from labkit.grading.run import logcap

    log = tmp_path / "x.log"
    log.write_text("before\n")
    flood = (
        "import os\nos.write(1, b'FIRST\\n')\nchunk = b'y' * 2**20\n"
        "for _ in range(300):\n    os.write(2, chunk)\nos.write(1, b'\\nLAST\\n')\nraise SystemExit(3)"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", logcap.__file__, str(log), "--", sys.executable, "-c", flood], timeout=120
    )
    assert r.returncode == 3
    text = log.read_bytes()
    assert len(text) <= logcap.HEAD + logcap.TAIL + 200
    assert text.startswith(b"before\nFIRST\n") and text.endswith(b"\nLAST\n")
    assert (
        b"bytes of output were cut here" in text
        and f"{300 * 2**20 + 12 - logcap.HEAD - logcap.TAIL:,}".encode() in text
    )


def test_a_capped_log_flushes_its_tail_as_it_goes(tmp_path):
    from labkit.grading.run import logcap

    log = logcap.CappedLog(tmp_path / "y.log", head=10, tail=10)
    log.write(b"0123456789abcdefghijklmnopqrstuvwxyz")
    log.flush()
    text = (tmp_path / "y.log").read_bytes()
    assert text.startswith(b"0123456789\n[labkit] 16 bytes") and text.endswith(b"qrstuvwxyz")
    log.write(b"!")
    log.close()
    assert (tmp_path / "y.log").read_bytes().endswith(b"rstuvwxyz!")


# ----------------------------------------------------------------------------------- the probe


def test_the_probe_runs_no_statement_of_the_notebook(tmp_path, monkeypatch):
    """Only plain definitions are taken: decorators, defaults, annotations, class bodies,
    metaclasses and ``__init_subclass__`` that would run code are dropped or refused, each with
    a note; what is taken still works."""
    from labkit.grading.judge import probe

    monkeypatch.chdir(tmp_path)
    code = textwrap.dedent("""
        import os
        open('top-level', 'w')
        def mark(name):
            open(name, 'w')
            return lambda f: f
        @mark('decorator')
        def sgd_step(W, b, x, y, learning_rate=0.5, *, sep=os.sep) -> mark('annotation'):
            return learning_rate
        def hook(x=mark('default')):
            pass
        class Base:
            def __init_subclass__(cls):
                open('init-subclass', 'w')
        class Meta(type):
            pass
        class WithMeta(metaclass=Meta):
            pass
        class Body:
            x: mark('class-annotation') = 3
            mark('class-body')
        class Fine:
            "a docstring"
            rate: float = 0.5
            @property
            def twice(self, k=2):
                return self.rate * k
        RATE = 0.5
        COMPUTED = len(open('assignment', 'w').name)
    """)
    cells = [
        {"cell_type": "markdown", "source": "# Lab"},
        {"cell_type": "code", "source": code},
        {"cell_type": "code", "source": "def broken(:"},
    ]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    fns, notes = probe.load_functions(
        tmp_path / "nb.ipynb", ["sgd_step", "hook", "Base", "WithMeta", "Body", "Fine", "mark"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.ipynb"]  # nothing ran
    assert sorted(fns) == ["Fine", "mark", "sgd_step"]
    assert fns["sgd_step"](1, 2, 3, 4) == 0.5 and fns["Fine"]().twice == 1.0
    text = "\n".join(notes)
    for words in (
        "sgd_step taken without its decorator(s) @mark('decorator')",
        "default value \"mark('default')\"",
        "defines __init_subclass__",
        "keyword arguments (metaclass=Meta)",
        "class Body runs a statement in its body (mark('class-body'))",
        "cell 3: not Python",
    ):  # cells as JupyterLab numbers them, from 1
        assert words in text, (words, text)
    assert all(n.startswith("cell 2 line ") for n in notes if "not Python" not in n), notes


def test_a_method_decorator_the_notebook_rebinds_is_not_taken(tmp_path, monkeypatch):
    """``@property`` in a class is taken only while it is Python's own: a notebook that defines its
    own ``property`` above the class would run it when the class is defined."""
    from labkit.grading.judge import probe

    monkeypatch.chdir(tmp_path)
    code = textwrap.dedent("""
        def property(f):
            open('rebound', 'w')
            return f
        class Uses:
            @property
            def x(self):
                return 1
    """)
    nb = {"cells": [{"cell_type": "code", "source": code}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    fns, notes = probe.load_functions(tmp_path / "nb.ipynb", ["Uses"])
    assert fns == {} and any("has the decorator @property" in n for n in notes), notes
    assert not (tmp_path / "rebound").exists()


def test_the_probe_runs_only_the_imports_the_functions_use(tmp_path, monkeypatch):
    """A check of a function that uses only NumPy does not import what the notebook imports for
    its other cells; one name of a multi-name import is imported alone; a function that looks
    names up by string (``globals()``) gets every import."""
    import sys

    from labkit.grading.judge import probe

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("heavy", "light", "other"):
        (pkg / f"{name}.py").write_text(f"open({str(tmp_path / name)!r}, 'w')\nVALUE = {name!r}\n")
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = textwrap.dedent("""
        import numpy as np
        import pkg.heavy as heavy
        from pkg import light, other
        SCALE = 2.0
        def helper(x):
            return light.VALUE, SCALE * np.asarray(x)
        def wanted(x):
            return helper(x)
        def unwanted():
            return heavy.VALUE
        def dynamic():
            return globals()["heavy"].VALUE
    """)
    nb = {"cells": [{"cell_type": "code", "source": code}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))

    def imported():
        return sorted(p.name for p in tmp_path.iterdir() if p.name in ("heavy", "light", "other"))

    fns, notes = probe.load_functions(tmp_path / "nb.ipynb", ["wanted"])
    assert fns["wanted"]([1.0])[0] == "light" and float(fns["wanted"]([1.0])[1][0]) == 2.0 and not notes
    assert imported() == ["light"]
    for name in ("pkg", "pkg.heavy", "pkg.light", "pkg.other"):
        sys.modules.pop(name, None)
    fns, _ = probe.load_functions(tmp_path / "nb.ipynb", ["dynamic"])
    assert fns["dynamic"]() == "heavy" and imported() == ["heavy", "light", "other"]
    for name in ("pkg", "pkg.heavy", "pkg.light", "pkg.other"):
        sys.modules.pop(name, None)


# ----------------------------------------------------------------------------------- the grader's state


def test_the_graders_state_is_signed(tmp_path, monkeypatch):
    """An outcome changed, copied to another student, or unsigned is not trusted (and says
    why); a changed manifest or rubric copy stops a rebuild; the key is the grader's alone."""
    from types import SimpleNamespace

    from labkit.grading.run import ledger

    monkeypatch.setenv(ledger.KEY_ENV, str(tmp_path / "keys" / "grader.key"))
    out = tmp_path / "out"

    def job(student):
        return SimpleNamespace(
            student=student, lab=SimpleNamespace(key="lab1"), private=out / ".grader" / student / "01_single_node_lr"
        )

    good = {"rows": [{"lab": "lab1", "check": "execution", "status": "ok", "points": 0}], "records": {"acc": 0.1}}
    for student in ("ann", "bob"):
        ledger.save_outcome(job(student), good)
    assert ledger.load_outcome(job("ann")) == good and ledger.integrity(job("ann")) is None
    assert oct((tmp_path / "keys" / "grader.key").stat().st_mode & 0o777) == "0o600"

    forged = json.loads(ledger.outcome_path(job("ann")).read_text())
    forged["records"]["acc"] = 0.99
    ledger.outcome_path(job("ann")).write_text(json.dumps(forged))
    assert ledger.load_outcome(job("ann")) is None and "not as the grader wrote it" in ledger.integrity(job("ann"))
    ledger.outcome_path(job("ann")).write_bytes(ledger.outcome_path(job("bob")).read_bytes())  # bob's, as ann's
    assert ledger.load_outcome(job("ann")) is None
    ledger.outcome_path(job("ann")).write_text(json.dumps(good))  # unsigned
    assert ledger.load_outcome(job("ann")) is None and ledger.integrity(job("ann"))
    assert ledger.integrity(job("cat")) is None  # none at all: nothing to say

    (out / ".grader" / "rubric.toml").write_text("[defaults]\n")
    ledger.write_manifest(out, {"labs": ["lab1"], "jobs": []})
    assert ledger.read_manifest(out) == {"labs": ["lab1"], "jobs": []}
    assert oct((out / ".grader").stat().st_mode & 0o777) == "0o700"
    (out / ".grader" / "rubric.toml").write_text("[defaults]\nmemory_mb = 1\n")
    with pytest.raises(ledger.IntegrityError, match="rubric copy"):
        ledger.read_manifest(out)
    (out / ".grader" / "rubric.toml").write_text("[defaults]\n")
    manifest = json.loads((out / ".grader" / ledger.MANIFEST).read_text())
    manifest["labs"] = ["lab9"]
    (out / ".grader" / ledger.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ledger.IntegrityError):
        ledger.read_manifest(out)
    os.chmod(tmp_path / "keys" / "grader.key", 0o644)
    ledger._key.cache_clear()
    with pytest.raises(ledger.IntegrityError, match="mode 0600"):
        ledger.save_outcome(job("ann"), good)
    ledger._key.cache_clear()


def test_a_killed_graders_empty_disk_folder_is_removed_by_the_next():
    """A grader killed with SIGKILL leaves the empty host folder its holder mounted over (the
    mounts end with the namespace); the next holder removes it, and no live grader's."""
    import tempfile

    from labkit.grading.run import disks

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=f"{disks.CONTAINER}{dead.pid}-"))
    live = Path(tempfile.mkdtemp(prefix=f"{disks.CONTAINER}{os.getpid()}-"))
    try:
        assert stale in disks.remove_stale() and not stale.exists() and live.exists()
    finally:
        live.rmdir()
        if stale.exists():
            stale.rmdir()
