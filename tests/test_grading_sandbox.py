"""The sandbox and the limits on their own, without a kernel: what a sandboxed process sees and
cannot do, and limits it cannot raise or escape."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from helpers import wait_while
from labkit.grading import limits
from labkit.grading.sandbox import SANDBOXES, View

BWRAP = SANDBOXES["bwrap"]
needs_bwrap = pytest.mark.skipif(BWRAP.unavailable() is not None, reason=f"{BWRAP.unavailable()} (.ci/run installs it)")


def run_inside(tmp_path, code: str, **view_args) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    view = View(cwd=work, env={"SEEN": "yes"}, scratch=tmp_path, rw=[work], **view_args)
    cmd, env = BWRAP.command([sys.executable, "-c", textwrap.dedent(code)], view)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


@needs_bwrap
def test_a_sandboxed_process_sees_its_folder_and_nothing_of_the_grader(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_GRADER_SECRET", "x")
    (tmp_path / "outside.txt").write_text("the grader's")
    r = run_inside(tmp_path, f"""
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
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] in ("2 True", "1 True")  # a PID namespace of its own
    assert (tmp_path / "work" / "mine.txt").read_text() == "ok"
    assert lines[1:4] == [f"{tmp_path / 'outside.txt'} False", "/root/.bashrc False", "/etc/shadow False"]
    assert lines[4] == "usr 30"  # EROFS
    assert lines[5].startswith("net ") and lines[6] == "env ['SEEN']"


@needs_bwrap
def test_nothing_a_sandboxed_process_starts_outlives_it(tmp_path):
    marker = "4242.4"
    r = run_inside(tmp_path, f"""
        import os, subprocess
        subprocess.Popen(['setsid', 'sleep', '{marker}'])
        if os.fork() == 0:
            os.setsid()
            os.execvp('sleep', ['sleep', '{marker}'])
        print('started')
    """)
    assert r.stdout.strip() == "started"
    wait_while(lambda: _running(marker), 10, 0.1, "what the sandboxed process started to end with it")


def _running(marker: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]


def test_the_data_limit_cannot_be_raised_again(tmp_path):
    code = textwrap.dedent("""
        import resource, sys
        from labkit.grading.limits import limit_self
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
        r = subprocess.run(group.enter_command([sys.executable, "-c", "x = bytearray(400 * 2**20); print('got it')"]),
                           capture_output=True, text=True, timeout=60)
        assert "got it" not in r.stdout and group.oom_kills() >= 1
        forks = subprocess.Popen(group.enter_command([sys.executable, "-c", textwrap.dedent("""
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
        """)]), stdout=subprocess.PIPE, text=True)
        n = int(forks.stdout.readline())
        assert n < 40 and group.task_limit_hits() >= 1
        assert len(group.pids()) == n + 1
        killed = group.kill()
        assert len(killed) >= n + 1 and group.pids() == []
        forks.wait(10)
    finally:
        group.close()
    assert not any(d.exists() for d in group.dirs)


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
