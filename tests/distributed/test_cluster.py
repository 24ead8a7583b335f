"""Cluster specs: building, outputs, and every validation error (no processes)."""

import json
import re
import socket

import pytest

from labkit.wire import spec as cluster
from labkit.wire.spec import ClusterSpec


def test_local_uses_free_distinct_loopback_ports():
    spec = cluster.local(ps=2, workers=3, chief=True)
    tasks = spec.tasks()
    assert [t.name for t in tasks] == ["ps:0", "ps:1", "chief:0", "worker:0", "worker:1", "worker:2"]
    assert {t.host for t in tasks} == {"127.0.0.1"} and spec.is_local and spec.auto_ports
    ports = [t.port for t in tasks]
    assert len(set(ports)) == len(ports)
    assert all(cluster.port_is_free(p) for p in ports)


def test_port_is_free_sees_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not cluster.port_is_free(s.getsockname()[1])


def test_cs744_layout_and_report_modes():
    spec = cluster.mode("cs744")
    assert spec.as_dict() == {"ps": ["node0:2222"], "worker": ["node0:2223", "node1:2222", "node2:2222"]}
    assert cluster.mode("cluster2", hosts=["node0", "node1", "node2"]) == spec
    assert cluster.mode("single", hosts=["a"]).as_dict() == {"ps": ["a:2222"], "worker": ["a:2223"]}
    assert cluster.mode("cluster", hosts=["a", "b"]).as_dict() == {"ps": ["a:2222"], "worker": ["a:2223", "b:2222"]}
    local = cluster.mode("cluster")
    assert local.num_tasks("ps") == 1 and local.num_tasks("worker") == 2 and local.is_local


def test_from_hosts_ports_chief_and_explicit_base():
    spec = cluster.from_hosts(["h0", "h1:3000"], ps=2, workers=3, chief=True)
    assert spec.as_dict() == {
        "chief": ["h0:2223"],
        "ps": ["h0:2222", "h1:3000"],
        "worker": ["h1:3001", "h0:2224", "h1:3002"],
    }


def test_hosts_file_comments_etc_hosts_lines_and_ports(tmp_path):
    f = tmp_path / "hosts.txt"
    f.write_text("# CloudLab nodes\n10.10.1.1   node0-link-0 node0\n\n10.10.1.2 node1  # second\nnode2:2300\n")
    assert cluster.read_hosts_file(f) == ["10.10.1.1", "10.10.1.2", "node2:2300"]
    spec = cluster.from_hosts_file(f, ps=1)
    assert spec.as_dict() == {"ps": ["10.10.1.1:2222"], "worker": ["10.10.1.1:2223", "10.10.1.2:2222", "node2:2300"]}
    assert cluster.mode("cluster2", hosts=f) == spec


def test_hosts_files_as_people_write_them(tmp_path):
    """A Windows editor's BOM and CRLF, IPv6 bare and in brackets (with and without a port)."""
    f = tmp_path / "hosts.txt"
    f.write_bytes(
        "\ufeff10.10.1.1 node0\r\n2001:db8::5\r\n[2001:db8::6]\r\n[2001:db8::7]:2300\r\n::1\r\n".encode("utf-8")
    )
    hosts = cluster.read_hosts_file(f)
    assert hosts == ["10.10.1.1", "2001:db8::5", "2001:db8::6", "[2001:db8::7]:2300", "::1"]
    spec = cluster.from_hosts(hosts, ps=1, workers=5)
    assert spec.as_dict() == {
        "ps": ["10.10.1.1:2222"],
        "worker": ["10.10.1.1:2223", "[2001:db8::5]:2222", "[2001:db8::6]:2222", "[2001:db8::7]:2300", "[::1]:2222"],
    }
    tasks = spec.tasks()
    assert [t.host for t in tasks[2:]] == ["2001:db8::5", "2001:db8::6", "2001:db8::7", "::1"]  # what ssh gets
    assert tasks[3].port == 2222 and tasks[4].port == 2300
    assert tasks[5].is_local and not tasks[2].is_local  # ::1 is this machine
    assert json.loads(spec.tf_config("worker", 1))["cluster"]["worker"][1] == "[2001:db8::5]:2222"  # gRPC's form


