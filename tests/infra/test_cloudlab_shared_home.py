"""CloudLab on homes shared over NFS, as many clusters have them: ``startup.sh`` boots 3 emulated
nodes at once whose account has one home (``LocalCloudLab(shared_home=True)``). One node copies
and installs the kit while the others wait for it; each node says it is ready in a file of its
own; node0 writes ``~/hosts.txt`` once, when all are. Then, on that experiment, a hosts file with
a wrong address: the run stops before any task starts, within seconds, naming the node as the
hosts file does; and ``make cloudlab-update`` brings the kit up to date while the student's
notebook stays as they left it."""

import os
import shlex
import subprocess
import sys
import time

import pytest

import _cloudlab
from _cloudlab import cloudlab
from helpers import data_mirror

pytestmark = [pytest.mark.cloudlab, pytest.mark.slow]

LOG = "/run/labkit-startup.log"  # each node's own (its /run), as CloudLab's /local is
NAMES = ["node0", "node1", "node2"]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """The booted experiment: (lab, the profile repository, each node's boot (exit, output, log))."""
    mirror = data_mirror()
    repository = _cloudlab.profile_repository(tmp_path_factory.mktemp("profile"))
    with _cloudlab.stand_ins() as tools, cloudlab(3, shared_home=True) as lab:
        t0 = time.monotonic()
        booted = _cloudlab.boot(lab, NAMES, repository, tools, mirror, LOG, "--wait", "300")
        print(f"\n3 nodes on one shared home booted in {time.monotonic() - t0:.1f} s")
        yield lab, repository, tools, mirror, booted


def test_every_node_boots_once_the_one_that_copies_has_set_up_the_shared_home(experiment):
    lab, _, _, _, booted = experiment
    for node, (returncode, out, log) in booted.items():
        assert returncode == 0, f"{node}: {log[-3000:]}{out[-2000:]}"
        assert "Directory not empty" not in log and f"=== labkit ready on {node}" in log
    copied = [n for n, (_, _, log) in booted.items() if "copied the kit" in log]
    assert len(copied) == 1, {n: log[-1500:] for n, (_, _, log) in booted.items()}
    for node in set(NAMES) - set(copied):
        assert "is there already: left as it is" in booted[node][2]
    home = lab.home("node0")
    assert (lab.home("node2") / "labkit/profile.py").exists()  # one home, seen from every node
    assert not list(home.glob(".labkit-copy.*")) and not (home / ".labkit-boot.lock").exists()
    # each node's own ready file, with its boot's id
    boot_id = lab.sh("node1", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert sorted(p.name for p in (home / ".labkit-ready").iterdir()) == NAMES
    assert {(home / ".labkit-ready" / n).read_text().strip() for n in NAMES} == {boot_id}
    # node0 wrote the hosts file, once, after every node was ready
    hosts = (home / "hosts.txt").read_text().splitlines()
    assert [ln.split() for ln in hosts] == [[f"10.10.1.{i + 1}", f"node{i}-link-0", f"node{i}"] for i in range(3)]
    assert ["wrote /home/ta/hosts.txt" in booted[n][2] for n in NAMES] == [True, False, False]
    assert booted["node0"][2].index("every node is ready") > booted["node0"][2].index("=== labkit ready on node0")


def test_a_wrong_address_stops_the_run_before_any_task_starts_naming_its_node(experiment):
    lab = experiment[0]
    wrong = lab.sh("node0", "sed 's/^10.10.1.3 /10.10.1.9 /' ~/hosts.txt > ~/wrong.txt && cat ~/wrong.txt")
    assert ["10.10.1.9", "node2-link-0", "node2"] in [ln.split() for ln in wrong.stdout.splitlines()], wrong
    t0 = time.monotonic()
    done = lab.sh(
        "node0",
        "cd labkit && .venv/bin/python -m labkit run ps_sgd --hosts ~/wrong.txt --ps 1 --workers 3 "
        "--lab wrongaddress --args '--steps 30 --train-limit 1000 --test-limit 200'",
        timeout=120,
    )
    took = time.monotonic() - t0
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no task was started: 1 node(s) cannot run their tasks" in done.stderr, done.stderr
    assert "ssh to node2 (10.10.1.9) failed: unreachable host" in done.stderr, done.stderr
    assert took < 30, f"the wrong address was named after {took:.0f} s"
    logs = lab.sh("node0", "ls labkit/runs/wrongaddress/*/ 2>/dev/null | grep -c '\\.log$' || true").stdout.strip()
    assert logs == "0", f"task logs were written: a task started ({logs})"
    check = lab.sh("node0", "cd labkit && .venv/bin/python -m labkit nodes check --hosts ~/wrong.txt", timeout=120)
    assert check.returncode == 1 and "node2 (10.10.1.9): check versions failed (exit 255)" in check.stderr, (
        check.stdout + check.stderr
    )
    print(f"\nthe wrong address of node2 named after {took:.1f} s")


def test_an_update_brings_the_kit_up_to_date_and_leaves_the_students_notebooks(experiment):
    lab, repository, tools, mirror, _ = experiment
    home = lab.home("node0")
    notebooks = sorted(p.name for p in (home / "labkit/notebooks").glob("*.ipynb"))
    edited = notebooks[0]
    student = lab.sh(
        "node0",
        f"cd labkit/notebooks && printf ' ' >> {edited} && sha256sum {edited} && echo mine > my_notes.txt",
    )
    assert student.returncode == 0, student.stderr
    # the course's kit changes: a notebook (the one the student edited), a new notebook, the README
    origin = repository.parent / "release"
    (origin / "notebooks" / edited).write_text((origin / "notebooks" / edited).read_text() + " ")
    (origin / "notebooks/99_new.ipynb").write_text((origin / "notebooks" / notebooks[-1]).read_text())
    (origin / "README.md").write_text((origin / "README.md").read_text() + "\nUpdated for week 3.\n")
    for args in (["add", "-A"], ["commit", "-q", "-m", "week 3"]):
        subprocess.run([*_cloudlab.GIT, *args], cwd=origin, check=True, capture_output=True)
    # the guide's `make cloudlab-update` on node0 is this command, run with sudo
    make = lab.sh("node0", "cd labkit && make -n cloudlab-update HOSTS=~/hosts.txt")
    assert "sudo bash startup.sh --update" in make.stdout and "--hosts /home/ta/hosts.txt" in make.stdout, make.stdout
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "LABKIT_TEST_VENV": sys.prefix, "kit": "/home/ta/labkit"}
    update = lab.sh(
        "node0",
        f"bash /home/ta/labkit/startup.sh --update --user ta --node node0 --hosts /home/ta/hosts.txt "
        f"--repository {shlex.quote(str(repository))} --mirror {shlex.quote(mirror)}",
        user=False,
        env=env,
        timeout=600,
    )
    assert update.returncode == 0, update.stdout[-3000:] + update.stderr[-3000:]
    assert "is at " in update.stdout and "week 3" in update.stdout
    # node1's and node2's kit is this one: nothing copied over it, nothing installed twice
    assert "[10.10.1.2] labkit is the same directory as on this machine: set up once" in update.stdout
    assert "[10.10.1.3] labkit is the same directory as on" in update.stdout and "copied" not in update.stdout
    assert "[10.10.1.2] ok: node1" in update.stdout and "[10.10.1.3] ok: node2" in update.stdout
    assert "Updated for week 3." in (home / "labkit/README.md").read_text()
    assert (home / "labkit/notebooks/99_new.ipynb").exists()
    assert lab.sh("node0", f"cd labkit/notebooks && sha256sum {edited}").stdout == student.stdout
    assert (home / "labkit/notebooks/my_notes.txt").read_text() == "mine\n"
    assert not (home / ".labkit-boot.lock").exists()


