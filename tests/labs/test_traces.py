"""The traces the kit ships: each a recording with its provenance, in its lab's ``traces/`` folder,
read back by name (``<lab>_<what>``), without the recording machine's paths; a missing one says
which there are; each lab's recorders write where the reader looks."""

import importlib
import json
import subprocess
import sys

import pytest

from labkit.experiments import traces
from labkit.experiments.traces import recorder as record


def test_every_shipped_trace_has_its_provenance_and_no_machine_paths():
    assert {"lab2_emulated_shares", "lab3_emulated_dense", "lab5_emulated", "lab5_ps_failure"} <= set(traces.names())
    for name in traces.names():
        lab, _, what = name.partition("_")
        assert traces.path(name).parent == traces.LABS / lab / "traces"
        data = traces.load(name)
        prov = data["provenance"]
        assert prov["recorded_by"].startswith("labkit."), name
        assert len(prov["labkit_commit"]) == 40 and prov["cores"] >= 1 and prov["recorded_utc"], name
        experiment = importlib.import_module(f"labkit.labs.{lab}.experiment")
        assert what in experiment.RECORDERS  # it can be recorded again, the same way
        function = prov["recorded_by"].partition("(")[0].rpartition(".")[2]
        assert callable(getattr(experiment, function)), f"{name}: the recorded call is not its lab's"
        assert "/tmp/" not in json.dumps(data) and "/work/" not in json.dumps(data), name


def test_a_recorded_calls_arguments_are_read_from_its_provenance():
    _, provenance = traces.frame("lab3_emulated_dense")  # Lab 3 section 9 reads its F so
    assert traces.argument(provenance, "num_features") == 1_000_000  # inside **{...}
    assert traces.argument(provenance, "batch_size") == 100  # a keyword of its own
    with pytest.raises(KeyError, match="no argument 'nope'"):
        traces.argument(provenance, "nope")


def test_a_missing_trace_names_those_there_are():
    with pytest.raises(FileNotFoundError, match="lab5_ps_failure"):
        traces.load("lab9_nothing")
    with pytest.raises(ValueError, match="<lab>_<what>"):
        traces.load("emulated")


def test_a_labs_recorder_writes_where_the_reader_finds_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(traces, "LABS", tmp_path)
    (tmp_path / "lab9").mkdir()  # the lab's folder; its traces/ is made on the first recording
    monkeypatch.setenv("LABKIT_RUNS", "/srv/runs")
    made = {"provenance": {"recorded_by": "x()"}, "frame": [{"a": 1}], "_run_dir": "/srv/runs/lab9/r1"}
    recorders = {"demo": lambda: dict(made)}
    assert record.main("lab9", recorders, ["demo"]) == 0
    assert (tmp_path / "lab9" / "traces" / "demo.json").is_file()
    assert traces.names() == ["lab9_demo"]
    assert traces.load("lab9_demo") == {"provenance": {"recorded_by": "x()"}, "frame": [{"a": 1}]}
    with pytest.raises(SystemExit):
        record.main("lab9", recorders, ["other"])
    assert "lab9 records no trace other; it records: demo" in capsys.readouterr().err


def test_scrub_leaves_out_the_run_folder(monkeypatch):
    monkeypatch.setenv("LABKIT_RUNS", "/srv/runs")
    data = {
        "_run_dir": "/srv/runs/lab5/ps-failure-1",
        "failure": {
            "message": "chief:0 exited (log: /srv/runs/lab5/ps-failure-1/chief-0.log)",
            "log_tail": "/srv/runs/lab5/ps-failure-1/chief-0.log and /srv/runs/other",
        },
    }
    out = record.scrub(data)
    assert out == {"failure": {"message": "chief:0 exited (log: chief-0.log)", "log_tail": "chief-0.log and other"}}


@pytest.mark.parametrize("lab", sorted({name.partition("_")[0] for name in traces.names()}))
def test_a_labs_experiment_module_is_its_recorders_command(lab):
    """``python -m labkit.labs.<lab>.experiment --list`` names what the lab records, its shipped traces among them."""
    done = subprocess.run(
        [sys.executable, "-m", f"labkit.labs.{lab}.experiment", "--list"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
    listed = done.stdout.split()
    assert listed == sorted(importlib.import_module(f"labkit.labs.{lab}.experiment").RECORDERS)
    assert {n.partition("_")[2] for n in traces.names() if n.startswith(lab + "_")} <= set(listed)
