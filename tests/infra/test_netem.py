"""Emulated links (``labkit.infra.netem``): the rate a shaped link carries, in each direction; the delay;
and that nothing outlives a network, however its owner ends (stop, or SIGKILL with a process in a
namespace that ignores SIGTERM). Small transfers at 200 Mbit/s keep them cheap on a busy machine.
Skipped, with the reason, where links cannot be emulated."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import alive, as_nobody, wait_until, wait_while
from labkit.infra import netem
from labkit.infra.netem import EmulatedNetwork, LinkSpec, parse_link
from labkit.measure.sockets import nic_counters

RATE = "200mbit"
REPO = Path(__file__).resolve().parents[2]


def _available(link=RATE) -> str:
    mode, why = netem.availability(link)
    if mode is None:
        pytest.skip(f"links cannot be emulated here: {why}")
    return mode


# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    "text, rate, delay",
    [
        ("1gbit", 1e9, 0.0),
        ("1gbit,0.2ms", 1e9, 2e-4),
        ("200 Mbit", 2e8, 0.0),
        ("10mbit/s, 50us", 1e7, 5e-5),
        (" 2.5GBIT , 1ms ", 2.5e9, 1e-3),
        ("100kbit,1s", 1e5, 1.0),
    ],
)
def test_parse_link_reads_rate_and_delay(text, rate, delay):
    link = parse_link(text)
    assert link.rate_bits == pytest.approx(rate) and link.delay_s == pytest.approx(delay)
    assert parse_link(str(link)) == link  # its text reads back the same
    assert link.bytes_per_s == pytest.approx(rate / 8)


@pytest.mark.parametrize(
    "text, says",
    [
        ("1gbps", "bytes per second"),
        ("1 gigabit", "cannot read the rate"),
        ("fast", "cannot read the rate"),
        ("1gbit,0.2", "cannot read the delay"),
        ("1gbit,2ms,1%", "3 parts"),
        ("0.1bit", "between"),
        ("1gbit,20s", "more than any LAN"),
        (1000, "RATE,DELAY"),
    ],
)
def test_parse_link_errors_say_what_to_write(text, says):
    with pytest.raises(ValueError) as info:
        parse_link(text)
    assert says in str(info.value) and "1gbit,0.2ms" in str(info.value)


def test_no_link_is_no_emulation():
    assert parse_link(None) is None and parse_link("") is None and parse_link("  ") is None
    assert parse_link(LinkSpec(1e9)) == LinkSpec(1e9)
    with pytest.raises(ValueError, match="needs a link"):
        EmulatedNetwork(2, "")
    with pytest.raises(ValueError, match="distinct node names"):
        EmulatedNetwork(["a", "a"], "1gbit")


def test_unavailable_says_why_and_what_still_works(monkeypatch):
    netem._probe.cache_clear()
    real_which = shutil.which
    monkeypatch.setattr(netem.shutil, "which", lambda tool: None if tool == "tc" else real_which(tool))
    try:
        with pytest.raises(netem.EmulationUnavailable) as info:
            EmulatedNetwork(2, "1gbit").start()
        assert "tc not found" in str(info.value) and "apt-get install iproute2" in str(info.value)
        assert "127.0.0.1" in str(info.value) and "hosts_file" in str(info.value)
        netem._probe.cache_clear()
        monkeypatch.setattr(netem.sys, "platform", "darwin")
        assert "Linux" in netem.availability("1gbit")[1]
    finally:
        netem._probe.cache_clear()


# ------------------------------------------------------------------------------ the links


def test_a_shaped_link_carries_its_rate_each_way_and_a_node_receives_at_most_its_rate():
    """One stream carries the rate (TCP payload, so a little under: headers count on the wire);
    two nodes sending to a third at once share its one link, in its receiving direction."""
    _available()
    rate = parse_link(RATE).bytes_per_s
    with EmulatedNetwork(3, RATE) as net:
        one = netem.throughput(net, "node1", "node0", 10_000_000)
        assert 0.9 * rate < one < 1.02 * rate, f"{one * 8 / 1e6:.0f} Mbit/s on a {RATE} link"
        back = netem.throughput(net, "node0", "node1", 10_000_000)
        assert 0.9 * rate < back < 1.02 * rate, f"{back * 8 / 1e6:.0f} Mbit/s back on a {RATE} link"

        samples, done = [], threading.Event()

        def sample():  # node0's bytes in, and what node1 and node2 put on the switch (its ports p1, p2)
            while not done.is_set():
                into = net.counters("node0")["lan0"][1]
                t = time.monotonic()  # read right after the counter the bound is about
                sw = nic_counters(pid=net.switch.pid)
                samples.append((t, into, sw["p1"][1], sw["p2"][1]))
                time.sleep(0.05)

        def send(node: str, port: int):
            netem.throughput(net, node, "node0", 16_000_000, port=port)

        threads = [threading.Thread(target=sample)]
        threads += [threading.Thread(target=send, args=(n, 5300 + i)) for i, n in enumerate(("node1", "node2"))]
        for t in threads:
            t.start()
        for t in threads[1:]:
            t.join()
        done.set()
        threads[0].join()
        # over every second in which both sent, node0 received at most its link's rate (unshaped, it
        # would take in what both send: twice that); a sample's time is a few ms off its counter's
        windows = []
        for i, (t0, *c0) in enumerate(samples):
            j = next((j for j in range(i, len(samples)) if samples[j][0] >= t0 + 1.0), None)
            if j is not None:
                span = samples[j][0] - t0
                windows.append([(c1 - c) / span for c, c1 in zip(c0, samples[j][1:])])
        both = [w for w in windows if min(w[1], w[2]) > 0.25 * rate]
        assert both, f"the two senders never overlapped: {windows}"
        assert max(w[0] for w in both) < 1.1 * rate, both
        assert max(w[0] for w in windows) > 0.85 * rate
        assert net.listening("node0", 22) is False


def test_the_links_micro_benchmark_gives_its_rate_and_a_small_alpha():
    """``measure_link``, what Lab 5's cost model is told: B is the shaped rate (TCP payload: a little
    under), not the 50-100% more a line through the burst-sized messages gave at 100 Mbit/s."""
    _available("100mbit")
    # 1-8 MiB fix B as the kit's 1-32 MiB do (the kit's sizes take 10 s of transfers at this rate)
    link = netem.measure_link("100mbit", sizes=(1024, 4096) + tuple(2**p for p in range(20, 24)), repeats=2)
    rate = parse_link("100mbit").bytes_per_s
    assert 0.9 * rate < link.bandwidth < 1.02 * rate, link
    assert 0 <= link.alpha_s < 0.005 and link.rel_error < 0.1, link


def test_delay_is_one_way_between_nodes():
    _available(f"{RATE},20ms")
    with EmulatedNetwork(2, f"{RATE},20ms") as net:
        rows = netem.transfers(net, "node0", "node1", [100], repeats=5)
    rtt = sorted(t for _, t in rows)[len(rows) // 2]  # a message and its ack: two one-way trips
    assert 0.038 < rtt < 0.06, f"round trip {rtt * 1e3:.1f} ms on a 20 ms link"


def test_nodes_have_their_own_addresses_and_nic_counters():
    mode = _available()
    with EmulatedNetwork(["a", "b"], RATE) as net:
        assert set(net.addresses()) == {"a", "b"} and net.node_of(net.address("b")) == "b"
        shown = net.run("a", ["ip", "-o", "-4", "addr", "show", "dev", "lan0"]).stdout
        assert net.address("a") in shown
        before = net.counters("b")["lan0"]
        netem.throughput(net, "a", "b", 2_000_000)
        sent, recv = (x - y for x, y in zip(net.counters("b")["lan0"], before))
        assert 4_000_000 < recv < 4_400_000 and sent < 0.2 * recv  # twice (warm-up, timed) in; acks out
        assert net.reachable == (mode == "root")
        assert net.describe()["nodes"] == net.addresses() and "lan0" in net.describe()["nic"]
    assert net.leftovers() == [] and not net.running
    with pytest.raises(RuntimeError, match="stopped"):
        net.command("a", ["true"])


def test_two_networks_at_once_do_not_collide():
    mode = _available()
    with EmulatedNetwork(2, RATE) as one, EmulatedNetwork(2, RATE) as two:
        assert one.subnet != two.subnet
        if mode == "root":  # an unprivileged user's networks have no link into this machine's namespace
            assert one.driver_link != two.driver_link
        # each shapes its own link: no more than the rate, but for the bucket's burst (64 KB) sent at once
        ceiling = netem.parse_link(RATE).bytes_per_s * 1_000_000 / (1_000_000 - 64 * 1024)
        assert 0 < netem.throughput(one, "node0", "node1", 1_000_000) < ceiling
        assert 0 < netem.throughput(two, "node0", "node1", 1_000_000) < ceiling


# ------------------------------------------------------------------------------ ownership

STUBBORN = "trap '' TERM; echo ready; while :; do sleep 0.1; done"  # a process SIGTERM does not end
OWNER = (
    f"STUBBORN = {STUBBORN!r}"
    + """
