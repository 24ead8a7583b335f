"""The grader's own checks of one executed notebook, each in a sandboxed process with limits.

After a notebook has run, ``Checking`` runs up to two processes, one after the other, while the
batch keeps polling every other notebook: the probe (``probe.py``, only for hidden checks: the
student's functions on the grader's inputs, in a sandbox that sees the student's kit and an
empty folder), then the judge (``python -m labkit.grading.judge.postrun JUDGE_SPEC RESULT``:
every verifier and hidden check's comparison, with the full kit, the run's folder and the
probe's output read-only, and no network).

Each has its own cgroup and ``check_timeout``, runs as the run's own user (never root), writes
only to its folder on the run's disk and logs through ``logcap``; one that did not finish leaves
its checks ``unverified``, saying why. The grader itself never loads a student's artifact; the
judge's verdicts it reads without following links, up to ``MAX_VERDICTS_BYTES``, once every
process of the run's user has ended.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import uuid
from pathlib import Path

from labkit.grading.run import disks, limits, logcap

PROBE = Path(__file__).with_name("probe.py")
PROBE_INSIDE = Path("/opt/labkit-probe/probe.py")
LOGCAP = Path(logcap.__file__)  # run as a script in the check's sandbox
MAX_VERDICTS_BYTES = 16 * 2**20


class _Process:
    """One sandboxed check process in its own group, with a deadline."""

    def __init__(
        self, argv: list[str], view, setup, memory_mb: float, tasks: float, timeout: float, log: Path, prefix=()
    ):
        from labkit.core.proc import OwnedProcess

        self.group = limits.open_group(uuid.uuid4().hex[:16], memory_mb * 2**20, tasks, backends=[setup.backend])
        cmd, env = setup.sandbox.command(argv, view)
        capped = [sys.executable, "-I", "-S", str(LOGCAP), str(Path(log).absolute()), "--", *prefix, *cmd]
        self.proc = OwnedProcess(self.group.enter_command(capped), log, env=env, cwd=view.scratch)
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.proc.start()

    def poll(self) -> str | None:
        """None while running; then "" when it exited, or why it was stopped."""
        if self.proc.poll() is not None:
            why = "ran out of memory" if self.group.oom_kills() else ""
            self.close()
            return why
        if time.monotonic() > self.deadline:
            self.close()
            return f"ran past its {self.timeout:g} s limit"
        return None

    def close(self) -> None:
        self.proc.kill(grace=1.0)
        self.group.close()


class Checking:
    """The probe (if any), then the judge, for one job; ``poll()`` is None until both are done,
    then {check name: Score}."""

    def __init__(self, job, setup, records: dict, params: dict, hidden: list, verified: list):
        self.job, self.setup = job, setup
        self.lab = job.lab
        self.hidden, self.verified = hidden, verified
        self.records, self.params = records, params
        from labkit.grading.run.runner import provision

        provision(job, setup, disks.Folders())  # a run of another machine's (Slurm) is checked in its host folder
        self.disk = job.disk
        self.dir = job.private.resolve() / "checks"  # the grader's: the specs, bound read-only
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = job.log.with_suffix(".checks.log")
        self.stage, self.proc, self.probe_note, self.scores = None, None, "", None
        self._start_probe() if hidden else self._start_judge()

    def _view(self, cwd: Path, rw, ro, student: bool, overlays=()):
        v = self.setup.view(
            cwd, rw, self.dir, {"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}, ro=ro, job=self.job
        )
        if not student:
            v.overlays = []
            v.ro = [*v.ro, self.setup.package]
        v.overlays = [*v.overlays, *overlays]
        return v

    def _start(self, stage: str, argv: list[str], view) -> None:
        """Run ``argv`` as the check process of ``stage``: the probe and the judge run under the same
        limits (the lab's check memory, processes and time), log and disk prefix."""
        self.stage = stage
        self.proc = _Process(
            argv,
            view,
            self.setup,
            self.lab.check_memory_mb,
            self.lab.max_processes,
            self.lab.check_timeout,
            self.log,
            self.disk.prefix,
        )

    def _start_probe(self):
        out = self.disk.probe
        spec = {
            "notebook": str(self.job.clean_input.resolve()),
            "out": str(out),
            "memory_bytes": int(self.lab.check_memory_mb * 2**20),
            "checks": [
                {
                    "check": c.spec["check"],
                    "functions": list(h.functions),
                    "args": h.args(c.spec.get("args", {})),
                }
                for c, h in self.hidden
            ],
        }
        (self.dir / "probe.json").write_text(json.dumps(spec))
        confined = self.setup.sandbox.confined
        script = PROBE_INSIDE if confined else PROBE
        view = self._view(
            out,
            [out],
            [self.job.clean_input.resolve(), (self.dir / "probe.json")],
            student=True,
            overlays=[(PROBE, PROBE_INSIDE)] if confined else [],
        )
        self._start("probe", [sys.executable, str(script), str(self.dir / "probe.json")], view)

    def _start_judge(self):
        out = self.disk.judge
        spec = {
            "workdir": str(self.job.workdir.resolve()),
            "probe": str(self.disk.probe),
            "params": self.params,
            "records": self.records,
            "memory_bytes": int(self.lab.check_memory_mb * 2**20),
            "probe_note": self.probe_note,
            "verify": [{"name": c.name, "verify": c.verify, "claimed": claimed} for c, claimed in self.verified],
            "hidden": [
                {"name": c.name, "check": c.spec["check"], "args": c.spec.get("args", {})} for c, _ in self.hidden
            ],
        }
        (self.dir / "judge.json").write_text(json.dumps(spec, default=str))
        view = self._view(
            out, [out], [self.job.workdir.resolve(), self.disk.probe, self.dir / "judge.json"], student=False
        )
        argv = [
            sys.executable,
            "-m",
            "labkit.grading.judge.postrun",
            str(self.dir / "judge.json"),
            str(out / "result.json"),
        ]
        self._start("judge", argv, view)

    def poll(self) -> dict | None:
        if self.scores is not None:
            return self.scores
        why = self.proc.poll()
        if why is None:
            return None
        if self.stage == "probe":
            self.probe_note = f"the process running your functions {why}" if why else ""
            self._start_judge()
            return None
        self.scores = self._scores(why)
        return self.scores

    def _scores(self, why: str) -> dict:
        from labkit.grading.judge.rubric import Score, scored

        verdicts = read_verdicts(self.disk.outside(self.disk.judge / "result.json"))
        out = {}
        for check in [c for c, _ in self.hidden] + [c for c, _ in self.verified]:
            v = verdicts.get(check.name)
            if not isinstance(v, dict) or not isinstance(v.get("status"), str):
                last = _last_line(self.log)
                out[check.name] = Score(
                    0.0,
                    check.points,
                    "unverified",
                    f"the grader's check of this notebook {why or 'did not finish'}"
                    + (f": {last}" if last and not why else ""),
                )
            elif v["status"] == "pass":
                out[check.name] = scored(check, 1.0, v.get("reason", ""), v.get("value"))
            else:
                out[check.name] = Score(0.0, check.points, v["status"], v.get("reason", ""), v.get("value"))
        return out

    def kill(self) -> None:
        if self.proc:
            self.proc.close()


def read_verdicts(path: Path) -> dict:
    """The judge's verdicts: a JSON object in a regular file of at most ``MAX_VERDICTS_BYTES``,
    opened without following a link; {} for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_VERDICTS_BYTES:
            return {}
        try:
            data = json.loads(f.read(MAX_VERDICTS_BYTES + 1))
        except (OSError, ValueError):
            return {}
    return data if isinstance(data, dict) else {}


def _last_line(path: Path) -> str:
    from labkit.core.proc import tail

    return next((ln.strip() for ln in reversed(tail(path, 20).splitlines()) if ln.strip()), "")


# ---------------------------------------------------------------------------------------------
# The judge process


def judge(spec: dict) -> dict:
    """{check name: {"status", "reason", "value"}} for every verifier and hidden check in ``spec``."""
    from labkit.grading.judge import hidden, verify

    out = {}
    for item in spec["verify"]:
        ctx = verify.Context(
            workdir=Path(spec["workdir"]), records=spec["records"], params=spec["params"], claimed=item["claimed"]
        )
        out[item["name"]] = _verdict(lambda: verify.run(item["verify"], ctx), "mismatch")
    for item in spec["hidden"]:

        def run(item=item):
            try:
                return hidden.judge(item["check"], item["args"], Path(spec["probe"]))
            except verify.Unverifiable as e:
                if spec.get("probe_note"):
                    raise verify.Unverifiable(spec["probe_note"]) from e
                raise

        out[item["name"]] = _verdict(run, "fail")
    return out


def _verdict(fn, failed: str) -> dict:
    from labkit.grading.judge.verify import Unverifiable

    try:
        v = fn()
    except Unverifiable as e:
        return {"status": "unverified", "reason": str(e)}
    except Exception as e:  # a check that breaks on this notebook's files: its row, not the batch
        return {"status": "unverified", "reason": f"the check failed: {type(e).__name__}: {e}"}
    value = v.value if isinstance(v.value, (int, float, str, list, dict, type(None))) else str(v.value)
    return {"status": "pass" if v.ok else failed, "reason": v.reason, "value": value}


def main(argv=None) -> int:
    spec_path, result_path = (argv or sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    limits.limit_self(int(spec["memory_bytes"]))
    Path(result_path).write_text(json.dumps(judge(spec), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
