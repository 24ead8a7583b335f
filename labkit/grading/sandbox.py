"""Where a student's code runs: a bubblewrap sandbox that shows it only what it needs.

Every process that runs a student's code (a notebook's kernel and the cluster it starts, a
hidden check importing the student's functions) and every verifier reading a student's files
runs inside ``bwrap`` (Debian's ``bubblewrap``, the sandbox Flatpak uses):

- a new PID namespace (``--unshare-pid``, ``--die-with-parent``): when the sandbox's first
  process ends, or its parent does, the kernel kills everything inside, however it forked;
- a new network namespace (``--unshare-net``): loopback only, so a notebook's local
  TensorFlow cluster works and nothing leaves the machine (the kernel talks to papermill,
  outside, over Unix sockets in a folder both see);
- a file system built from read-only binds of the system, the Python environment, the data
  and *the student's view of the kit* (``labkit`` without its solutions and grader, bound over
  the real package), a private ``/tmp``, and read-write only the folders the caller names
  (the run's work folder). Submissions, other students' work, the reference notebooks and
  the grader's output are simply not there;
- no capabilities, IPC and UTS namespaces of its own, a new session, a cleared environment.

Memory and process limits come from ``labkit.grading.limits`` (a cgroup the sandbox cannot
see); this module only builds command lines. Sandboxes are a registry (``SANDBOXES``):
``bwrap``, and ``none`` for ``--no-sandbox`` runs, which run the same command with the same
environment, unconfined.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

APT_LINE = "sudo apt-get install bubblewrap"
# What every sandbox sees read-only: the system's programs and libraries, and the few files of
# /etc that programs read (not /etc as a whole).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf", "hosts",
       "host.conf", "gai.conf", "localtime", "timezone", "ssl", "ca-certificates", "fonts", "mime.types",
       "protocols", "services", "os-release", "matplotlibrc")
INSIDE_HOME = "/tmp/home"


@dataclass
class View:
    """What one sandboxed process sees beyond the system and the Python environment.

    ``ro``/``rw``: host paths shown at the same path, read-only or read-write; ``overlays``:
    (host, inside) pairs bound read-only after everything else (the student's kit over the
    real package); ``scratch``: a private folder for the unconfined run's HOME and caches."""
    cwd: Path
    env: dict[str, str]
    scratch: Path
    ro: list[Path] = field(default_factory=list)
    rw: list[Path] = field(default_factory=list)
    overlays: list[tuple[Path, Path]] = field(default_factory=list)


def python_paths() -> list[Path]:
    """The interpreter's installation and the environment labkit runs in (a venv, usually)."""
    return sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()})


def home_env(home: str) -> dict[str, str]:
    """HOME and the caches programs write there (IPython, Jupyter, matplotlib, Keras)."""
    return {"HOME": home, "XDG_CACHE_HOME": f"{home}/.cache", "XDG_CONFIG_HOME": f"{home}/.config",
            "IPYTHONDIR": f"{home}/.ipython", "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime",
            "MPLCONFIGDIR": f"{home}/.matplotlib", "KERAS_HOME": f"{home}/.keras"}


class Bubblewrap:
    """``bwrap`` with the namespaces and binds described in the module docstring."""
    name = "bwrap"
    confined = True

    def __init__(self, program: str = "bwrap"):
        self.program = program

    def unavailable(self) -> str | None:
        """Why this machine cannot run the sandbox (None when it can): missing, or refused."""
        path = shutil.which(self.program)
        if path is None:
            return f"bubblewrap is not installed; install it with `{APT_LINE}`"
        try:
            r = subprocess.run([path, "--unshare-pid", "--unshare-net", "--die-with-parent", "--ro-bind", "/", "/",
                                "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap could not start: {e}"
        if r.returncode != 0:
            return (f"bubblewrap cannot create namespaces here ({r.stderr.strip() or r.returncode}); allow "
                    f"unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root")
        return None

    def command(self, argv: list[str], view: View) -> tuple[list[str], dict[str, str]]:
        """``argv`` inside the sandbox, and the environment to start bwrap with."""
        args = [shutil.which(self.program) or self.program, "--die-with-parent", "--unshare-pid", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--new-session", "--cap-drop", "ALL",
                "--hostname", "sandbox"]
        for p in SYSTEM:
            args += _bind("--ro-bind", Path(p))
        for name in ETC:
            args += _bind("--ro-bind", Path("/etc") / name)
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", INSIDE_HOME]
        for p in python_paths() + list(view.ro):
            args += _bind("--ro-bind", Path(p))
        for p in view.rw:
            args += ["--bind", str(p), str(p)]
        for host, inside in view.overlays:
            args += ["--ro-bind", str(host), str(inside)]
        args += ["--remount-ro", "/", "--chdir", str(view.cwd), "--clearenv"]   # only the binds above are writable
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **home_env(INSIDE_HOME), **view.env}
        for k, v in env.items():
            args += ["--setenv", k, v]
        return args + ["--", *argv], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


class Unconfined:
    """``--no-sandbox``: the same command and environment, with nothing hidden or confined. The
    command still dies with its parent (util-linux's ``setpriv --pdeathsig``, where it exists)."""
    name = "none"
    confined = False

    def unavailable(self) -> str | None:
        return None

    def command(self, argv: list[str], view: View) -> tuple[list[str], dict[str, str]]:
        home = view.scratch / "home"
        home.mkdir(parents=True, exist_ok=True)
        # Not the grader's LABKIT_* settings, nor a Slurm allocation the grader may run in: a
        # notebook's cluster runs on this machine (inside an allocation the launcher would
        # otherwise start its tasks as job steps), as it does in the bwrap sandbox's clean env.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LABKIT_", "SLURM_"))}
        env.update(LANG=env.get("LANG", "C.UTF-8"), **home_env(str(home)), **view.env)
        setpriv = shutil.which("setpriv")
        return ([setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []) + list(argv), env


def _bind(option: str, path: Path) -> list[str]:
    """Bind ``path`` at the same place; a symlink (``/bin`` -> ``usr/bin``) is recreated as one."""
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    if path.exists():
        return [option, str(path), str(path)]
    return []


SANDBOXES = {"bwrap": Bubblewrap(), "none": Unconfined()}
