"""A registry's built-in entry is found under its module's name, and the names entries had before
still find them (aliases); the fork server's preload is read from the programs registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labkit.bench import BENCHMARKS
from labkit.core.registry import Registry, UnknownName
from labkit.distributed import launchers
from labkit.distributed.launchers import LAUNCHERS, forkserver
from labkit.tasks import PROGRAMS
from labkit.wire.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]
BY_MODULE = {"task program": PROGRAMS, "benchmark": BENCHMARKS, "launcher": LAUNCHERS}


def _module_name(registry: Registry, name: str) -> str:
    return registry.reference(name).partition(":")[0].rpartition(".")[2]


@pytest.mark.parametrize("what", sorted(BY_MODULE))
def test_every_built_in_name_is_its_module_name(what):
    registry = BY_MODULE[what]
    assert len(registry) >= 3
    assert {name: _module_name(registry, name) for name in registry} == {name: name for name in registry}


def test_a_launcher_class_carries_its_registered_name():
    """``choose`` returns the name; the class registers itself by its ``name`` attribute."""
    assert {name: LAUNCHERS[name].name for name in LAUNCHERS} == {name: name for name in LAUNCHERS}


@pytest.mark.parametrize(
    "registry, before, now",
    [
        (PROGRAMS, "sparse_lr", "ps_sparse_lr"),
        (BENCHMARKS, "ring_vs_ps", "mlp_exchange"),
        (BENCHMARKS, "netem", "links"),
        (LAUNCHERS, "netem", "netns"),
        (LAUNCHERS, "slurm", "srun"),
    ],
)
def test_the_names_entries_had_before_still_find_them(registry, before, now):
    assert before in registry and before not in list(registry)
    assert registry.canonical(before) == now
    assert registry.reference(before) == registry.reference(now)


def test_the_launcher_names_the_kit_and_its_notebooks_write_are_known():
    """``launcher="netem"`` in the README, ``"slurm"`` in the notebooks' parameters: each still works."""
    texts = [p.read_text() for p in (ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *ROOT.glob("labkit/**/*.py"))]
    for nb in (ROOT / "labkit" / "labs").glob("*/*.ipynb"):
        texts += ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"]]
    named = set()
    for t in texts:  # less a launcher the same text registers (an example of a new one)
        used = set(re.findall(r'launcher\s*=\s*"(\w+)"', t)) | set(re.findall(r'# "(\w+)": tasks as job steps', t))
        named |= used - set(re.findall(r'^\s*name = "(\w+)"', t, re.M))
    assert {"netem", "slurm"} <= named
    assert sorted(n for n in named if n not in LAUNCHERS) == []
    spec = ClusterSpec({"worker": ["127.0.0.1:2300"]})
    assert launchers.choose("netem", spec, {"127.0.0.1"}, environ={}) == {"worker:0": "netns"}


def test_an_alias_finds_the_entry_and_is_not_listed():
    r = Registry("thing", builtin={"json": "json:dumps"}, aliases={"old": "json"})
    assert r["old"] is r["json"] is json.dumps and r.reference("old") == "json:dumps"
    assert list(r) == ["json"] and len(r) == 1 and "old" in r
    with pytest.raises(UnknownName, match=r"unknown thing 'nope'; choose one of json$"):
        r["nope"]
    with pytest.raises(UnknownName, match="unknown thing 'gone'"):
        r.alias("older", "gone")
    with pytest.raises(ValueError, match="'json' is a thing of its own"):
        r.alias("json", "json")
    r.add("old", len)  # a name registered later is its own entry, no longer an alias
    assert r["old"] is len and r["json"] is json.dumps and list(r) == ["json", "old"]
    r.alias("older", "json")
    del r["json"]  # its aliases go with it
    assert "older" not in r and list(r) == ["old"]


def test_the_fork_server_preloads_the_programs_and_what_they_import():
    names = forkserver.preload()
    assert names[: len(forkserver.LIBRARIES)] == list(forkserver.LIBRARIES)
    assert {PROGRAMS.reference(n) for n in PROGRAMS} <= set(names)
    # imported inside a function (the task runtime's result JSON), and a submodule imported from its package
    assert {"labkit.notebook.record", "labkit.datasets.clickdata", "labkit.learning.train_loop"} <= set(names)
    assert len(names) == len(set(names))
    assert [n for n in names[len(forkserver.LIBRARIES) :] if forkserver._kit_module_file(n) is None] == []


def test_the_preload_follows_the_registry(monkeypatch):
    monkeypatch.setattr(forkserver, "PROGRAMS", Registry("task program", builtin={"ps_sgd": "labkit.tasks.ps_sgd"}))
    names = forkserver.preload()
    assert "labkit.tasks.ps_sgd" in names
    assert not {"labkit.tasks.ps_sparse_lr", "labkit.tasks.strategy_train"} & set(names)


def test_a_registry_of_classes_takes_its_base_s_subclasses_by_name():
    class Base:
        name = ""

    classes = Registry("widget", builtin={"z": "json:JSONDecoder"}, base=Base)

    @classes.add_subclass
    class Alpha(Base):
        name = "alpha"

    assert classes["alpha"] is Alpha and classes.names() == ["alpha", "z"]
    with pytest.raises(ValueError, match="Base subclass with a name"):
        classes.add_subclass(dict)
    with pytest.raises(TypeError, match="the thing registry takes no classes by name"):
        Registry("thing").add_subclass(Alpha)
