"""``make test`` keeps a group's tests on one worker (``-n 2 --dist loadgroup``, tests/conftest.py).

The suite depends on it twice: a module-scoped fixture (a class graded once, then merged,
exported and delivered by the next tests) must run once and on the worker that runs those tests,
and the ``system`` group must run one test at a time. pytest 9.2 with pytest-xdist 3.8 silently
made loadgroup plain load (every test anywhere), so a class's later steps saw a class graded
without them; this checks the pinned pair keeps its promise."""

import subprocess
import sys
from collections import defaultdict

PROBE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group({group!r})


@pytest.fixture(scope="module")
def setup_once():
    with open({log!r}, "a") as f:
        f.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} setup\\n")


@pytest.mark.parametrize("step", range(4))
def test_step(setup_once, step):
    with open({log!r}, "a") as f:
        f.write(f"{{os.environ['PYTEST_XDIST_WORKER']}} step\\n")
"""


def test_a_groups_tests_share_one_worker_and_one_module_fixture(tmp_path):
    logs = {}
    for name in ("test_class_a.py", "test_class_b.py"):
        logs[name] = tmp_path / f"{name}.log"
        (tmp_path / name).write_text(PROBE.format(group=name, log=str(logs[name])))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
            "-q",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for name, log in logs.items():
        seen = defaultdict(list)
        for line in log.read_text().splitlines():
            worker, what = line.split()
            seen[what].append(worker)
        assert len(seen["setup"]) == 1, f"{name}: module fixture set up {len(seen['setup'])} times"
        assert set(seen["step"]) == set(seen["setup"]) and len(seen["step"]) == 4, (name, dict(seen))


def test_fast_groups_run_first_then_the_heavy_ones_longest_first():
    from _order import longest_first

    groups = ["a:fast", "nb05", "a", "b:fast", "system", "nb05", "new", "a:fast"]
    fast = [True, False, False, True, False, False, False, True]
    seconds = [1.0, 150.0, 20.0, 9.0, 600.0, 50.0, 0.0, 2.0]  # each item's
    order = [groups[i] for i in longest_first(groups, fast, seconds)]
    # a group no test of which was timed goes after the timed ones; a group's items keep their file order
    assert order == ["b:fast", "a:fast", "a:fast", "system", "nb05", "nb05", "a", "new"]
    assert longest_first(groups, fast, [0.0] * 8) == [0, 7, 3, 1, 5, 2, 4, 6]  # no timings: first appearance, together
