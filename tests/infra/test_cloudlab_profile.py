"""The CloudLab profile as the portal uses it: the RSpec that ``make release``'s repository gives
with the guide's command (``rspec.py``, which stands in for the portal's Python 3 ``geni.portal``:
PyPI's geni-lib has ``geni.rspec`` but a Python 2 ``geni.portal``), the parameters it refuses, and
its startup script, run at two boots of emulated nodes whose student edited a notebook between."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import _cloudlab
from _cloudlab import cloudlab

REPO = Path(__file__).resolve().parents[2]
NS = {
    "r": "http://www.geni.net/resources/rspec/3",
    "emulab": "http://www.protogeni.net/resources/rspec/ext/emulab/1",
    "tour": "http://www.protogeni.net/resources/rspec/ext/apt-tour/1",
}


def rspec(repository: Path, *values: str) -> subprocess.CompletedProcess:
    """docs/cluster.md's command, in a profile repository: ``.venv/bin/python rspec.py profile.py``."""
    pytest.importorskip("geni.rspec.pg", reason="geni-lib (requirements-test.txt) is not installed")
    return subprocess.run(
        [sys.executable, "rspec.py", "profile.py", *values], cwd=repository, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def profile_repository(tmp_path_factory):
    """``make release``'s student kit, committed and cloned as CloudLab clones a profile's
    repository onto every node (``/local/repository``)."""
    return _cloudlab.profile_repository(tmp_path_factory.mktemp("profile"))


def test_the_release_is_a_profile_repository_without_the_solutions(profile_repository):
    from lxml import etree

    top = {p.name for p in profile_repository.iterdir()}
    assert {"profile.py", "startup.sh", "rspec.py", "labkit", "notebooks", "Makefile"} <= top
    assert (
        not list(profile_repository.glob("labkit/labs/*/solution.py"))
        and not (profile_repository / "labkit/grading").exists()
    )
    # the guide's `pip install -r requirements-profile.txt` there installs what rspec.py runs on here
    from importlib.metadata import version

    pins = dict(
        line.split("#")[0].strip().split("==")
        for line in (profile_repository / "requirements-profile.txt").read_text().splitlines()
        if "==" in line
    )
    assert pins == {name: version(name) for name in ("geni-lib", "six", "lxml")}
    done = rspec(profile_repository, "nodes=3", "hardware=m510", "mirror=https://course.example.edu/labkit-data")
    assert done.returncode == 0, done.stderr
    spec = etree.fromstring(done.stdout.encode())
    nodes = spec.findall("r:node", NS)
    assert [n.get("client_id") for n in nodes] == ["node0", "node1", "node2"]
    for i, node in enumerate(nodes):
        assert node.find("r:sliver_type", NS).get("name") == "raw"
        assert node.find("r:sliver_type/r:disk_image", NS).get("name").endswith("emulab-ops//UBUNTU24-64-STD")
        assert node.find("r:hardware_type", NS).get("name") == "m510"
        ip = node.find("r:interface/r:ip", NS)
        assert (ip.get("address"), ip.get("netmask")) == (f"10.10.1.{i + 1}", "255.255.255.0")
        argv = shlex.split(node.find("r:services/r:execute", NS).get("command"))
        assert argv[:7] == ["sudo", "bash", "/local/repository/startup.sh", "--node", f"node{i}", "--nodes", "3"]
        assert (profile_repository / Path(argv[2]).relative_to("/local/repository")).is_file()  # the clone has it
        assert argv[argv.index("--log") + 1] == "/local/labkit-startup.log"
        assert argv[argv.index("--mirror") + 1] == "https://course.example.edu/labkit-data"
        assert "--shared" not in argv and node.find("emulab:blockstore", NS) is None
    (lan,) = spec.findall("r:link", NS)
    assert [r.get("client_id") for r in lan.findall("r:interface_ref", NS)] == ["node0:if1", "node1:if1", "node2:if1"]
    # the portal's description and its instructions, for the TA who instantiates it
    tour = spec.find("tour:rspec_tour", NS)
    assert "node0 runs JupyterLab" in tour.find("tour:description", NS).text
    assert "nodes check --hosts ~/hosts.txt" in tour.find("tour:instructions", NS).text


def test_a_shared_folder_is_a_blockstore_on_node0_that_every_node_mounts(profile_repository):
    from lxml import etree

    done = rspec(profile_repository, "nodes=2", "shared_gb=50")
    assert done.returncode == 0, done.stderr
    node0, node1 = etree.fromstring(done.stdout.encode()).findall("r:node", NS)
    store = node0.find("emulab:blockstore", NS)
    assert (store.get("mountpoint"), store.get("size")) == ("/mydata", "50GB")
    assert node1.find("emulab:blockstore", NS) is None
    for node in (node0, node1):
        assert "--shared /mydata" in node.find("r:services/r:execute", NS).get("command")


@pytest.mark.parametrize(
    "values, parameter, says",
    [
        (["image=UBUNTU22-64-STD"], "image", "Python is 3.10"),
        (["nodes=40"], "nodes", "1 to 16"),
        (["shared_gb=-1"], "shared_gb", "0 (no shared folder)"),
    ],
)
def test_the_portal_refuses_what_cannot_work(profile_repository, values, parameter, says):
    done = rspec(profile_repository, *values)
    assert done.returncode == 1 and not done.stdout
    assert f"error: {parameter}: " in done.stderr and says in done.stderr, done.stderr


def test_a_parameter_the_profile_lacks_is_named(profile_repository):
    done = rspec(profile_repository, "node=3")
    assert done.returncode != 0 and "no parameter node " in done.stderr and "nodes, hardware" in done.stderr


@pytest.fixture
def stand_ins():
    with _cloudlab.stand_ins() as tools:
        yield tools


@pytest.mark.cloudlab
@pytest.mark.slow
def test_two_boots_set_up_the_nodes_and_keep_a_students_edits(profile_repository, stand_ins):
    """``startup.sh`` as the profile runs it (``_cloudlab.boot``) on emulated node0 and node1 at
    once, each with a home of its own. Then the student edits a notebook and adds a file, node0
    boots again, and both are still there."""
    mirror = os.environ.get("LABKIT_DATA_MIRROR") or pytest.skip("LABKIT_DATA_MIRROR is not set")
    log = "/home/ta/startup.log"  # /local is CloudLab's; the node's home stands in

    def boot(*nodes):
        done = _cloudlab.boot(lab, nodes, profile_repository, stand_ins, mirror, log)
        for node, (returncode, out, text) in done.items():
            assert returncode == 0, f"{node}: {text[-3000:]}{out[-2000:]}"
        return {node: text for node, (_, _, text) in done.items()}

    with cloudlab(2) as lab:
        home = lab.home("node0")
        first = boot("node0", "node1")
        assert "copied the kit" in first["node0"] and "copied the kit" in first["node1"]  # each home its own
        ready = (home / ".labkit-ready/node0").read_text().strip()
        assert ready == lab.sh("node0", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
        assert (lab.home("node1") / ".labkit-ready/node1").read_text().strip() == ready  # one kernel: one boot id
        assert [ln.split()[0] for ln in (home / "hosts.txt").read_text().splitlines()] == ["10.10.1.1", "10.10.1.2"]
        assert "every node is ready; wrote /home/ta/hosts.txt" in first["node0"]
        assert not (lab.home("node1") / "hosts.txt").exists()
        assert (home / "labkit/profile.py").exists() and not (home / "labkit/.git").exists()
        assert not list(home.glob(".labkit-copy.*")) and not (home / ".labkit-boot.lock").exists()
        # passwordless ssh between the nodes with the experiment's key (geni-get key), by name and address
        login = lab.sh(
            "node0",
            "mv ~/.ssh/id_ed25519 ~/.ssh/emulation_key && "
            "ssh -o BatchMode=yes node1 hostname && ssh -o BatchMode=yes 10.10.1.2 hostname",
        )
        assert login.stdout.split() == ["node1", "node1"], login.stdout + login.stderr
        # the student's work, then a reboot (the services run again)
        notebook = sorted((home / "labkit/notebooks").glob("*.ipynb"))[0].name
        edit = lab.sh(
            "node0",
            f"cd labkit/notebooks && printf ' ' >> {notebook} && sha256sum {notebook} && "
            "echo mine > my_notes.txt && rm -f ~/.labkit-ready/node0",
        )
        assert edit.returncode == 0, edit.stderr
        second = boot("node0")["node0"]
        assert second.count("=== labkit startup on node0") == 2, second  # the log keeps both boots
        assert "is there already: left as it is" in second.split("=== labkit startup on node0")[-1]
        assert lab.sh("node0", f"cd labkit/notebooks && sha256sum {notebook}").stdout == edit.stdout
        assert (home / "labkit/notebooks/my_notes.txt").read_text() == "mine\n"
        assert (home / ".labkit-ready/node0").read_text().strip() == ready
        assert lab.sh("node0", 'grep -c "^# labkit: the experiment\'s nodes" ~/.ssh/config').stdout.strip() == "1"
        # the kit works across both nodes: worker:1 on node1, reached with the experiment's key
        works = lab.sh(
            "node0",
            "cd labkit && .venv/bin/python -m labkit data verify --dataset mnist --dataset a9a && "
            ".venv/bin/python -m labkit run ps_sgd --hosts ~/hosts.txt --ps 1 --workers 2 "
            "--lab startup --args '--steps 30 --train-limit 1000 --test-limit 200'",
            timeout=300,
        )
        assert works.returncode == 0, works.stdout[-3000:] + works.stderr[-3000:]
        assert "mnist: verified" in works.stdout and "done-queue" in works.stdout
