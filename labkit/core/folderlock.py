"""One writer per output folder: a command that writes a folder holds its lock for the whole write.

The lock is ``flock`` on ``<folder>/.labkit-lock``, which the kernel drops when the holder ends,
however it ends (SIGKILL included), so there is never a stale lock to clear by hand. The file
also says who holds it (command line, pid, host, since when, UTC), rewritten by each holder, so
a second writer can name the first: by default it says so once on stderr and waits until the
folder is free (``wait=None``: no bound; Ctrl-C stops waiting); ``wait=0`` refuses at once and
``wait=S`` refuses after S seconds, with ``FolderBusy`` naming the holder. Holding is re-entrant
within a process, and a child forked without ``exec`` closes its copy of the descriptor, so the
lock ends with its holder. The lock file is never removed: a waiter holds it open, and a new file
under the same name would let two writers in. Imports nothing from labkit but ``core.sweep``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.core.sweep import ended

LOCK = ".labkit-lock"
BUSY_EXIT = 75  # EX_TEMPFAIL: the folder is busy; the same command later will do
RECORD_BYTES = 4096  # the holder's record, padded to one write of a fixed size
POLL_S = 0.2
_held: dict[Path, list] = {}  # lock file -> [descriptor, depth] of this process's holds


class LockError(RuntimeError):
    """The folder's lock cannot be taken at all (a folder this user may not write, a file system
    without locks); the message says what to do."""


class FolderBusy(LockError):
    """Another command writes the folder; the message names it and says how to wait for it."""


@dataclass
class Holder:
    pid: int
    host: str
    command: str
    since: str  # UTC, ISO 8601

    def describe(self) -> str:
        """One line naming the holder; control characters of its command line shown escaped."""
        command = "".join(c if c.isprintable() else repr(c)[1:-1] for c in self.command)
        return f"`{command}` (pid {self.pid} on {self.host}, since {self.since})"

    def alive(self) -> bool:
        """False only when the holder is known to have ended (its pid gone on this host)."""
        return self.host != socket.gethostname() or not ended(self.pid)


def holder(folder) -> Holder | None:
    """Who holds ``folder``'s lock now, or None when nobody does (or the record is unreadable)."""
    path = Path(folder) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold(folder, wait: float | None = None, say=None):
    """Hold ``folder``'s lock for a block (the folder is made if missing); see the module
    docstring for ``wait``. ``say``: where the one waiting message goes (default stderr)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LockError(f"cannot make {folder} ({e.strerror}); give a folder you may write") from e
    path = folder.resolve() / LOCK
    if path in _held:
        _held[path][1] += 1
    else:
        _held[path] = [_acquire(path, folder, wait, say or _stderr), 1]
    try:
        yield path
    finally:
        entry = _held[path]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[path]
            os.close(entry[0])  # drops the lock


def _acquire(path: Path, folder: Path, wait: float | None, say) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise LockError(f"cannot open {path} to lock {folder} ({e.strerror}); give a folder you may write") from e
    try:
        _wait(fd, folder, wait, say)
        _write_record(fd)
    except OSError as e:  # the lock taken, its record not written (a full disk)
        os.close(fd)
        raise LockError(f"cannot write {path} ({e.strerror})") from e
    except BaseException:
        os.close(fd)
        raise
    return fd


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        raise LockError(
            f"cannot lock a file there ({e.strerror}): its file system takes no locks; give an output folder on "
            f"one that does (a local disk)"
        ) from e
    return True


def _wait(fd: int, folder: Path, wait: float | None, say) -> None:
    """Poll until the lock is ours, saying once who holds it; FolderBusy past ``wait`` seconds.
    A new holder writes its record at once, so a record of an ended process is believed only
    after a second."""
    t0, told = time.monotonic(), False
    while not _try(fd):
        waited = time.monotonic() - t0
        who = _read_record(fd)
        sure = (who is not None and who.alive()) or waited >= 1.0
        if sure and wait is not None and waited >= wait:
            raise FolderBusy(_busy(folder, who, wait))
        if sure and not told:
            bound = f"up to {_secs(wait)}" if wait is not None else "Ctrl-C stops waiting"
            say(
                f"labkit: {folder} is being written by {_named(who)}; waiting for it to finish ({bound}; "
                f"--no-wait refuses instead)"
            )
            told = True
        time.sleep(POLL_S)
    if told:
        say(f"labkit: {folder} is free after {_secs(time.monotonic() - t0)}; going on")


def _named(who: Holder | None) -> str:
    return who.describe() if who is not None else "another command"


def _busy(folder: Path, who: Holder | None, wait: float) -> str:
    how = "without --no-wait" if wait == 0 else f"with a longer --wait than {_secs(wait)}, or without it,"
    return f"{folder} is being written by {_named(who)}; run this again once that has ended, or {how} to wait for it"


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _read_record(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, RECORD_BYTES, 0).decode() or "null")
        return Holder(int(data["pid"]), str(data["host"]), str(data["command"]), str(data["since"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write_record(fd: int) -> None:
    """This process as the holder, in one write of ``RECORD_BYTES`` (no reader sees it half written)."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    command = shlex.join([Path(argv[0]).name, *argv[1:]])
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command[:1000],
        "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    data = json.dumps(record).encode()[: RECORD_BYTES - 1]
    os.pwrite(fd, data.ljust(RECORD_BYTES), 0)


def _forget_in_child() -> None:
    """A forked child's copies of the lock descriptors are closed: the lock is its holder's alone."""
    for entry in _held.values():
        with contextlib.suppress(OSError):
            os.close(entry[0])
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def command(folder, wait: float | None, run) -> int:
    """A command's exit code: ``run()`` while holding ``folder``'s lock; ``BUSY_EXIT`` with the
    holder named when ``wait`` ran out (2 when the lock cannot be taken at all); 130 when stopped
    (Ctrl-C, SIGTERM) while waiting."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(folder, wait))
        except LockError as e:
            print(f"error: {e}", file=sys.stderr)
            return BUSY_EXIT if isinstance(e, FolderBusy) else 2
        except KeyboardInterrupt:
            print(f"interrupted while waiting for {folder}: nothing was written", file=sys.stderr)
            return 130
        return run()
