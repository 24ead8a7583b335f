"""What an emulated node must bind back for its account to see the kit wherever the clone is
(``labkit.infra.cloudlab_local.exposure``): the paths under a folder others may not enter, each once,
and the folders to cover, each once. No node starts here; tests/infra/test_cloudlab_path.py and
tests/infra/test_slurm_nodes.py run the kit on nodes from this very checkout, wherever it is."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from labkit.infra.cloudlab_local import closed_folder, exposure, kit_paths


@pytest.fixture
def top():
    """A folder as ``mktemp -d`` gives (mode 0700) in /tmp, which everyone may enter (pytest's own
    tmp_path is under a 0700 folder of its own)."""
    if closed_folder("/tmp/x"):
        pytest.skip("/tmp is closed to others here")
    top = Path(tempfile.mkdtemp(dir="/tmp"))
    yield top
    shutil.rmtree(top)


def test_a_clone_under_a_0700_folder_is_bound_back_and_the_folder_covered(top):
    clone, mirror = top / "my labkit", top / "shared" / "data"
    (clone / ".venv").mkdir(parents=True)
    mirror.mkdir(parents=True)
    assert top.stat().st_mode & 0o777 == 0o700
    assert closed_folder(str(clone / ".venv")) == str(top)
    binds, folders = exposure([clone, clone / ".venv", mirror, top / "gone"])
    assert binds == [str(clone), str(mirror)]  # the venv inside the checkout comes with it; no missing path
    assert folders == [str(top)]
    top.chmod(0o711)  # others may pass: nothing to do
    assert exposure([clone, mirror]) == ([], [])


def test_a_node_covers_its_own_root_and_home_itself():
    binds, folders = exposure(["/root/.pyenv", "/root/labkit", "/usr"])
    assert binds == [p for p in ("/root/.pyenv", "/root/labkit") if os.path.exists(p)] and folders == []
    assert closed_folder("/home/alice/labkit") == "/home" and closed_folder("/usr/lib") == ""


def test_the_kit_paths_are_this_checkout_its_venv_and_its_python():
    checkout, venv, python = kit_paths()
    assert os.path.isfile(os.path.join(checkout, "labkit", "infra", "cloudlab_local.py"))
    assert os.path.samefile(venv, os.sys.prefix) and os.path.exists(python)
