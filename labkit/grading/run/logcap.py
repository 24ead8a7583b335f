"""A log a graded process cannot grow without bound: its head, a note of what was cut, its tail.

What a sandboxed process writes to its stdout and stderr never goes straight into a host file.
It goes into a pipe; grader code outside the sandbox keeps the first ``HEAD`` bytes as they came
and the last ``TAIL`` bytes in memory, rewriting them after the head at most every ``FLUSH_S``
seconds (and at the end), with a line saying how many bytes were cut. The file never holds more
than ``HEAD + TAIL`` and a line; a flood only costs the flooding run the time to copy it.

Two uses: the runner (``labkit.grading.run.runner``) points its own stdout and stderr at a pipe
it reads from a thread (``capture``), so the kernel and everything it starts write through it;
the grader's check processes run under this file as a script (``python logcap.py LOG --
COMMAND...``), which copies COMMAND's output into LOG the same way and exits with its code. It
imports only the standard library.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time

HEAD = 1 * 2**20
TAIL = 1 * 2**20
FLUSH_S = 0.5


class CappedLog:
    """Append to ``path`` (from its current end), keeping ``head`` bytes, then the last ``tail``."""

    def __init__(self, path, head: int = HEAD, tail: int = TAIL):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        self.base = os.lseek(self.fd, 0, os.SEEK_END)
        self.head, self.tail_max = head, tail
        self.written, self.cut = 0, 0
        self.tail = bytearray()
        self.dirty = False
        self.lock = threading.RLock()  # a signal handler may flush while the main thread writes

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.written < self.head:
                n = min(len(data), self.head - self.written)
                os.pwrite(self.fd, data[:n], self.base + self.written)
                self.written += n
                data = data[n:]
            if data:
                self.tail += data
                if len(self.tail) > self.tail_max:
                    drop = len(self.tail) - self.tail_max
                    del self.tail[:drop]
                    self.cut += drop
                self.dirty = True

    def flush(self) -> None:
        """Rewrite the note and the tail after the head, and nothing after them."""
        with self.lock:
            if not self.dirty:
                return
            note = (
                f"\n[labkit] {self.cut:,} bytes of output were cut here; this log keeps the first "
                f"{self.head:,} and the last {self.tail_max:,}\n".encode()
                if self.cut
                else b""
            )
            at = self.base + self.written
            os.pwrite(self.fd, note + bytes(self.tail), at)
            os.ftruncate(self.fd, at + len(note) + len(self.tail))
            self.dirty = False

    def close(self) -> None:
        self.flush()
        os.close(self.fd)


def pump(fd: int, log: CappedLog) -> None:
    """Copy ``fd`` into ``log`` until end of file, flushing the tail every ``FLUSH_S``."""
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([fd], [], [], FLUSH_S)
        if ready:
            try:
                data = os.read(fd, 1 << 16)
            except InterruptedError:
                continue
            if not data:
                break
            log.write(data)
        if time.monotonic() - last >= FLUSH_S:
            log.flush()
            last = time.monotonic()
    log.flush()


class Capture:
    """This process's stdout and stderr (and so its children's) through a capped log."""

    def __init__(self, path, head: int = HEAD, tail: int = TAIL):
        self.log = CappedLog(path, head, tail)
        r, w = os.pipe()
        for target in (1, 2):
            os.dup2(w, target)
        os.close(w)
        self.thread = threading.Thread(target=pump, args=(r, self.log), name="labkit-log", daemon=True)
        self.thread.start()

    def finish(self, wait: float = 2.0) -> None:
        """Stop writing through the pipe and copy what is left (what the children still write is
        dropped once ``wait`` has passed: they are being killed)."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        null = os.open(os.devnull, os.O_WRONLY)
        for target in (1, 2):
            os.dup2(null, target)
        os.close(null)
        self.thread.join(wait)
        self.log.flush()


def main(argv=None) -> int:
    """``python logcap.py LOG -- COMMAND...``"""
    argv = list(sys.argv[1:] if argv is None else argv)
    path, command = argv[0], argv[argv.index("--") + 1 :]
    log = CappedLog(path)
    r, w = os.pipe()
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=w, stderr=w, preexec_fn=lambda: prctl(1, signal.SIGKILL, 0, 0, 0)
    )  # PR_SET_PDEATHSIG
    os.close(w)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: (child.kill(), log.flush(), os._exit(128 + signum)))
    pump(r, log)
    code = child.wait()
    log.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