def test_a_node_waits_at_most_its_bound_for_the_node_that_holds_the_shared_home(experiment):
    """node1 holds the home's lock (its start-up still copying, say): node2 waits its bound, then
    stops naming node1. A lock node2 itself left at an earlier boot is removed at its next start."""
    lab, repository, tools, mirror, _ = experiment
    env = {"PATH": f"{tools}:{os.environ['PATH']}", "LABKIT_TEST_VENV": sys.prefix, "kit": "/home/ta/labkit"}
    update = (
        f"bash /home/ta/labkit/startup.sh --update --user ta --wait 10 --hosts /home/ta/no-hosts.txt "
        f"--repository {shlex.quote(str(repository))} --mirror {shlex.quote(mirror)}"
    )
    held = "mkdir ~/.labkit-boot.lock && echo 'node1 {boot} 1 2026-12-07T21:00:00Z' > ~/.labkit-boot.lock/owner"
    assert lab.sh("node1", held.format(boot="its-boot")).returncode == 0
    t0 = time.monotonic()
    waited = lab.sh("node2", update, user=False, env=env, timeout=120)
    took = time.monotonic() - t0
    assert waited.returncode == 5, waited.stdout + waited.stderr
    assert "waiting for node1, which sets up the kit in /home/ta (shared with it) since 2026-12-07T21:00:00Z" in (
        waited.stdout
    )
    assert "node2 waited 10 s for node1 to finish setting up the kit in /home/ta" in waited.stderr, waited.stderr
    assert "remove /home/ta/.labkit-boot.lock and reboot node2" in waited.stderr
    assert 10 <= took < 40, took
    assert lab.sh("node1", "sed -i 's/^node1 /node2 /' ~/.labkit-boot.lock/owner").returncode == 0
    again = lab.sh("node2", update, user=False, env=env, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "removing the lock an earlier start-up of node2 left in /home/ta" in again.stdout
    assert "only this node's kit was brought up to date" in again.stdout
    assert not (lab.home("node0") / ".labkit-boot.lock").exists()
