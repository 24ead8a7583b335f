"""Scratch folders a killed process left in /tmp are removed by the next maker of their kind
(``labkit.core.scratch``), and a live owner's never are, whatever pid namespace it runs in."""

import os
import tempfile
import signal
import subprocess
import sys

from labkit.core import scratch

MAKE = (
    "import sys, time; from labkit.core import scratch; print(scratch.make(sys.argv[1]), flush=True); time.sleep(600)"
)


def test_a_killed_owners_folder_goes_and_a_live_ones_stays():
    prefix = f"labkit-test-scratch-{os.getpid()}-"
    mine = None
    owner = subprocess.Popen([sys.executable, "-c", MAKE, prefix], stdout=subprocess.PIPE, text=True)
    try:
        theirs = owner.stdout.readline().strip()
        mine = scratch.make(prefix)
        assert os.path.isdir(theirs) and theirs != str(mine)
        assert scratch.remove_orphans(prefix) == []  # both owners live
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        with scratch.folder(prefix) as third:  # the next maker removes the killed one's
            assert not os.path.exists(theirs) and mine.is_dir() and third.is_dir()
        assert not third.exists()
    finally:
        owner.kill()
        owner.wait(30)
        if mine is not None:
            scratch.release(mine)
        scratch.remove_orphans(prefix)


def test_a_host_folder_disks_socket_folder_goes_with_its_grader_however_it_ends(tmp_path):
    """``disks.FolderDisk`` (a run on a host folder: Slurm nodes, --no-sandbox) keeps its kernel's
    sockets in a short /tmp folder: removed by ``close``, or, the grader killed, by the next one."""
    from labkit.grading.run import disks

    code = (
        "import sys, time; from pathlib import Path; from labkit.grading.run.disks import FolderDisk; "
        "d = FolderDisk(Path(sys.argv[1]), Path(sys.argv[2]), 2**20, None, False); print(d.ipc, flush=True); "
        "time.sleep(600)"
    )
    for work in ("w1", "w2"):
        (tmp_path / work).mkdir()
    grader = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "w1"), str(tmp_path / "c1")], stdout=subprocess.PIPE, text=True
    )
    killed = grader.stdout.readline().strip()
    grader.send_signal(signal.SIGKILL)
    grader.wait(30)
    assert killed.startswith(os.path.join(tempfile.gettempdir(), disks.IPC_PREFIX)) and os.path.isdir(killed)
    disk = disks.FolderDisk(tmp_path / "w2", tmp_path / "c2", 2**20, None, False)
    assert not os.path.exists(killed) and disk.ipc.is_dir()
    disk.close()
    assert not disk.ipc.exists() and not (tmp_path / "w2").exists()


def test_a_folder_being_made_is_never_taken_for_an_orphan(monkeypatch):
    """The lock file appears under its name only once locked: another maker's ``remove_orphans``
    between the file's creation and its lock would otherwise take the lock and remove a live folder."""
    prefix = f"labkit-test-scratch-{os.getpid()}-"
    seen = []
    lock = scratch.fcntl.flock

    def flock(fd, how):
        if seen:  # the check below, taking a lock of its own
            return lock(fd, how)
        folder = os.path.dirname(os.readlink(f"/proc/self/fd/{fd}"))
        seen.append((how, os.path.exists(os.path.join(folder, scratch.OWNER))))
        seen.append(scratch.remove_orphans(prefix))  # another maker, right now
        return lock(fd, how)

    monkeypatch.setattr(scratch.fcntl, "flock", flock)
    folder = scratch.make(prefix)
    monkeypatch.setattr(scratch.fcntl, "flock", lock)
    try:
        assert seen == [(scratch.fcntl.LOCK_EX, False), []] and folder.is_dir()
        assert (folder / scratch.OWNER).is_file() and scratch.remove_orphans(prefix) == []
    finally:
        scratch.release(folder)
