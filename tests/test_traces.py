"""The traces the kit ships: each a recording with its provenance, read back by name, without the
recording machine's paths; a missing one says which there are."""

import json

import pytest

from labkit.experiments import traces
from labkit.experiments.traces import recorder as record


def test_every_shipped_trace_has_its_provenance_and_no_machine_paths():
    assert "lab5_ps_failure" in traces.names()
    for name in traces.names():
        data = traces.load(name)
        prov = data["provenance"]
        assert prov["recorded_by"].startswith("labkit.experiments."), name
        assert len(prov["labkit_commit"]) == 40 and prov["cores"] >= 1 and prov["recorded_utc"], name
        assert name in record.RECORDERS  # it can be recorded again, the same way
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
