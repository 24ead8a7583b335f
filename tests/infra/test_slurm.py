"""The Slurm launcher on a real Slurm: a one-node cluster this module starts and stops itself
(``labkit.infra.minislurm``: munged, slurmctld and slurmd from Debian's packages, in a temporary
folder, on free ports). Where the packages are missing the tests skip and say why; ``.ci/run``
installs them. The tests hold an allocation (``salloc --no-shell``) and run clusters in it as
a TA's notebook would inside ``salloc``: one ``srun`` job step per task.

After the module: no daemon, job or step of its Slurm is left, even when a test failed.
"""

import json
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from helpers import alive, kill_and_expect_task_failed, wait_while
from labkit.wire import spec as cluster
from labkit.infra import slurm
from labkit.distributed.launch import Cluster
from labkit.infra.minislurm import MiniSlurm, missing

pytestmark = [pytest.mark.cluster, pytest.mark.slurm]

TINY = dict(train_limit=2000, test_limit=500, sample_interval=0.25)


@pytest.fixture(scope="module")
def mini(tmp_path_factory, runs_dir):
    reason = missing()
    if reason:
        pytest.skip(f"no Slurm to test with: {reason}")
    s = MiniSlurm(tmp_path_factory.mktemp("slurm"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", s.env()["SLURM_CONF"])
        with s:
            yield s
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(s.folder) in " ".join(p.info["cmdline"] or [])]
    assert not left and not s.step_daemons(), f"the test Slurm left processes behind: {left}"


@pytest.fixture
def allocation(mini, monkeypatch):
    """A job holding the node, with this process in it as ``salloc`` would put a shell."""
    done = subprocess.run(
        ["salloc", "--no-shell", "--nodes=1", "--ntasks=3", "--overcommit", "--time=10", "--job-name=labkit-test"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    granted = re.search(r"Granted job allocation (\d+)", done.stderr)
    assert granted, done.stderr
    job = granted.group(1)
    for name in ("SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.setenv(name, job)
    monkeypatch.setenv("SLURM_JOB_NODELIST", mini.host)
    monkeypatch.delenv("LABKIT_LAUNCHER", raising=False)
    yield job
    mini.run("scancel", job, check=False)
    wait_while(mini.jobs, 30, 0.1, f"the allocation's job {job} to end after scancel")


def test_tf_config_is_the_one_slurm_cluster_resolver_builds():
    """Placement as TensorFlow's resolver does it, for every rank of a 2-node step with a chief,
    a ps and workers (no Slurm needed: the resolver reads the step's environment)."""
    import tensorflow as tf

    SlurmClusterResolver = tf.distribute.cluster_resolver.SlurmClusterResolver

    jobs = {"chief": 1, "ps": 1, "worker": 3}
    alloc = slurm.Allocation("7", ("node2", "node1"), (3, 2))
    per_node = dict(zip(alloc.nodes, alloc.spread(5)))
    ours = slurm.resolver_jobs(jobs, per_node, 8888)
    env = {"SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2,3", "SLURM_STEP_NUM_TASKS": "5"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        for rank in range(5):
            mp.setenv("SLURM_PROCID", str(rank))
            r = SlurmClusterResolver(
                jobs,
                port_base=8888,
                tasks_per_node={"node2": 3, "node1": 2},
                gpus_per_node=3,
                gpus_per_task=1,
                auto_set_gpu=False,
            )
            assert r.cluster_spec().as_dict() == ours
    assert ours == {"chief": ["node1:8888"], "ps": ["node1:8889"], "worker": ["node2:8888", "node2:8889", "node2:8890"]}
    assert alloc.spread(4) == [2, 2] and slurm.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_lab2_sync_runs_through_slurm_with_equal_steps_per_worker(allocation, mini):
    from labkit.labs.lab2 import experiment as sync_async

    run = sync_async.run(
        "sync",
        "cluster",
        50,
        max_steps=60,
        eval_every=30,
        learning_rate=0.5,
        seed=0,
        timeout=300,
        log=None,
        launcher="slurm",
        **TINY,
    )
    assert [t.ended for t in run.result] == ["done-queue", "exited", "exited"]
    g, local = run.global_step(), run.local_steps()
    assert g >= 60 and len(local) == 2 and all(abs(n - g) <= 1 for n in local.values()), (local, g)
    assert sum(local.values()) == 2 * g  # every update aggregated one gradient from each worker
    for t in run.result:  # each task was a job step of the allocation, on its node, on the node's ports
        assert t.host == mini.host and t.log_path.read_text().split("\n", 1)[0].count(f"srun --jobid={allocation} ")
        assert t.result["host"] == mini.host
    assert not mini.steps(), "steps left after the run"


def test_a_task_killed_inside_slurm_is_task_failed_and_leaves_no_step(allocation, mini):
    c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd", args={"steps": 10_000_000, **TINY}, lab="slurm", term_grace=5)
    assert all(" srun " in cmd for _, cmd in c.commands())  # chosen by itself: inside an allocation
    with c:
        running = mini.steps()
        assert len(running) == 2, running
        # scancel --signal=KILL to its step, as Slurm's OOM handling would
        failed, noticed = kill_and_expect_task_failed(c, "worker:0", timeout=120)
    assert failed.task == "worker:0" and failed.returncode == -signal.SIGKILL, str(failed)
    assert f"worker:0 was killed by SIGKILL on {mini.host}" in str(failed) and "Killed" in failed.log_tail
    # noticed, not waited out: far under the wait's timeout, by a margin that holds with both cores busy
    assert noticed < 45, f"TaskFailed took {noticed:.1f} s"
    assert not mini.steps(), f"steps left after TaskFailed: {mini.steps()}"
    assert c.result["ps:0"].result["shutdown"] == "terminated"  # the others got SIGTERM and wrote their results


LAUNCHER = """
import sys, time
from labkit.wire import spec as cluster
from labkit.distributed.launch import Cluster
c = Cluster(cluster.local(ps=1, workers=1), "ps_sgd", {"steps": 10**7, "train_limit": 1000, "test_limit": 200}, lab="slurm")
c.start()
print(c.run_dir, flush=True)
time.sleep(600)
"""


def test_steps_do_not_outlive_a_launcher_killed_with_sigkill(allocation, mini, tmp_path):
    """A notebook kernel killed with SIGKILL runs no cleanup: each srun gets SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and cancels its step, so the tasks end and squeue lists no step."""
    import sys

    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    try:
        run_dir = launcher.stdout.readline().strip()  # start() returned: every server is up
        assert run_dir, "the launcher did not start its cluster"
        assert len(mini.steps()) == 2, mini.steps()
        pids = [json.loads(open(f"{run_dir}/{t}.hello.json").read())["pid"] for t in ("ps-0", "worker-0")]
    finally:
        launcher.kill()
        launcher.wait()
    wait_while(lambda: mini.steps() or alive(pids), 30, 0.1, "the steps and their tasks to end with their launcher")


def test_outside_an_allocation_the_slurm_launcher_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ValueError, match=r"not in one \(no SLURM_JOB_ID\).*salloc"):
        Cluster(cluster.local(ps=1, workers=1), "ps_sgd", launcher="slurm")


# ------------------------------------------------------------------------------ grading a class


def test_array_tasks_as_squeue_lists_them_and_their_limits():
    from labkit.grading.judge.rubric import load_rubric
    from labkit.grading.run.slurm_array import _state, limits

    listed = {"7_0": "RUNNING", "7_[2-4,6%2]": "PENDING"}  # pending tasks listed together, throttled
    assert [_state(f"7_{i}", listed) for i in range(7)] == [
        "RUNNING",
        None,
        "PENDING",
        "PENDING",
        "PENDING",
        None,
        "PENDING",
    ]
    assert _state("8_0", listed) is None
    lab2 = load_rubric(Path(__file__).resolve().parents[2] / "notebooks" / "rubric.toml").labs["lab2"]
    memory, minutes = limits(lab2)
    assert (
        memory == lab2.memory_mb + 256
        and (minutes - 1) * 60 < lab2.notebook_timeout + lab2.start_timeout + 120 <= minutes * 60
    )


def test_submissions_graded_through_a_job_array_match_a_local_run(mini, tmp_path):
    """Three fixture submissions (the fixture lab of ``_fixlab``: a correct one, one that raises, one
    with fake claims) graded locally and as a Slurm job array give the same grades.csv; a fourth
    notebook's array task, cancelled as soon as it is submitted, becomes its row, with the reason."""
    import nbformat

    from helpers import read_csv
    from labkit.grading.grade import GradeOptions, grade
    from labkit.grading.run.sandbox import SANDBOXES
    from _fixlab import CELLS, FAKE_CLAIMS, RUBRIC, lab_notebook

    if SANDBOXES["bwrap"].unavailable():
        pytest.skip(f"{SANDBOXES['bwrap'].unavailable()} (.ci/run installs it)")
    where = {2: CELLS[2][1] + "\nimport socket\nprint('kernel host:', socket.gethostname())"}  # bwrap: 'sandbox'
    students = {
        "good": lab_notebook(where),
        "raises": lab_notebook({**where, 3: "raise ValueError('boom in cell 3')"}),
        "faker": lab_notebook({**where, 6: FAKE_CLAIMS}),
    }
    (tmp_path / "rubric.toml").write_text(RUBRIC)
    for with_cancelled, subs in ((False, tmp_path / "subs"), (True, tmp_path / "subs-slurm")):
        for student, nb in [*students.items(), *([("zcancelled", lab_notebook())] if with_cancelled else [])]:
            (subs / student).mkdir(parents=True)
            nbformat.write(nb, str(subs / student / "fixlab.ipynb"))

    local = grade(
        GradeOptions(tmp_path / "rubric.toml", tmp_path / "subs", tmp_path / "local", parallel=2, labs=["fix"]),
        log=lambda m: None,
    )
    said = []

    def cancel_the_last(message: str) -> None:
        said.append(message)
        array = re.match(r"submitted Slurm array (\d+):", message)
        if array:
            mini.run("scancel", f"{array.group(1)}_3")

    on_slurm = grade(
        GradeOptions(
            tmp_path / "rubric.toml", tmp_path / "subs-slurm", tmp_path / "slurm", labs=["fix"], slurm=mini.partition
        ),
        log=cancel_the_last,
    )
    assert any("--mem=1456M --time=7 in partition debug" in m for m in said), said  # 1200 MB + margin, 180+90+120 s

    def rows(path, students):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in read_csv(path) if r["student"] in students]

    assert rows(tmp_path / "slurm" / "grades.csv", students) == rows(tmp_path / "local" / "grades.csv", students)
    by = {(r["student"], r["check"]): r for r in on_slurm.rows}
    assert (by["good", "execution"]["status"], by["raises", "execution"]["status"]) == ("ok", "error")
    assert by["faker", "accuracy"]["status"] == "mismatch" and sum(r["points"] for r in local.rows) > 0
    cancelled = by["zcancelled", "execution"]
    assert cancelled["status"] == "crashed" and re.fullmatch(
        r"the Slurm job \d+_3 was cancelled.* before its "
        r"notebook (ran|finished)",
        cancelled["reason"],
    ), cancelled
    for student in [*students, "zcancelled"]:
        assert (tmp_path / "slurm" / student / "fixlab.html").exists()
    for student in students:  # each ran in its array task, in the sandbox
        assert "kernel host: sandbox" in (tmp_path / "slurm" / student / "fixlab.ipynb").read_text()
    ran = sorted((tmp_path / "slurm" / ".grader" / "slurm").glob("batch-0-*.out"))
    assert [o.name for o in ran] == ["batch-0-0.out", "batch-0-1.out", "batch-0-2.out"]
    assert all(o.read_text().count("[slurm-array] ") == 1 for o in ran)
    assert not mini.jobs(), mini.jobs()
    inside = []
    for p in psutil.process_iter():
        try:
            if p.cwd().startswith(str(tmp_path)):
                inside.append(p.cmdline())
        except psutil.Error:
            continue
    assert inside == []


def test_placed_shows_where_a_notebooks_cluster_will_run(allocation, mini):
    from labkit.distributed import launch

    spec = launch.placed(cluster.local(ps=1, workers=2))
    assert spec.hosts() == [mini.host] and [t.port - spec.tasks()[0].port for t in spec.tasks()] == [0, 1, 2]


def test_slurms_own_words_in_a_steps_log_become_hints(monkeypatch):
    """A node failure names the node ``sinfo`` lists down, with what to do; a cancelled step says
    whether the job still holds its nodes; a time limit and a SIGKILL on the node each say theirs
    (no Slurm needed: its commands are stood in for)."""
    from labkit.distributed.launchers.srun import _slurm_hint

    monkeypatch.setattr(slurm, "down_nodes", lambda nodes: {"node2": "down*: Not responding"})
    monkeypatch.setattr(slurm, "jobs", lambda job: {"7": "RUNNING"})
    nodes = ("node0", "node1", "node2")
    failed = (
        "slurmstepd-node0: error: *** STEP 7.0 ON node0 CANCELLED AT 2026-01-01T10:00:00 DUE TO NODE FAILURE, "
        "SEE SLURMCTLD LOG FOR DETAILS ***"
    )
    hint = _slurm_hint("7", "node0", -signal.SIGTERM, failed, nodes)
    assert (
        hint.startswith("Slurm lost node2 (down*: Not responding): its slurmd stopped answering, so Slurm ended job 7")
        and "On node2, restart slurmd" in hint
        and "--exclude=node2" in hint
    ), hint
    assert "Slurm lost node2" in _slurm_hint("7", "node2", 1, "srun: error: Node failure on node2", nodes)
    monkeypatch.setattr(slurm, "down_nodes", lambda nodes: {"node1": "drained: bad disk"})
    assert _slurm_hint("7", "node0", -signal.SIGTERM, failed, nodes).startswith(
        "Slurm took node1 (drained: bad disk) out of service, so it ended job 7"
    )
    monkeypatch.setattr(slurm, "down_nodes", lambda nodes: {})
    assert "`sinfo -R` says which and why" in _slurm_hint("7", "node0", -signal.SIGTERM, failed, nodes)
    cancelled = "slurmstepd-node1: error: *** STEP 7.1 ON node1 CANCELLED AT 2026-01-01T10:00:00 ***"
    hint = _slurm_hint("7", "node1", -signal.SIGKILL, cancelled, nodes)
    assert (
        hint == "its step 7.1 on node1 was cancelled (`scancel`, by a person or an administrator); job 7 still "
        "holds its nodes: run again"
    ), hint
    monkeypatch.setattr(slurm, "jobs", lambda job: {})
    assert _slurm_hint("7", "node1", -signal.SIGKILL, cancelled, nodes).startswith("job 7 was cancelled")
    timed = "*** STEP 7.1 ON node1 CANCELLED AT 2026-01-01T10:00:00 DUE TO TIME LIMIT ***"
    assert "reached its time limit" in _slurm_hint("7", "node1", -signal.SIGTERM, timed, nodes)
    killed = "srun: error: node1: task 0: Killed"
    assert _slurm_hint("7", "node1", -signal.SIGKILL, killed, nodes).startswith(
        "something on node1 killed it: most often the kernel's OOM killer"
    )
    assert _slurm_hint("7", "node1", 1, "Traceback ...\nValueError: bad", nodes) == ""
