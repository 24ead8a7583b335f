"""``make canary``: the scratch environment takes the newest watched packages (freeing the course's
other pins only when pip cannot resolve them), never touches the course's venv, and the report
says what broke, moved or is new between two reference gradings."""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from labkit.grading.kit import canary

BUNDLED = Path(sys.base_prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "ensurepip", "_bundled")

BUNDLED = (
    Path(sys.base_prefix)
    / "lib"
    / f"python{sys.version_info.major}.{sys.version_info.minor}"
    / "ensurepip"
    / "_bundled"
)


def wheel(folder: Path, name: str, version: str, requires=()) -> None:
    """A real, installable pure-Python wheel of one empty module, written by hand."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": "Metadata-Version: 2.1\n"
        + f"Name: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def test_requirements_are_read_through_includes_and_repinned_for_this_machine(tmp_path):
    (tmp_path / "base.txt").write_text(
        '# the student\'s pins\ntensorflow-cpu==2.21.0; sys_platform == "linux"   # lean\nkeras==3.15.1\nnumpy==2.4.6\n'
    )
    (tmp_path / "grader.txt").write_text("-r base.txt\nnh3==0.3.8  # pages\n")
    lines = canary.requirement_lines(tmp_path / "grader.txt")
    assert lines == ['tensorflow-cpu==2.21.0; sys_platform == "linux"', "keras==3.15.1", "numpy==2.4.6", "nh3==0.3.8"]
    freed = canary.repinned(lines + ['tensorflow==2.21.0; sys_platform == "win32"'], {"keras": "3.16.0"}, {"nh3"})
    assert freed == [lines[0], "keras==3.16.0", "numpy==2.4.6", "nh3"]  # win32's line is not here


def test_the_course_requirements_name_every_watched_package():
    lines = canary.requirement_lines(Path(canary.__file__).resolve().parents[3] / canary.REQUIREMENTS)
    names = {canary._name(x) for x in lines}
    assert {"keras", "papermill", "tensorboard"} <= names and names & {"tensorflow", "tensorflow-cpu"}


def row(lab, kind, name, value="", status=""):
    return {(lab, kind, name): {"lab": lab, "kind": kind, "name": name, "value": value, "status": status, "reason": ""}}


def test_compare_sorts_what_broke_from_what_moved():
    before = {
        **row("lab1", "check", "accuracy", status="pass"),
        **row("lab1", "check", "tape", status="fail"),
        **row("lab1", "check", "speed", status="pass"),
        **row("lab1", "record", "loss", "0.30"),
        **row("lab1", "record", "rate", "100"),
        **row("lab2", "check", "gone", status="pass"),
    }
    after = {
        **row("lab1", "check", "accuracy", status="fail"),
        **row("lab1", "check", "tape", status="pass"),
        **row("lab1", "check", "speed", status="pass"),
        **row("lab1", "record", "loss", "0.31"),
        **row("lab1", "record", "rate", "180"),
        **row("lab3", "record", "fresh", "1"),
    }
    after.update(row("lab4", "check", "accuracy", status="not-run"))
    after[("lab4", "check", "accuracy")]["reason"] = "the notebook did not run: KeyError"
    after.update(row("lab4", "check", "speed", status="not-run"))
    after[("lab4", "check", "speed")]["reason"] = "the notebook did not run: KeyError"
    before.update(row("lab4", "check", "accuracy", status="pass"))
    found = canary.compare(before, after, tolerance=0.25)
    assert found["broke"] == ["lab4: the notebook did not run: KeyError", "lab1 check `accuracy`: pass -> fail"]
    assert found["fixed"] == ["lab1 check `tape`: fail -> pass"]
    assert found["moved"] == ["lab1 record `rate`: value: 100 -> 180"]  # 0.30 -> 0.31 is within 25%
    assert found["missing"] == ["lab2 check `gone`"] and found["new"] == ["lab3 record `fresh`"]


def test_a_record_of_json_moves_only_where_a_number_moved_beyond_the_tolerance():
    a = {"acc": {"sync": 0.90, "async": 0.88}, "run_dir": "runs/a/1", "steps": [10, 20], "mode": "sync"}
    b = {"acc": {"sync": 0.91, "async": 0.50}, "run_dir": "runs/b/2", "steps": [10, 40], "mode": "async"}
    assert canary.differences(a, b, 0.25) == [".acc.async: 0.88 -> 0.5", ".mode: sync -> async", ".steps[1]: 20 -> 40"]
    assert canary.differences(a, a | {"run_dir": "elsewhere/x"}, 0.25) == []


def test_the_report_leads_with_its_verdict_and_names_moved_versions(tmp_path):
    env = canary.Environment(tmp_path / "python", versions={"keras": "3.16.0", "numpy": "2.4.6"})
    env.steps = [canary.Step("install 1", 0, tmp_path / "install-1.log")]
    found = canary.Findings(env, course={"keras": "3.15.1", "numpy": "2.4.6", "pytest": "9.1.1"})
    found.canary = canary.Step("grade (newest)", 0, tmp_path / "grade-newest.log")
    found.changes = {"broke": ["lab1 check `accuracy`: pass -> fail"]}
    text = "\n".join(canary.report_lines(found))
    assert "**Verdict: something broke (below).**" in text
    assert "| keras | 3.15.1 | 3.16.0 (moved) |" in text
    assert "numpy" not in text and "pytest" not in text  # unchanged, or only the course has it
    found.changes = {"moved": ["lab1 record `rate`: 100 -> 180"]}
    assert "**Verdict: nothing broke.**" in "\n".join(canary.report_lines(found))


def test_warnings_are_gathered_without_their_paths(tmp_path):
    (tmp_path / "lab1").mkdir()
    (tmp_path / "lab1" / "01.log").write_text(
        "/x/venv/lib/site-packages/keras/src/a.py:12: UserWarning: Do not pass an `input_shape`\nplain line\n"
    )
    assert canary.warnings_in(tmp_path) == {"UserWarning: Do not pass an `input_shape`"}


@pytest.mark.slow  # three pip runs in a fresh venv: 10-20 s, kept out of the fast lane
def test_a_scratch_environment_takes_the_newest_and_frees_a_pin_only_when_it_must(tmp_path, monkeypatch):
    """pip on a local index: the newest watched package needs a newer version of another package than
    the course pins, so the first install fails, the second frees that pin and says so; the course's
    own interpreter is never the one installed into."""
    index = tmp_path / "index"
    index.mkdir()
    wheel(index, "watched", "1.0")
    wheel(index, "watched", "2.0", requires=["helper>=2"])
    wheel(index, "helper", "1.0")
    wheel(index, "helper", "2.0")
    root = tmp_path / "kit"
    root.mkdir()
    (root / "requirements.txt").write_text("watched==1.0\nhelper==1.0\n")
    (root / canary.REQUIREMENTS).write_text("-r requirements.txt\n")
    (root / "kitstub.py").write_text("")
    monkeypatch.setattr(canary, "WATCHED", ("watched",))
    monkeypatch.setattr(canary, "COMPANIONS", ())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{index} {BUNDLED}")  # the pip step finds ensurepip's own
    before = os.stat(sys.prefix).st_mtime_ns
    env = canary.build_environment(root, tmp_path / "out", timeout=300, log=lambda *_: None)
    assert [s.name for s in env.steps] == ["venv", "pip", "install 1", "install 2"]
    assert [s.ok for s in env.steps] == [True, True, False, True]
    assert "helper" in env.steps[2].tail  # pip's own words on the conflict, kept for the report
    assert env.relaxed == ["helper"]
    assert env.versions["watched"] == "2.0" and env.versions["helper"] == "2.0"
    assert os.stat(sys.prefix).st_mtime_ns == before
    code = "import sys, kitstub; print(sys.prefix); print(kitstub.__file__)"
    where = subprocess.run([env.python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(tmp_path / "out" / "venv"), str((root / "kitstub.py").resolve())]
    text = "\n".join(canary.report_lines(canary.Findings(env, course={"watched": "1.0", "helper": "1.0"})))
    assert "| watched | 1.0 | 2.0 (moved) |" in text and "pins freed: helper" in text