@pytest.mark.parametrize(
    "line, message",
    [
        ("10.10.1.2:notaport", "port 'notaport' is not a number"),
        ("this is not a host", "starts with an IP address, not 'this'"),
        ("-oProxyCommand=evil", "begins with '-'"),
        ("10.10.1.3 -oProxyCommand=evil", "begins with '-'"),
        ("node1, node2", "without commas"),
        ("node1:99999", "outside 1-65535"),
        ("[node1]:2222", "brackets hold an IPv6 address"),
        ("2001:db8::zz", "not an IPv6 address"),
        ("no/slash", "not an IP address or a host name"),
    ],
)
def test_hosts_file_lines_that_are_refused_name_the_line(tmp_path, line, message):
    f = tmp_path / "hosts.txt"
    f.write_text(f"# nodes\nnode0\n{line}\n")
    with pytest.raises(
        ValueError, match=f"hosts.txt, line 3: cannot parse {re.escape(repr(line))}: .*{re.escape(message)}"
    ):
        cluster.read_hosts_file(f)


def test_a_spec_refuses_a_host_ssh_would_read_as_an_option():
    with pytest.raises(ValueError, match="begins with '-'"):
        ClusterSpec({"worker": ["-oProxyCommand=x:2222"]})
    with pytest.raises(ValueError, match="IPv6 address in brackets"):
        ClusterSpec({"worker": ["2001:db8::5:2222"]})
    assert ClusterSpec({"worker": ["[2001:db8::5]:2222"]}).task("worker", 0).host == "2001:db8::5"


def test_outputs_tf_config_env_table():
    spec = ClusterSpec({"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]})
    cfg = json.loads(spec.tf_config("worker", 1))
    assert cfg == {"cluster": spec.as_dict(), "task": {"type": "worker", "index": 1}}
    assert spec.env("ps", 0) == {"TF_CONFIG": spec.tf_config("ps", 0)}
    table = spec.table().splitlines()
    assert table[0].split() == ["task", "host", "port"] and table[2].split() == ["worker:0", "127.0.0.1", "2223"]
    parsed, task = cluster.from_tf_config(spec.tf_config("worker", 1))
    assert parsed == spec and task.name == "worker:1" and task.port == 2224


def test_spec_is_immutable_and_moves_by_copy():
    spec = cluster.local(ps=1, workers=1)
    with pytest.raises(AttributeError):
        spec.auto_ports = False
    moved = spec.with_addresses({"ps:0": "127.0.0.1:4000"})
    assert moved.task("ps", 0).address == "127.0.0.1:4000" and spec.task("ps", 0).address != "127.0.0.1:4000"


@pytest.mark.parametrize(
    "jobs, message",
    [
        ({"ps": ["a:2222"], "worker": ["a:2222"]}, "duplicate address a:2222"),
        ({"worker": ["a:0"]}, "outside 1-65535"),
        ({"worker": ["a:70000"]}, "outside 1-65535"),
        ({"worker": ["a:http"]}, "not a number"),
        ({"worker": ["nohost"]}, "host:port"),
        ({"ps": ["a:1"], "worker": []}, "worker job is empty"),
        ({"ps": ["a:1"]}, "worker job is empty"),
        ({"evaluator": ["a:1"], "worker": ["a:2"]}, "unknown job 'evaluator'"),
        ({"chief": ["a:1", "a:2"], "worker": ["a:3"]}, "at most one chief"),
    ],
)
def test_invalid_specs_say_what_is_wrong(jobs, message):
    with pytest.raises(ValueError, match=message):
        ClusterSpec(jobs)


def test_unknown_task_type_and_index_out_of_range():
    spec = cluster.mode("cs744")
    with pytest.raises(ValueError, match="unknown task type 'chief'; this cluster has ps, worker"):
        spec.tf_config("chief", 0)
    with pytest.raises(ValueError, match="worker index 3 is out of range.*indices 0-2"):
        spec.tf_config("worker", 3)
    with pytest.raises(ValueError, match="worker job is empty"):
        cluster.local(ps=1, workers=0)
    with pytest.raises(ValueError, match="unknown deploy mode 'cluster3'"):
        cluster.mode("cluster3")


def test_hosts_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "hosts.txt"
    bad.write_text("node0\nnode1, node2\n")
    with pytest.raises(ValueError, match=r"line 2: cannot parse 'node1, node2'"):
        cluster.read_hosts_file(bad)
    bad.write_text("node0\n\nnode1:99999\n")
    with pytest.raises(ValueError, match="line 3: .*outside 1-65535"):
        cluster.read_hosts_file(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="lists no hosts"):
        cluster.read_hosts_file(empty)
    with pytest.raises(ValueError, match="does not exist"):
        cluster.read_hosts_file(tmp_path / "missing.txt")


def test_tf_config_errors():
    with pytest.raises(ValueError, match="TF_CONFIG is not set"):
        cluster.from_tf_config("")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid"):
        cluster.from_tf_config('{"cluster": ')
    with pytest.raises(ValueError, match="TF_CONFIG is not valid.*KeyError"):
        cluster.from_tf_config('{"cluster": {"worker": ["a:1"]}}')
