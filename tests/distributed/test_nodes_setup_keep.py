"""``nodes setup --keep notebooks`` (what ``make cloudlab-update`` runs for the other nodes): the
kit is copied over a node's, but in the kept folder only the files the node lacks; a node whose
directory is this kit's own (a shared home) gets nothing copied over it. Over a stand-in ssh that
runs the command in the node's home here, without TensorFlow."""

import stat
import sys
from pathlib import Path

from labkit.distributed import nodes

# A stand-in for ssh: HOST's home is the folder named in homes.txt; the command runs there.
FAKE_SSH = """#!/bin/bash
while [ $# -gt 0 ]; do case "$1" in -o) shift 2 ;; --) shift; break ;; -*) shift ;; *) break ;; esac; done
home=$(awk -v h="$1" '$1 == h {print $2}' "$(dirname "$0")/homes.txt"); shift
cd "$home" && exec bash -c "$1"
"""


def _ssh(tmp_path: Path, homes: dict[str, Path]) -> str:
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "homes.txt").write_text("".join(f"{h} {home}\n" for h, home in homes.items()))
    return str(ssh)


def test_the_kept_folder_keeps_a_nodes_files_and_this_kits_directory_is_left_alone(tmp_path):
    name = nodes.REPO.name  # the kit's directory on every node, relative to its home
    notebook = sorted(p.name for p in (nodes.REPO / "labkit" / "labs").glob("*/*.ipynb"))[0]
    kit = tmp_path / "node1" / name
    (kit / "notebooks").mkdir(parents=True)
    (kit / "notebooks" / notebook).write_text("the student's edit")
    (kit / "README.md").write_text("last week's")
    homes = {"10.10.1.2": kit.parent, "10.10.1.3": nodes.REPO.parent}  # node2's kit: this one itself
    said = []
    found = nodes.setup(
        ["10.10.1.2", "10.10.1.3"],
        ssh=_ssh(tmp_path, homes),
        remote_dir=name,
        remote_python=sys.executable,
        install="",
        datasets=(),
        keep=("notebooks",),
        log=said.append,
    )
    assert (kit / "notebooks" / notebook).read_text() == "the student's edit"
    assert {p.name for p in (kit / "labkit" / "labs").glob("*/*.ipynb")} == {
        p.name for p in (nodes.REPO / "labkit" / "labs").glob("*/*.ipynb")
    }
    assert (kit / "README.md").read_text() == (nodes.REPO / "README.md").read_text()
    assert found[0].steps == ["copy"] and found[1].shares_with == "this machine", said
    assert f"[10.10.1.3] {name} is the same directory as on this machine: set up once" in said, said
    assert not (nodes.REPO / nodes.TOKEN).exists()
