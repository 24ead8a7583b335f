"""Lab 3's bottleneck verdict on synthetic samples: on emulated nodes it reads each node's NIC at the
run's own link rate (not the tasks' socket bytes, not the host's CPU); on 127.0.0.1 it is unchanged."""

import json

import pytest

from labkit.labs.lab3.experiment import Experiment, Run
from labkit.wire.results import ClusterResult, TaskOutcome
from labkit.measure.summaries import FORMAT, frame, link_use, merge_frames

LINK_BYTES = 1000.0  # the emulated link: 8 kbit/s each way
ADDRESSES = {"node0": "198.18.0.1", "node1": "198.18.0.2"}
PLACED = {"ps:0": "node0", "worker:0": "node0", "worker:1": "node1"}


def _samples(pushed: float, pulled: float, seconds: int = 10) -> dict:
    """One task's ``to_dict()`` samples, 1 s apart, on a node whose link carries ``pulled`` bytes
    out and ``pushed`` in, in alternate seconds (a sync step's phases take turns); node0's ``lo``
    carries worker 0's traffic, 50x the link's rate; the host's CPU is 90% busy (other programs)."""
    cols = {
        c: []
        for c in (
            "t",
            "dt",
            "epoch",
            "cpu_user",
            "cpu_system",
            "cpu_idle",
            "mem_used",
            "mem_buff",
            "mem_cach",
            "mem_free",
            "proc_cpu",
            "proc_rss",
            "net_recv",
            "net_sent",
            "disk_read",
            "disk_write",
            "net_recv_lan0",
            "net_sent_lan0",
            "net_recv_lo",
            "net_sent_lo",
        )
    }
    for t in range(1, seconds + 1):
        lan_in, lan_out = (pushed, 0.0) if t % 2 else (0.0, pulled)
        row = {
            "t": float(t),
            "dt": 1.0,
            "epoch": 1000.0 + t,
            "cpu_user": 80.0,
            "cpu_system": 10.0,
            "cpu_idle": 10.0,
            "mem_used": 1e9,
            "mem_buff": 0.0,
            "mem_cach": 0.0,
            "mem_free": 3e9,
            "proc_cpu": 20.0,
            "proc_rss": 1e8,
            "disk_read": 0.0,
            "disk_write": 0.0,
            "net_recv_lan0": lan_in,
            "net_sent_lan0": lan_out,
            "net_recv_lo": 5e4,
            "net_sent_lo": 5e4,
        }
        row.update(net_recv=lan_in + 5e4, net_sent=lan_out + 5e4)
        for c, v in row.items():
            cols[c].append(v)
    marks = [
        {"label": "sync b100 start", "t": 0.0, "epoch": 1000.0},
        {"label": "sync b100 end", "t": float(seconds), "epoch": 1000.0 + seconds},
    ]
    return {"format": FORMAT, "columns": cols, "marks": marks, "host": "box", "start_epoch": 1000.0, "interval": 1.0}


def _experiment(tmp_path, node_bytes: dict, emulated: bool = True) -> Experiment:
    """1 ps + 2 workers placed as the netem launcher does; each worker's sockets say it moved 20x
    the link's rate (worker 0's bytes never leave node0): what the verdict must not read there."""
    if emulated:
        (tmp_path / "network.json").write_text(
            json.dumps({"link": "8kbit", "rate_bits": 8 * LINK_BYTES, "delay_s": 0, "nodes": ADDRESSES, "cores": 2})
        )
    tasks = []
    for name, node in PLACED.items():
        kind, index = name.split(":")
        entry = {
            "label": "sync b100",
            "steps": {"local": 10, "global": 10},
            "train_s": 10.0,
            "traffic": {"sent_bytes_per_step": LINK_BYTES * 10, "recv_bytes_per_step": LINK_BYTES * 10},
        }
        result = {"samples": _samples(*node_bytes[node]), "runs": [entry]}
        tasks.append(TaskOutcome(name, kind, int(index), ADDRESSES[node], "exited", 0, 10.0, tmp_path / "log", result))
    result = ClusterResult("sparse_lr", tmp_path, {}, tasks)
    return Experiment([Run("sync", 100, result)], {})


def test_link_use_adds_directions_that_take_turns_and_caps_overlap():
    one = {
        "t": 1.0,
        "dt": 1.0,
        "epoch": 1001.0,
        "net_recv_lan0": 600.0,
        "net_sent_lan0": 600.0,
        "net_recv_lo": 1e6,
        "net_sent_lo": 1e6,
    }
    two = {**one, "t": 2.0, "epoch": 1002.0, "net_recv_lan0": 500.0, "net_sent_lan0": 0.0}
    merged = merge_frames({"ps:0": frame([one, two], [], "box", 1000.0, 1.0)})
    use = link_use(merged, {"ps:0": "node0"}, LINK_BYTES).loc["node0"]
    assert use["in_share"] == pytest.approx(0.55) and use["out_share"] == pytest.approx(0.3)
    assert use["busy_share"] == pytest.approx((1.0 + 0.5) / 2)  # 1.2 s of bytes in the first second: at most 1
    with pytest.raises(ValueError, match="bytes_per_s"):
        link_use(merged, {"ps:0": "node0"}, 0)


def test_emulated_verdict_is_the_busiest_links_busy_share(tmp_path):
    exp = _experiment(tmp_path, {"node0": (700.0, 700.0), "node1": (300.0, 300.0)})
    links = exp.links("sync b100")
    assert list(links.index) == ["node0", "node1"] and links.loc["node0", "tasks"] == "ps:0, worker:0"
    assert links.loc["node0", "in_share"] == pytest.approx(0.35)  # each direction alone: far from busy
    v = exp.verdicts(link_gbit=100).loc["sync b100"]  # the caller's link_gbit is not the run's: unused
    assert v["network_utilisation"] == pytest.approx(0.7)  # pull and push one after the other
    assert v["cpu_utilisation"] == pytest.approx(3 * 20 / 100 / 2)  # our tasks on 2 cores, not the host's 90%
    assert v["busiest_link"] == "node0"
    assert v["verdict"].startswith("network-bound: node0's link (ps:0, worker:0) at 8kbit busy 70%"), v["verdict"]


def test_emulated_verdict_without_a_busy_resource_is_latency(tmp_path):
    v = _experiment(tmp_path, {"node0": (200.0, 200.0), "node1": (200.0, 200.0)}).verdicts().loc["sync b100"]
    assert v["network_utilisation"] == pytest.approx(0.2)
    assert v["verdict"].startswith("no resource saturates (busiest: CPU, 30%)"), v["verdict"]


def test_loopback_verdict_is_unchanged(tmp_path):
    """No network.json: the host's CPU and the ps's socket bytes, halved, against ``link_gbit``."""
    v = (
        _experiment(tmp_path, {"node0": (700.0, 700.0), "node1": (700.0, 700.0)}, emulated=False)
        .verdicts(link_gbit=8 * LINK_BYTES / 1e9)
        .loc["sync b100"]
    )
    assert v["cpu_utilisation"] == pytest.approx(0.9)
    assert v["network_utilisation"] == pytest.approx(2 * 20 / 2)  # both workers' socket bytes, halved
    assert v["verdict"].startswith("network-bound: network saturates") and v["busiest_link"] is None
    with pytest.raises(ValueError, match="without emulated links"):
        _experiment(tmp_path, {"node0": (0, 0), "node1": (0, 0)}, emulated=False).links("sync b100")
