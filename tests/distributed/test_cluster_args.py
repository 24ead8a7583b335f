"""A task program's arguments are a parameter of their own (``args``), checked against the
program's own parser before any task starts: a typo fails at once with argparse's message, naming
the Cluster's option it resembles; a keyword the Cluster does not know is an error of its own."""

from __future__ import annotations

import pytest

from labkit.distributed.launch import Cluster
from labkit.wire import spec as cluster


@pytest.fixture
def spec():
    return cluster.local(ps=1, workers=1)


def test_a_misspelt_cluster_keyword_fails_before_anything_starts(spec, tmp_path):
    from labkit.experiments import make_cluster

    with pytest.raises(TypeError, match="timout"):
        Cluster(spec, "ps_sgd", run_dir=tmp_path, dry_run=True, timout=5)
    with pytest.raises(
        ValueError, match=r"unrecognized arguments: --timout 5.*did you mean the Cluster's own timeout="
    ):  # a lab's wrapper passes program arguments flat: the misspelt option reaches the program's parser
        make_cluster("test", "ps_sgd", spec, name="typo", run_dir=tmp_path, dry_run=True, timout=5)
    assert not any(tmp_path.iterdir())  # nothing was written, nothing started


def test_an_invalid_program_argument_fails_with_the_programs_own_message(spec, tmp_path):
    with pytest.raises(ValueError, match="--steps must be positive, got 0"):
        Cluster(spec, "ps_sgd", run_dir=tmp_path, dry_run=True, args={"steps": 0})
    with pytest.raises(ValueError, match="unrecognized arguments: --no-such-flag"):
        Cluster(spec, "strategy_train", run_dir=tmp_path, dry_run=True, args={"no_such_flag": 1})


def test_the_programs_arguments_have_their_own_parameter(spec, tmp_path):
    c = Cluster(spec, "ps_sgd", {"steps": 10, "batch_size": 20}, run_dir=tmp_path, dry_run=True, timeout=60)
    assert c.args == {"steps": 10, "batch_size": 20} and c.timeout == 60
    with pytest.raises(TypeError, match="steps"):
        Cluster(spec, "ps_sgd", run_dir=tmp_path, dry_run=True, steps=20)  # no keyword becomes a flag
    with pytest.raises(ValueError, match="args must be a dict"):
        Cluster(spec, "ps_sgd", ["--steps", "10"], run_dir=tmp_path, dry_run=True)


def test_a_program_outside_the_kit_keeps_its_own_parser(spec, tmp_path):
    c = Cluster(spec, "some.user.program", run_dir=tmp_path, dry_run=True, args={"anything": 1})
    assert c.args == {"anything": 1}
