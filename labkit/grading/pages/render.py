"""Pages render in a process of their own, limited in time and memory.

A page is made from what a student's run printed, and one 16 MB ``text/html`` output once took
the grader minutes and gigabytes. So every feedback page and TA answer page is written by a
process of its own (forked from the warm renderer, ``warm``, else ``python -m
labkit.grading.pages.limited SPEC``), in a group with a memory and a task cap, stopped past
``TIMEOUT_S`` seconds of CPU time (so a page that renders on a quiet machine renders under load
too), with ``WALL_FACTOR`` times that in wall-clock time as the backstop.

``Task`` is one page to write (its writer function, JSON arguments, a ``fallback`` page and a
``cache``); ``Task.start()`` returns a ``Rendering`` that the batch polls with its runs, so their
timeouts hold while a page renders. ``run(tasks, parallel)`` writes a list of pages, N at a
time, and waits. More in docs/internals.md, section labkit.grading.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from labkit.grading.pages import limited
from labkit.grading.pages.cache import FELL_BACK, RENDERED, Entry
from labkit.grading.run import limits

PAGES = Path(__file__).parents[1] / "templates" / "pages"  # the grader's own page bodies (Jinja, autoescaped)
TIMEOUT_S = 180.0  # CPU seconds for one page; a class's pages take 1-2 s each, a 1 MB output about 10
WALL_FACTOR = 3.0  # the wall-clock backstop: a page that waits rather than works (or a machine that is very busy)
MEMORY_MB = 2048.0
TASKS = 32


def reference(writer: Callable) -> str:
    """``"module:name"`` of a page writer, what the rendering process imports."""
    ref = f"{writer.__module__}:{writer.__qualname__}"
    if not limited.is_writer(ref):
        raise ValueError(f"a page writer is a module-level function of labkit.grading, got {ref}")
    return ref


@dataclass
class Task:
    writer: Callable[..., None]  # the function that writes the page (a module-level one of labkit.grading)
    args: dict  # its keyword arguments (JSON)
    path: Path  # the page it writes
    fallback: Callable[[str], str]  # why it failed -> the page to write instead
    log: Path  # the renderer's output (tracebacks)
    fell_back: Callable[[], None] | None = None  # called once its fallback is written
    cache: Entry | None = None  # where the page's key is kept once it is written (``cache``)
    timeout: float | None = None  # CPU seconds (None: TIMEOUT_S)
    memory_mb: float | None = None  # (None: MEMORY_MB)

    def start(self) -> "Rendering":
        return Rendering(self)


class Rendering:
    """A started Task: ``poll()`` is None while it runs, then True (the page, or its fallback, is written)."""

    def __init__(self, task: Task):
        self.task = task
        self.timeout, self.memory_mb = task.timeout or TIMEOUT_S, task.memory_mb or MEMORY_MB
        task.log.parent.mkdir(parents=True, exist_ok=True)
        self.spec = task.log.resolve().with_name(f".render-{uuid.uuid4().hex[:12]}.json")
        self.spec.write_text(
            json.dumps(
                {
                    "writer": reference(task.writer),
                    "args": task.args,
                    "memory_mb": self.memory_mb,
                    "cpu_s": self.timeout,
                },
                default=str,
            )
        )
        try:
            self.group = limits.open_group(f"page-{uuid.uuid4().hex[:12]}", self.memory_mb * 2**20, TASKS)
        except OSError:  # no way to cap the group here: the process's own data limit still holds
            self.group = None
        self.result: bool | None = None
        self.proc = self._forked() or self._started()
        self.deadline = time.monotonic() + self.timeout * WALL_FACTOR

    def _forked(self):
        """The page forked from this process's warm renderer (``warm``), or None where there is none."""
        from labkit.grading.pages import warm

        server = warm.get()
        if server is None:
            return None
        try:
            return server.start(
                self.spec, self.group.procs if self.group else [], self.task.log, reference(self.task.writer)
            )
        except (OSError, RuntimeError) as e:  # the page goes on in an interpreter of its own; the log says why
            with open(self.task.log, "a") as f:
                f.write(f"labkit: the warm renderer could not start this page: {e}\n")
            return None

    def _started(self):
        """The page in an interpreter of its own, started in its group."""
        from labkit.core.proc import OwnedProcess

        argv = [sys.executable, "-m", "labkit.grading.pages.limited", str(self.spec)]
        return OwnedProcess(
            self.group.enter_command(argv) if self.group else argv,
            self.task.log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ).start()  # the grader's folder: its paths hold

    def poll(self) -> bool | None:
        if self.result is not None:
            return self.result
        code = self.proc.poll()
        if code is None and time.monotonic() < self.deadline:
            return None
        if code is None:
            why = f"rendering it took longer than {self.timeout * WALL_FACTOR:g} s"
        elif self.group is not None and self.group.oom_kills():
            why = f"rendering it needed more than {self.memory_mb:g} MB"
        elif code in (-signal.SIGXCPU, -signal.SIGKILL):  # RLIMIT_CPU's signals (the OOM killer's is above)
            why = f"rendering it needed more than {self.timeout:g} s of CPU time"
        elif code != 0:
            why = f"rendering it failed ({_last_line(self.task.log) or f'exit code {code}'})"
        else:
            why = ""
        self._end()
        if why:
            from labkit.grading.gradebook.report import write_text

            write_text(self.task.path, self.task.fallback(f"The executed notebook is not shown: {why}."))
        if self.task.cache is not None:
            self.task.cache.keep(FELL_BACK if why else RENDERED)
        if why and self.task.fell_back:
            self.task.fell_back()
        self.result = True
        return True

    def _end(self) -> None:
        self.proc.kill(grace=1.0)
        if self.group is not None:
            self.group.close()
        self.spec.unlink(missing_ok=True)

    def kill(self) -> None:
        """Stop it; no page is written (the next rebuild renders it again)."""
        self._end()
        self.result = False


def template(name: str, **context) -> str:
    """The body ``templates/pages/<name>`` makes of ``context``: every value is escaped but
    ``Markup`` (HTML the grader rendered and cleaned itself); ``sanitize.Page`` cleans it last."""
    return _environment().get_template(name).render(**context)


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PAGES)), autoescape=True, undefined=jinja2.StrictUndefined
    )


def run(tasks: list[Task], parallel: int = 1, poll: float = 0.1) -> None:
    """Write every page of ``tasks``, ``parallel`` at a time (each with its own limits)."""
    from labkit.grading.pages import warm

    pending, running = list(tasks), []
    with warm.session():
        try:
            while pending or running:
                while pending and len(running) < max(1, parallel):
                    running.append(pending.pop(0).start())
                time.sleep(poll)
                running = [r for r in running if r.poll() is None]
        finally:
            for r in running:
                r.kill()


def _last_line(path: Path) -> str:
    from labkit.core.proc import tail

    return next((ln.strip() for ln in reversed(tail(path, 20).splitlines()) if ln.strip()), "")[:300]
