"""The fork server (``labkit.distributed.launchers.forkserver``): a task forked from it behaves, for whoever
started its stand-in, as a process of its own would: arguments, environment, working directory,
streams, exit status and signals; and nothing it starts outlives its owner."""

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from helpers import wait_until
from labkit.distributed.launchers import forkserver

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only")


@pytest.fixture(scope="module")
def server():
    s = forkserver.ForkServer()
    yield s
    s.stop()


def start(server, code: str, out, **kwargs) -> subprocess.Popen:
    """The stand-in of a task running ``code``, as the launcher starts one (output to ``out``)."""
    return subprocess.Popen(
        [server.python, "-c", code],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        **kwargs,
    )


def wait_for_line(path, prefix: str, timeout: float = 60) -> str:
    def first():
        return next((x for x in path.read_text().splitlines() if x.startswith(prefix)), None)

    return wait_until(first, timeout, 0.02, lambda: f"a line {prefix!r} in {path}: {path.read_text()!r}")


@pytest.mark.tensorflow
def test_a_forked_task_gets_its_arguments_environment_directory_and_streams(server, tmp_path):
    log = tmp_path / "log"
    code = (
        "import os, sys, json, tensorflow; print('task', json.dumps([os.getpid(), os.getppid(), os.getcwd(), "
        "os.environ.get('X_TEST'), sys.argv, json.loads(os.environ['LABKIT_FORKSERVER'])['pid']])); "
        "print('oops', file=sys.stderr); sys.exit(3)"
    )
    with open(log, "w") as out:
        stand_in = start(server, code, out, cwd=tmp_path, env={**os.environ, "X_TEST": "yes"})
        assert stand_in.wait(60) == 3  # the task's exit code
    pid, parent, cwd, x, argv, server_pid = json.loads(wait_for_line(log, "task ")[5:])
    assert pid != stand_in.pid and parent == server_pid == server.process.pid  # forked, not started afresh
    assert cwd == str(tmp_path) and x == "yes" and argv == ["-c"]
    assert "oops" in log.read_text()


@pytest.mark.tensorflow
def test_signals_reach_the_task_and_its_stand_in_ends_as_it_did(server, tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as out:
        stand_in = start(server, "import os, time; print('task', os.getpid(), flush=True); time.sleep(60)", out)
        pid = int(wait_for_line(log, "task ").split()[1])
        stand_in.send_signal(signal.SIGTERM)
        assert stand_in.wait(10) == -signal.SIGTERM  # the task died of it; so does its stand-in
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_signal_that_reaches_a_task_before_its_own_handlers_ends_it(tmp_path):
    """The server's SIGTERM handler removes its folder; a task forked from it gets a SIGTERM the
    moment it exists when its stand-in was stopped during start. Blocked across the fork, the
    signal waits for the task's own dispositions, then ends it: no server handler runs in the task,
    and the signal is not lost (the task would then sleep until SIGKILL)."""
    marker = tmp_path / "server-handler-ran"
    code = f"""
import signal, threading, time
from labkit.distributed.launchers import forkserver
signal.signal(signal.SIGTERM, lambda *a: open({str(marker)!r}, "w").close())  # the server's, as inherited
held = signal.pthread_sigmask(signal.SIG_BLOCK, forkserver.TASK_SIGNALS)  # as the server forks
# the stand-in's forwarded SIGTERM, before the task is set up (to this thread: a forked task has no other)
signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
forkserver.become_task_signals(held)
time.sleep(30)
"""
    r = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert r.returncode == -signal.SIGTERM and not marker.exists()


@pytest.mark.tensorflow
def test_a_task_dies_with_its_stand_in_whatever_kills_it(server, tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as out:
        stand_in = start(server, "import os, time; print('task', os.getpid(), flush=True); time.sleep(60)", out)
        task = psutil.Process(int(wait_for_line(log, "task ").split()[1]))
        stand_in.kill()  # SIGKILL: nothing can be forwarded; the task's lifeline ends it
        assert stand_in.wait(10) == -signal.SIGKILL
    gone, _ = psutil.wait_procs([task], timeout=5)
    assert gone, f"task {task.pid} outlived its stand-in"


def test_without_a_server_the_stand_in_runs_the_task_itself(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(forkserver.CLIENT),
            sys.executable,
            str(tmp_path / "no-socket"),
            "-c",
            "import os; print('plain', os.getpid())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("plain "), done


@pytest.mark.slow
def test_the_server_and_its_tasks_die_with_the_process_that_started_them(tmp_path):
    log = tmp_path / "log"
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from labkit.distributed.launchers import forkserver; from labkit.core.proc import "
            "OwnedProcess; s = forkserver.get(); "  # the launcher starts stand-ins so
            "task = OwnedProcess([s.python, '-c', 'import time; time.sleep(120)'], sys.argv[1])"
            ".start(); print('ready', s.process.pid, task.pid, flush=True); time.sleep(120)",
            str(tmp_path / "task.log"),
        ],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _, server_pid, stand_in_pid = wait_for_line(log, "ready ", timeout=180).split()
        server = psutil.Process(int(server_pid))
        tasks = [c for c in server.children() if c.pid != int(stand_in_pid)] or wait_until(
            server.children, 30, 0.05, "the server to fork the task"
        )
        owner.kill()  # SIGKILL: no cleanup runs in it
        gone, alive = psutil.wait_procs([server, psutil.Process(int(stand_in_pid)), *tasks], timeout=15)
        assert not alive, f"outlived their owner: {alive}"
    finally:
        owner.kill()
        owner.wait()