import json, subprocess, sys, time
from labkit.infra import netem
net = netem.EmulatedNetwork(2, "100mbit", grace=2, mode=sys.argv[1] or None).start()
stubborn = subprocess.Popen(net.command("node1", ["sh", "-c", STUBBORN]), start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
assert stubborn.stdout.readline() == "ready\\n"
print(json.dumps({"link": net.driver_link, "stubborn": stubborn.pid,
                  "holders": [n.pid for n in net._all_nodes().values()],
                  "netns": [list(n.netns) for n in net._all_nodes().values()]}), flush=True)
time.sleep(600)
"""
)


def _processes_in(namespaces: list) -> list[int]:
    wanted = {tuple(ns) for ns in namespaces}
    return [pid for pid, ns in netem._netns_of_all().items() if ns in wanted]


@pytest.mark.parametrize("mode", ["root", "userns"])
def test_nothing_outlives_an_owner_killed_with_sigkill(mode):
    """The owner dies by SIGKILL (no cleanup runs) with a process in a namespace that ignores
    SIGTERM: the holders stop it, and the kernel frees the namespaces and the driver's link."""
    have = _available()
    if mode == "root" and have != "root":
        pytest.skip("root mode needs root")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, mode], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        made = json.loads(owner.stdout.readline())
        assert _processes_in(made["netns"]), "the namespaces were never made"
    finally:
        owner.kill()
        owner.wait()

    def link_left() -> bool:
        return bool(made["link"]) and os.path.exists(f"/sys/class/net/{made['link']}")

    wait_while(
        lambda: _processes_in(made["netns"]) or link_left(),
        20,
        0.1,
        "the owner's namespaces to empty and its link to go",
    )
    # gone, or zombies init has yet to reap; a holder outside the namespaces may end just after they empty
    wait_while(lambda: alive([made["stubborn"], *made["holders"]]), 20, 0.1, "the holders to end")
    if mode == "root":
        assert made["link"] and not link_left(), "the driver's link is left"
    else:
        assert made["link"] is None


