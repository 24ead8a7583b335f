"""The kit's sweeping idiom (``labkit.core.sweep``: a resource goes only when its maker has ended)
and its one reading of where this process's cgroups are (``labkit.core.cgroups``), on the
mountinfo and /proc/self/cgroup of a v1 host, a v2 host and a hybrid one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.core import cgroups, sweep


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _folder_sweeper(root: Path, prefix: str = "made-") -> sweep.Sweeper:
    return sweep.Sweeper(
        "test-folders",
        lambda: sorted(root.glob(prefix + "*")),
        lambda f: sweep.maker_gone(f.name, prefix),
        Path.rmdir,
    )


def test_a_resource_whose_maker_lives_stays_and_one_whose_maker_ended_goes(tmp_path):
    live = tmp_path / f"made-{os.getpid()}-a"
    dead = tmp_path / f"made-{_dead_pid()}-b"
    unnamed = tmp_path / "made-nopid"
    for d in (live, dead, unnamed):
        d.mkdir()
    s = _folder_sweeper(tmp_path)
    assert s.stale() == [dead]
    assert s.sweep() == [dead]
    assert live.exists() and unnamed.exists() and not dead.exists()
    assert s.sweep() == []  # nothing left to sweep


def test_a_stale_resource_that_cannot_be_removed_yet_stays_for_a_later_sweep(tmp_path):
    busy = tmp_path / f"made-{_dead_pid()}-busy"
    busy.mkdir()
    (busy / "still-written").write_text("x")  # rmdir refuses: not empty
    s = _folder_sweeper(tmp_path)
    assert s.stale() == [busy] and s.sweep() == [] and busy.exists()
    (busy / "still-written").unlink()
    assert s.sweep() == [busy] and not busy.exists()


def test_the_maker_is_read_from_the_name():
    assert sweep.maker("labkit-123-probe-9", "labkit-") == 123
    assert sweep.maker("labkit-x-1", "labkit-") is None and sweep.maker("other-12-a", "labkit-") is None
    assert not sweep.maker_gone(f"labkit-{os.getpid()}-a", "labkit-")
    assert sweep.maker_gone(f"labkit-{_dead_pid()}-a", "labkit-")
    assert sweep.maker_gone("labkit-nopid", "labkit-", unnamed=True)
    assert not sweep.maker_gone("labkit-nopid", "labkit-")


def test_every_registered_sweeper_is_named_and_found_by_name():
    from labkit.core import scratch
    from labkit.grading.run import disks, limits
    from labkit.infra import cpuquota, netem

    scratch.remove_orphans("labkit-test-sweep-")
    for owner in (limits.STALE, cpuquota.STALE, netem.STALE_LINKS, disks.STALE):
        assert sweep.SWEEPERS[owner.name] is owner
    assert "scratch-folders:labkit-test-sweep-" in sweep.SWEEPERS
    with pytest.raises(KeyError, match="grading-cgroups"):
        sweep.SWEEPERS["no-such-sweeper"]


def test_a_cgroup_sweeper_removes_a_dead_makers_group_with_its_children(tmp_path):
    dead = tmp_path / f"{cgroups.PREFIX}{_dead_pid()}-abc"
    (dead / "node0").mkdir(parents=True)
    alive = tmp_path / f"{cgroups.PREFIX}{os.getpid()}-abc"
    (alive / "node0").mkdir(parents=True)
    unnamed = tmp_path / f"{cgroups.PREFIX}old"
    unnamed.mkdir()
    assert cgroups.sweeper("t", lambda: [tmp_path]).sweep() == [dead]
    assert not dead.exists() and (alive / "node0").exists() and unnamed.exists()
    assert cgroups.sweeper("t", lambda: [tmp_path], unnamed=True).sweep() == [unnamed]


# ------------------------------------------------------------------------------ where the cgroups are

V1_MOUNTINFO = """\
22 27 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 22 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:29 / /sys/fs/cgroup/systemd rw,nosuid shared:10 - cgroup cgroup rw,xattr,name=systemd
35 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:14 - cgroup cgroup rw,cpu,cpuacct
36 31 0:33 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/pids rw,nosuid shared:16 - cgroup cgroup rw,pids
38 31 0:35 / /sys/fs/cgroup/cpuset rw,nosuid shared:17 - cgroup cgroup rw,cpuset
"""
V1_CGROUP = """\
12:pids:/user.slice/user-1000.slice/session-3.scope
6:memory:/user.slice/user-1000.slice/session-3.scope
4:cpu,cpuacct:/user.slice
3:cpuset:/
1:name=systemd:/user.slice/user-1000.slice/session-3.scope
"""

V2_MOUNTINFO = """\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""
V2_CGROUP = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope\n"

