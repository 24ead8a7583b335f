"""This process's control groups: where they are, what they offer, and groups made under them.

The one reading of the cgroup mounts (/proc/self/mountinfo) and of this process's cgroup paths
(/proc/self/cgroup), on a v1 host (a hierarchy per controller), a v2 one (the unified tree) or a
hybrid of both. A group made here is ``labkit-<maker pid>-...`` (``PREFIX``), so what a killed
process left is told from what a live one uses (``sweeper``). ``labkit.grading.run.limits``
caps a graded run's memory and tasks with these; ``labkit.infra.cpuquota`` an emulated node's CPU.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labkit.core import sweep

PROC = Path("/proc/self")  # where mountinfo and cgroup are read
PREFIX = "labkit-"  # + the maker's pid: every group the kit makes


@dataclass(frozen=True)
class Mount:
    """One cgroup mount: ``fstype`` "cgroup2" (the unified tree) or "cgroup" (a v1 hierarchy,
    whose controllers are among its ``options``); ``root`` is the hierarchy's path mounted there."""

    fstype: str
    root: str
    point: Path
    options: frozenset[str]


def read(path: Path) -> str:
    """The text of a cgroup (or proc) file; '' where it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _unescape(field: str) -> str:
    """A mountinfo path field as a path (the kernel writes a space as \\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(mountinfo: str) -> list[Mount]:
    """The cgroup mounts in the text of a mountinfo file."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            options = frozenset(rfields[2].split(","))
            out.append(Mount(rfields[0], _unescape(fields[3]), Path(_unescape(fields[4])), options))
    return out


def parse_paths(cgroup: str) -> dict[str, str]:
    """{controller or "": path} from the text of a /proc/<pid>/cgroup file ("" is the unified
    tree; a v1 line names its hierarchy's controllers, a named one ``name=...``)."""
    out = {}
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for c in parts[1].split(",") if parts[1] else [""]:
            out[c] = parts[2]
    return out


def mounts() -> list[Mount]:
    return parse_mounts(read(PROC / "mountinfo"))


def own_paths() -> dict[str, str]:
    return parse_paths(read(PROC / "cgroup"))


def own_dirs(controller: str, found: list[Mount], paths: dict[str, str]) -> list[Path]:
    """Where this process's group is in the v2 tree (``controller`` "") or in the v1 hierarchy
    of ``controller``: one directory per mount that shows it, in mount order."""
    own = paths.get(controller)
    if own is None:
        return []
    return [m.point / own[len(m.root) :].lstrip("/") for m in found if _holds(m, controller) and _below(own, m.root)]


def _holds(m: Mount, controller: str) -> bool:
    """Whether ``m`` is the unified tree (``controller`` "") or the v1 hierarchy of ``controller``."""
    return m.fstype == "cgroup2" if controller == "" else (m.fstype == "cgroup" and controller in m.options)


def _below(path: str, root: str) -> bool:
    """Whether the group ``path`` is ``root`` or under it (a mount shows only the part below its root)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def v2_dir() -> Path | None:
    """This process's group in the unified tree, where one is mounted."""
    return next((d for d in own_dirs("", mounts(), own_paths()) if (d / "cgroup.controllers").exists()), None)


def v1_dir(controller: str) -> Path | None:
    """This process's group in the v1 hierarchy of ``controller``, where one is mounted."""
    return next(iter(own_dirs(controller, mounts(), own_paths())), None)


def offered(group: Path) -> set[str]:
    """The v2 controllers ``group``'s children may get (``cgroup.controllers``)."""
    return set(read(group / "cgroup.controllers").split())


def enabled(group: Path) -> set[str]:
    """The v2 controllers ``group``'s children have (``cgroup.subtree_control``)."""
    return set(read(group / "cgroup.subtree_control").split())


def enable(group: Path, wanted: set[str]) -> None:
    """Give ``group``'s children the v2 controllers ``wanted``; an OSError where ``group`` is
    not offered them (not delegated to this user)."""
    missing = set(wanted) - enabled(group)
    if not missing:
        return
    if not set(wanted) <= offered(group):
        plural = "controllers are" if len(wanted) > 1 else "controller is"
        raise OSError(f"the {' and '.join(sorted(wanted))} {plural} not delegated to {group}")
    (group / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(missing)))


def make(parent: Path, name: str, settings: dict[str, str], optional: tuple[str, ...] = ()) -> Path:
    """A new group ``parent/name`` with its ``settings`` ({file: value}, written in order; a file
    named in ``optional`` only where the kernel has it). Nothing is left if a write fails."""
    d = parent / name
    d.mkdir()
    try:
        for file, value in settings.items():
            if file not in optional or (d / file).exists():
                (d / file).write_text(value)
    except OSError:
        d.rmdir()
        raise
    return d


def remove(group: Path, timeout: float, poll: float = 0.02) -> bool:
    """Remove ``group`` once its processes have left it (a killed one leaves once the kernel has
    reaped it); False if it is still there after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll)


def pids(groups: list[Path]) -> list[int]:
    """The processes in ``groups`` (their ``cgroup.procs``)."""
    found = set()
    for g in groups:
        found.update(int(x) for x in read(g / "cgroup.procs").split() if x.isdigit())
    return sorted(found)


def kill(groups: list[Path], timeout: float = 10.0) -> list[int]:
    """SIGKILL every process in ``groups`` (but this one) until none is left, however it forked
    or whatever session it made; returns the pids it killed."""
    killed, deadline = [], time.monotonic() + timeout
    while True:
        left = [p for p in pids(groups) if p != os.getpid()]
        if not left or time.monotonic() > deadline:
            return killed
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def enter_command(groups: list[Path], argv: list[str]) -> list[str]:
    """``argv`` started from a shell that first moves itself into ``groups``, so every process it
    becomes and starts is counted and limited from its first instruction."""
    if not groups:
        return list(argv)
    joins = " && ".join(f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}" for g in groups)
    return ["/bin/sh", "-c", f'{joins} && exec "$@"', "labkit-enter", *argv]


def _remove_tree(group: Path) -> None:
    """Remove ``group``'s child groups, then ``group`` (an OSError if it stays: busy or not empty)."""
    for child in [c for c in group.iterdir() if c.is_dir()]:
        try:
            child.rmdir()
        except OSError:
            continue  # busy: ``group`` stays too, for a later sweep
    group.rmdir()


def sweeper(name: str, parents: Callable[[], list[Path]], unnamed: bool = False) -> sweep.Sweeper:
    """The kit's groups (``PREFIX``) under ``parents()`` whose maker has ended, each removed with
    its child groups once no process is left in them (the kernel refuses a busy group).
    ``unnamed``: whether a group whose name carries no pid counts as stale."""
    return sweep.Sweeper(
        name,
        lambda: [g for p in parents() for g in sorted(p.glob(PREFIX + "*")) if g.is_dir()],
        lambda g: sweep.maker_gone(g.name, PREFIX, unnamed),
        _remove_tree,
    )
