"""The result layer every lab reads runs through: ClusterResult, TaskOutcome, and the run/sweep shape."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from labkit import experiments
from labkit.distributed import launch
from labkit.measure import scalars
from labkit.wire.results import ClusterResult, TaskOutcome


def outcome(name: str, result: dict | None, tmp: Path = Path(".")) -> TaskOutcome:
    kind, index = name.split(":")
    return TaskOutcome(name, kind, int(index), "127.0.0.1", "exited", 0, 1.0, tmp / f"{kind}-{index}.log", result)


TRAIN = {"history": [], "images_per_s": 100.0}
RESOURCES = {"cpu_user_pct": 10.0, "proc_rss_bytes": 5e8}
RESOURCES_TRAIN = {"cpu_user_pct": 90.0, "proc_rss_bytes": 6e8}


def test_the_chief_is_the_chief_job_else_worker_0():
    ps = ClusterResult("p", Path("."), {}, [outcome("ps:0", {}), outcome("chief:0", {}), outcome("worker:0", {})])
    ring = ClusterResult("p", Path("."), {}, [outcome("worker:1", {}), outcome("worker:0", {})])
    assert ps.chief().name == "chief:0" and ring.chief().name == "worker:0"
    assert [t.name for t in ps.trainers()] == ["chief:0", "worker:0"]
    with pytest.raises(ValueError, match="no chief and no worker 0"):
        ClusterResult("p", Path("r"), {}, [outcome("ps:0", {})]).chief()
    assert launch.ClusterResult is ClusterResult and launch.TaskOutcome is TaskOutcome  # still importable there


def test_task_accessors_read_the_result_file_and_say_what_is_missing():
    t = outcome(
        "worker:0",
        {
            "train": TRAIN,
            "resources": RESOURCES,
            "resources_train": RESOURCES_TRAIN,
            "timings": {"train_s": 2.5},
            "series": {"eval": [{"t": 1}]},
            "steps": {"local": 3},
        },
    )
    assert t.training is TRAIN and t.timings["train_s"] == 2.5 and t.series["eval"] == [{"t": 1}]
    assert t.resources() == RESOURCES_TRAIN and t.resources("all") == RESOURCES
    untimed = outcome("worker:1", {"resources": RESOURCES})  # no training window marked: the whole run
    assert untimed.resources() == RESOURCES and untimed.timings == {} and untimed.steps == {}
    silent = outcome("worker:2", None)
    assert silent.resources() == {} and silent.metrics == {} and silent.series == {}
    with pytest.raises(ValueError, match=r"worker:2 wrote no training result \(ended: exited\); see worker-2.log"):
        silent.training
    with pytest.raises(ValueError, match="window='warm-up'"):
        t.resources("warm-up")


def test_table_uses_the_window_and_a_run_reads_back_from_its_files(tmp_path):
    (tmp_path / "worker-0.json").write_text(
        json.dumps(
            {
                "resources": RESOURCES,
                "resources_train": RESOURCES_TRAIN,
                "metrics": {"val_accuracy": 0.9},
                "steps": {"local": 7},
            }
        )
    )
    ClusterResult(
        "strategy_train",
        tmp_path,
        {"worker": ["127.0.0.1:1"]},
        [outcome("worker:0", json.loads((tmp_path / "worker-0.json").read_text()), tmp_path)],
        startup_s=1.0,
        teardown_s=0.1,
        wall_s=3.0,
    ).save()
    back = ClusterResult.load(tmp_path)
    assert back.chief().resources() == RESOURCES_TRAIN and back.wall_s == 3.0
    assert back.table("train").loc["worker:0", "cpu_user_pct"] == 90.0
    assert back.table().loc["worker:0", "cpu_user_pct"] == 10.0
    assert back.table().loc["worker:0", "val_accuracy"] == 0.9 and back.table().loc["worker:0", "local_steps"] == 7


@dataclass
class ToyRun(experiments.Run):
    mode: str
    batch_size: int
    result: ClusterResult


@dataclass
class ToySweep(experiments.Sweep):
    def records(self, extra: int = 0) -> dict:
        return {"runs": len(self.runs) + extra, "settings": self.settings}


def test_a_sweep_finds_runs_by_configuration_and_records_in_one_call(capsys):
    result = ClusterResult("p", Path("."), {}, [outcome("worker:0", {"train": TRAIN})])
    sweep = ToySweep(
        [ToyRun("sync", 50, result), ToyRun("async", 50, result), ToyRun("sync", 200, result)], settings={"seed": 0}
    )
    assert sweep.find("sync", 200) is sweep.runs[2] and sweep.find(batch_size=50, mode="async") is sweep.runs[1]
    assert sweep.find("sync") is sweep.runs[0] and sweep.find(None, 200) is sweep.runs[2]
    assert (
        sweep.configs()[1] == {"mode": "async", "batch_size": 50} and sweep.runs[1].label == "mode=async batch_size=50"
    )
    assert sweep.runs[0].train is TRAIN and sweep.runs[0].chief.name == "worker:0"
    with pytest.raises(KeyError, match="no run matches 'async', 200; runs: mode=sync"):
        sweep.find("async", 200)
    with pytest.raises(TypeError, match="no configuration field \\['workers'\\]"):
        sweep.find(workers=2)
    assert sweep.record(extra=1) == {"runs": 4, "settings": {"seed": 0}}
    printed = capsys.readouterr().out  # outside a notebook, record() prints each record
    assert "[labkit record] runs = 4" in printed and '[labkit record] settings = {"seed": 0}' in printed


def test_tensorboard_cell_headless_says_how_to_start_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABKIT_RUNS", raising=False)
    monkeypatch.setenv("LABKIT_LIVE", "0")
    assert scalars.tensorboard(tmp_path / "runs" / "lab4" / "sweep-1") == "runs"
    out = capsys.readouterr().out
    assert "TensorBoard runs under" in out and "sweep-1" in out and "`%tensorboard --logdir runs`" in out
    monkeypatch.setenv("LABKIT_RUNS", str(tmp_path.parent / "elsewhere"))
    assert scalars.tensorboard(start=False) == str(tmp_path.parent / "elsewhere")


def test_lab4_fault_demo_reuses_a_sweep_run_only_when_it_ran_with_the_same_settings():
    from labkit.labs.lab4 import experiment as lenet_sweep

    result = ClusterResult("strategy_train", Path("."), {}, [outcome("worker:0", {"train": TRAIN})])
    settings = {
        "epochs": 2,
        "train_limit": 3000,
        "test_limit": 500,
        "lr": 0.05,
        "seed": 0,
        "model": "lenet5",
        "steps_per_epoch": None,
    }
    sweep = lenet_sweep.Sweep([lenet_sweep.Run(1, 50, result), lenet_sweep.Run(2, 50, result)], settings=settings)
    assert lenet_sweep._same_run(sweep, 2, 50, **settings) is result
    assert lenet_sweep._same_run(sweep, 2, 100, **settings) is None  # not in the sweep
    assert lenet_sweep._same_run(sweep, 2, 50, **{**settings, "epochs": 3}) is None  # another training
    assert lenet_sweep._same_run(sweep, 2, 50, **{**settings, "model": "lenet5_tanh_avg"}) is None
    assert lenet_sweep._same_run(sweep, 2, 50, **{**settings, "steps_per_epoch": 1000}) is None