# systemd's hybrid layout: v1 controllers, and the unified tree mounted beside them
HYBRID_MOUNTINFO = V1_MOUNTINFO + (
    "33 31 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:11 - cgroup2 cgroup2 rw,nsdelegate\n"
)
HYBRID_CGROUP = V1_CGROUP + "0::/user.slice/user-1000.slice/session-3.scope\n"

# a container: its cgroup namespace shows the hierarchy from the mounted root down
CONTAINER_MOUNTINFO = (
    "700 650 0:30 /docker/ab12 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup\\040v2 rw\n"
    "701 650 0:31 /docker/ab12 /mnt/with\\040space rw - cgroup2 cgroup2 rw\n"
)
CONTAINER_CGROUP = "0::/docker/ab12/grader\n"


def _dirs(mountinfo: str, cgroup: str, controller: str) -> list[Path]:
    return cgroups.own_dirs(controller, cgroups.parse_mounts(mountinfo), cgroups.parse_paths(cgroup))


def test_a_v1_host_has_a_hierarchy_per_controller_and_no_unified_tree():
    mounts = cgroups.parse_mounts(V1_MOUNTINFO)
    assert [m.fstype for m in mounts] == ["cgroup"] * 5  # not the tmpfs under them, not sysfs
    assert {"cpu", "cpuacct"} <= mounts[1].options and mounts[1].point == Path("/sys/fs/cgroup/cpu,cpuacct")
    paths = cgroups.parse_paths(V1_CGROUP)
    assert paths["memory"] == "/user.slice/user-1000.slice/session-3.scope" and paths["cpuacct"] == "/user.slice"
    assert "" not in paths
    assert _dirs(V1_MOUNTINFO, V1_CGROUP, "memory") == [
        Path("/sys/fs/cgroup/memory/user.slice/user-1000.slice/session-3.scope")
    ]
    assert _dirs(V1_MOUNTINFO, V1_CGROUP, "cpu") == [Path("/sys/fs/cgroup/cpu,cpuacct/user.slice")]
    assert _dirs(V1_MOUNTINFO, V1_CGROUP, "cpuset") == [Path("/sys/fs/cgroup/cpuset")]
    assert _dirs(V1_MOUNTINFO, V1_CGROUP, "") == []
    assert _dirs(V1_MOUNTINFO, V1_CGROUP, "blkio") == []  # neither mounted nor listed


def test_a_v2_host_has_only_the_unified_tree():
    (mount,) = cgroups.parse_mounts(V2_MOUNTINFO)
    assert mount.fstype == "cgroup2" and mount.root == "/" and mount.point == Path("/sys/fs/cgroup")
    assert cgroups.parse_paths(V2_CGROUP) == {"": "/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope"}
    assert _dirs(V2_MOUNTINFO, V2_CGROUP, "") == [
        Path("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope")
    ]
    assert _dirs(V2_MOUNTINFO, V2_CGROUP, "memory") == []  # a v2 controller has no hierarchy of its own
    assert _dirs(V2_MOUNTINFO, "0::/\n", "") == [Path("/sys/fs/cgroup")]  # root's own group is the root