def test_stop_ends_what_runs_in_the_namespaces_and_leaves_nothing():
    _available()
    net = EmulatedNetwork(2, RATE, grace=1).start()
    link = net.driver_link
    stubborn = subprocess.Popen(net.command("node0", ["sh", "-c", STUBBORN]), stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline() == "ready\n"
    # in its namespace before stop() begins: nsenter that has not yet entered would fail on its own
    polite = subprocess.Popen(
        net.command("node1", ["sh", "-c", "echo ready; exec sleep 600"]), stdout=subprocess.PIPE, text=True
    )
    assert polite.stdout.readline() == "ready\n"
    t0 = time.monotonic()
    assert net.stop() == []
    assert time.monotonic() - t0 < 10
    assert stubborn.wait(5) == -signal.SIGKILL and polite.wait(5) == -signal.SIGTERM
    assert link is None or not os.path.exists(f"/sys/class/net/{link}")
    assert net.stop() == []  # again: nothing to do


def test_an_interrupt_during_start_leaves_nothing(monkeypatch):
    _available()
    net = EmulatedNetwork(3, RATE)
    real = EmulatedNetwork._wire

    def interrupted(self):
        real(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(EmulatedNetwork, "_wire", interrupted)
    with pytest.raises(KeyboardInterrupt):
        net.start()
    wait_while(net.leftovers, 20, 0.05, "the network's namespaces, links and processes to go")
    assert net.nodes and all(n.holder.poll() is not None for n in net.nodes.values())


def test_unprivileged_user_gets_the_same_links():
    """As a user without privileges (``nobody``, when the tests run as root, shown the checkout
    wherever it is: ``helpers.as_nobody``): the namespaces belong to a user namespace, and the link
    carries its rate."""
    python = sys.executable
    if os.geteuid() == 0:
        version = "python%d.%d" % sys.version_info[:2]  # the venv's packages must fit the interpreter
        python = next((p for p in (f"/usr/bin/{version}", f"/usr/local/bin/{version}") if os.access(p, os.X_OK)), None)
        if not all(map(shutil.which, ("setpriv", "unshare"))) or python is None:
            pytest.skip(f"needs setpriv, unshare and a system {version} that user nobody can run")
    probe = (
        "import json; from labkit.infra import netem\n"
        "with netem.EmulatedNetwork(2, '200mbit') as net:\n"
        "    rate = netem.throughput(net, 'node0', 'node1', 5_000_000)\n"
        "print(json.dumps([net.mode, rate, net.leftovers()]))\n"
    )
    site = next(p for p in sys.path if p.endswith("site-packages"))
    path = os.pathsep.join([os.environ["PATH"], "/usr/sbin", "/sbin"])  # ip and tc, off a normal user's PATH on Debian
    env = {"PATH": path, "HOME": "/tmp", "PYTHONPATH": f"{REPO}:{site}"}
    done = subprocess.run(
        [*as_nobody(), python, "-c", probe], capture_output=True, text=True, timeout=120, env=env, cwd="/"
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"root cannot make a mount namespace here to show nobody the checkout: {done.stderr.strip()}")
    if "unprivileged user" in done.stderr:
        pytest.skip(f"this host allows no unprivileged user namespaces: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    mode, rate, left = json.loads(done.stdout.splitlines()[-1])
    assert mode == "userns" and left == []
    assert 0.9 * 25e6 < rate < 1.02 * 25e6


# ------------------------------------------------------------------------------ per-node measurements


def _sleeper(net: EmulatedNetwork, node: str) -> subprocess.Popen:
    """A process inside ``node``, standing for a task there."""
    p = subprocess.Popen(net.command(node, ["sh", "-c", "echo in; exec sleep 60"]), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "in\n"
    return p


def test_the_sampler_counts_a_nodes_own_nics_from_outside():
    """The driver samples node1's namespace through a pid inside it: node1's lan0 shows the
    bytes sent to it, which this process's own interfaces never see."""
    _available()
    from labkit.measure.monitor import ResourceSampler

    with EmulatedNetwork(2, RATE) as net:
        inside = _sleeper(net, "node1")
        try:
            with pytest.raises(ValueError, match="no interface named \\['lan0'\\] on"):
                ResourceSampler(0.1, pids=[], nics=["lan0"])
            with (
                ResourceSampler(0.1, pids=[], netns_pid=inside.pid, nics=["lan0"]) as node1,
                ResourceSampler(0.1, pids=[]) as here,
            ):
                netem.throughput(net, "node0", "node1", 3_000_000)
                time.sleep(0.2)
        finally:
            inside.kill()
            inside.wait()
    f = node1.to_frame()
    assert list(c for c in f.columns if c.startswith("net_recv_")) == ["net_recv_lan0"]
    assert 6_000_000 < f["net_recv"].sum() < 6_600_000  # warm-up and timed transfer, with headers
    assert "net_recv_lan0" not in here.to_frame().columns
    back = ResourceSampler.from_dict(json.loads(json.dumps(node1.to_dict())))
    assert back.netns_pid == node1.netns_pid == inside.pid


class _NodeCluster:
    """What LiveView reads of a Cluster, for tasks whose pids are given."""

    def __init__(self, pids: dict, tmp_path):
        from labkit.wire import spec as cluster

        self.pids, self.module, self.run_dir = pids, "labkit.tasks.ps_sgd", tmp_path
        self.spec = cluster.from_hosts(["10.0.0.1", "10.0.0.2"], ps=1, workers=1)

    def local_pids(self):
        return dict(self.pids)

    def status(self):
        return {name: "running" for name in self.pids}


def test_the_live_view_shows_each_emulated_nodes_nic(tmp_path):
    """A task on 127.0.0.1 shows the host's NICs; one on an emulated node shows that node's NICs
    but lo, also when it entered the node's namespace after the view first looked at it."""
    _available()
    from labkit.distributed import live

    with EmulatedNetwork(2, RATE) as net:
        late = subprocess.Popen(
            ["sh", "-c", "read _; exec " + " ".join(net.command("node0", ["sleep", "60"]))],
            stdin=subprocess.PIPE,
            text=True,
        )
        here = subprocess.Popen(["sleep", "60"])
        view = live.LiveView(_NodeCluster({"ps:0": late.pid, "worker:0": here.pid}, tmp_path), live=False)
        try:
            view._watch_new_tasks()
            assert dict(view.table()["nics"]) == {"ps:0": "all, lo included", "worker:0": "all, lo included"}
            late.stdin.write("go\n")
            late.stdin.flush()

            def moved():
                view._watch_new_tasks()
                return view.table()["nics"]["ps:0"] == "lan0"

            wait_until(moved, 10, 0.05, lambda: f"the view to show ps:0's node's NIC: {dict(view.table()['nics'])}")
            assert dict(view.table()["nics"]) == {"ps:0": "lan0", "worker:0": "all, lo included"}
            assert view._samplers["ps:0"].netns_pid == late.pid
        finally:
            view.stop(final=False)
            for p in (late, here):
                p.kill()
                p.wait()
