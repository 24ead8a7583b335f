"""The CloudLab profile (``cloudlab/profile.py``): its RSpec, built with PyPI's geni-lib as
CloudLab builds it, and its startup script, run on an emulated node.

PyPI's geni-lib 0.9.9.4 has a ``geni.portal`` that does not import on Python 3 (CloudLab runs
profiles with its own Python 3 geni-lib), so the test stands in for the portal's parameters
with plain values and calls the profile's ``build``, which only needs ``geni.rspec.pg``.
"""
import importlib.util
import shlex
import sys
import types
from pathlib import Path

import pytest

from _cloudlab import cloudlab

REPO = Path(__file__).resolve().parents[1]
NS = {"r": "http://www.geni.net/resources/rspec/3", "emulab": "http://www.protogeni.net/resources/rspec/ext/emulab/1"}


def _profile():
    pytest.importorskip("geni.rspec.pg", reason="geni-lib (requirements-test.txt) is not installed")
    spec = importlib.util.spec_from_file_location("cloudlab_profile", REPO / "cloudlab" / "profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_profile_builds_a_lan_of_nodes_that_run_the_startup_script():
    from lxml import etree

    profile = _profile()
    params = types.SimpleNamespace(nodes=3, hardware="m510", image="UBUNTU22-64-STD",
                                   mirror="https://course.example.edu/labkit-data")
    assert profile.check(params) == []
    rspec = etree.fromstring(profile.build(params).toXMLString())
    nodes = rspec.findall("r:node", NS)
    assert [n.get("client_id") for n in nodes] == ["node0", "node1", "node2"]
    for i, node in enumerate(nodes):
        assert node.find("r:sliver_type", NS).get("name") == "raw"
        assert node.find("r:sliver_type/r:disk_image", NS).get("name").endswith("emulab-ops//UBUNTU22-64-STD")
        assert node.find("r:hardware_type", NS).get("name") == "m510"
        ip = node.find("r:interface/r:ip", NS)
        assert (ip.get("address"), ip.get("netmask")) == (f"10.10.1.{i + 1}", "255.255.255.0")
        command = node.find("r:services/r:execute", NS).get("command")
        assert shlex.split(command)[:8] == ["sudo", "bash", "/local/repository/cloudlab/startup.sh", "--node",
                                           f"node{i}", "--nodes", "3", "--mirror"]
        assert "https://course.example.edu/labkit-data" in command
    lan, = rspec.findall("r:link", NS)
    assert [r.get("client_id") for r in lan.findall("r:interface_ref", NS)] == ["node0:if1", "node1:if1", "node2:if1"]
    assert lan.find("r:link_type", NS).get("name") == "lan"
    # the parameters the portal shows, and what it refuses
    assert [p.name for p in profile.PARAMETERS] == ["nodes", "hardware", "image", "mirror"]
    bad = types.SimpleNamespace(nodes=40, hardware="", image="CENTOS7", mirror="")
    assert [name for name, _ in profile.check(bad)] == ["nodes", "image"]
    any_hw = etree.fromstring(profile.build(types.SimpleNamespace(nodes=1, hardware="", image="UBUNTU24-64-STD",
                                                                  mirror="")).toXMLString())
    assert any_hw.find("r:node/r:hardware_type", NS) is None


@pytest.mark.cloudlab
@pytest.mark.slow
def test_the_startup_script_sets_up_a_node(tmp_path):
    """``cloudlab/startup.sh`` as CloudLab runs it (root, at boot) on emulated node0 of two, for
    the account ``ta``; the node reaches no internet, so: the Debian packages are this machine's
    (the script installs only what is missing), the data comes from the course mirror
    (``--mirror``, here LABKIT_DATA_MIRROR), and pip's download of the pinned wheels is stood in
    for by ``.venv`` being this machine's, linked before the script runs (its ``make setup`` then
    finds it installed). The kit then works there: its data verifies and a cluster runs."""
    import os

    mirror = os.environ.get("LABKIT_DATA_MIRROR") or pytest.skip("LABKIT_DATA_MIRROR is not set")
    with cloudlab(2) as lab:
        seed = lab.sh("node0", f"mkdir -p labkit && ln -s {shlex.quote(sys.prefix)} labkit/.venv")
        assert seed.returncode == 0, seed.stderr
        done = lab.sh("node0", f"bash {REPO}/cloudlab/startup.sh --node node0 --nodes 2 --user ta "
                               f"--mirror {shlex.quote(mirror)} --repository {REPO}", user=False, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        home = lab.home("node0")
        assert (home / "labkit/.cloudlab-ready").exists() and (home / "labkit/cloudlab/profile.py").exists()
        assert [ln.split()[0] for ln in (home / "hosts.txt").read_text().splitlines()] == ["10.10.1.1", "10.10.1.2"]
        assert not (home / "labkit/.git").exists()
        works = lab.sh("node0", "cd labkit && .venv/bin/python -m labkit data verify --dataset mnist --dataset a9a && "
                                ".venv/bin/python -m labkit run ps_sgd --ps 1 --workers 1 --lab startup "
                                "--args '--steps 30 --train-limit 1000 --test-limit 200'", timeout=300)
        assert works.returncode == 0, works.stdout[-3000:] + works.stderr[-3000:]
        assert "mnist: verified" in works.stdout and "done-queue" in works.stdout