def test_a_hybrid_host_has_both_and_the_unified_tree_where_it_is_mounted():
    assert _dirs(HYBRID_MOUNTINFO, HYBRID_CGROUP, "") == [
        Path("/sys/fs/cgroup/unified/user.slice/user-1000.slice/session-3.scope")
    ]
    assert _dirs(HYBRID_MOUNTINFO, HYBRID_CGROUP, "pids") == [
        Path("/sys/fs/cgroup/pids/user.slice/user-1000.slice/session-3.scope")
    ]


def test_a_mount_of_part_of_the_tree_shows_only_the_groups_below_its_root():
    assert _dirs(CONTAINER_MOUNTINFO, CONTAINER_CGROUP, "") == [
        Path("/sys/fs/cgroup/grader"),
        Path("/mnt/with space/grader"),  # the kernel writes a space in a path as \040
    ]
    assert _dirs(CONTAINER_MOUNTINFO, "0::/docker/other\n", "") == []  # outside the mounted part
    assert _dirs(CONTAINER_MOUNTINFO, "0::/docker/ab123\n", "") == []  # a sibling sharing its prefix


def test_unreadable_or_malformed_text_finds_no_cgroup(tmp_path, monkeypatch):
    assert cgroups.parse_mounts("garbage\n\n12 1 0:1 / /x rw - cgroup2\n") == []  # too few fields
    assert cgroups.parse_paths("no colons here\n4:memory\n") == {}
    monkeypatch.setattr(cgroups, "PROC", tmp_path)  # neither file exists
    assert cgroups.mounts() == [] and cgroups.own_paths() == {}
    assert cgroups.v2_dir() is None and cgroups.v1_dir("memory") is None


def test_enable_names_the_controllers_not_delegated(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    with pytest.raises(OSError, match=f"the memory and pids controllers are not delegated to {tmp_path}"):
        cgroups.enable(tmp_path, {"memory", "pids"})
    cgroups.enable(tmp_path, {"cpu", "memory"})
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"  # only what was missing
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    cgroups.enable(tmp_path, {"memory"})  # already enabled: nothing written
    assert (tmp_path / "cgroup.subtree_control").read_text() == "cpu memory\n"


def test_a_group_whose_setting_fails_is_not_left_behind(tmp_path):
    d = cgroups.make(tmp_path, "ok", {"a": "1", "maybe": "2"}, optional=("maybe",))
    assert (d / "a").read_text() == "1" and not (d / "maybe").exists()
    with pytest.raises(OSError):
        cgroups.make(tmp_path, "bad", {"missing/file": "1"})
    assert not (tmp_path / "bad").exists()


def test_the_enter_command_joins_every_group_then_becomes_the_command(tmp_path):
    groups = [tmp_path / "one", tmp_path / "two words"]
    for g in groups:
        g.mkdir()
    out = subprocess.run(cgroups.enter_command(groups, ["sh", "-c", "echo $$"]), capture_output=True, text=True)
    pid = out.stdout.strip()
    assert out.returncode == 0 and all((g / "cgroup.procs").read_text().strip() == pid for g in groups)
    assert cgroups.enter_command([], ["true"]) == ["true"]


def test_netems_driver_links_of_a_dead_owner_go_and_a_live_owners_stay():
    """In a network namespace of its own (with its own /sys), so no link of this machine is touched."""
    dead, live = f"lk{_dead_pid()}x0ab", f"lk{os.getpid()}x0cd"
    script = (
        f"mount -t sysfs none /sys && ip link add {dead} type veth peer name peer0 && "
        f"ip link add {live} type veth peer name peer1 && "
        f'"$0" -c "from labkit.infra import netem; print(netem.sweep_stale_links())" && ls /sys/class/net'
    )
    out = subprocess.run(
        ["unshare", "--net", "--mount", "sh", "-c", script, sys.executable], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip(f"no network namespace may be made here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    swept, *links = out.stdout.split()
    assert swept == repr([dead]) and live in links and dead not in links
