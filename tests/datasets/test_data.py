"""Datasets: verification, fetching (also concurrent and offline), parsing, subsets, tf.data."""

import gzip
import hashlib
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from labkit.datasets import loaders as data
from labkit.datasets.loaders import DataError

SHARED_MNIST = Path(__file__).resolve().parents[3] / "shared" / "data" / "mnist"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    """A local mirror holding the four verified MNIST files (wherever the loader finds them)."""
    src = data.locate("mnist")
    root = tmp_path_factory.mktemp("mirror")
    (root / "mnist").mkdir()
    for name in data.MNIST_FILES:
        shutil.copyfile(src / name, root / "mnist" / name)
    return root


def corrupt_copy(mirror: Path, tmp_path: Path, name: str, mutate) -> Path:
    bad = tmp_path / "badmirror"
    shutil.copytree(mirror, bad)
    path = bad / "mnist" / name
    path.write_bytes(mutate(path.read_bytes()))
    return bad


def test_fetch_from_local_mirror_verifies(mirror, tmp_path):
    dest = data.fetch("mnist", dest=tmp_path / "d", mirror=str(mirror))
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == sorted(data.MNIST_FILES)
    assert not list(dest.glob("*.part"))


def test_checksum_mismatch_names_file_hashes_and_fix(mirror, tmp_path):
    name = "t10k-labels-idx1-ubyte.gz"
    bad = corrupt_copy(mirror, tmp_path, name, lambda b: b[:100] + bytes([b[100] ^ 0xFF]) + b[101:])
    with pytest.raises(DataError) as err:
        data.fetch("mnist", dest=tmp_path / "d", mirror=str(bad), retries=1)
    msg = str(err.value)
    assert name in msg and "LABKIT_DATA_MIRROR" in msg
    assert not (tmp_path / "d" / name).exists(), "a file that failed verification must never be renamed into place"


def test_corrupt_file_in_place_is_reported_not_replaced(mirror, tmp_path):
    dest = data.fetch("mnist", dest=tmp_path / "d", mirror=str(mirror))
    target = dest / "t10k-labels-idx1-ubyte.gz"
    target.write_bytes(target.read_bytes()[:-50])  # truncated
    actual = hashlib.sha256(target.read_bytes()).hexdigest()
    with pytest.raises(DataError) as err:
        data.fetch("mnist", dest=dest, mirror=str(mirror))
    msg = str(err.value)
    assert str(target) in msg and data.spec("mnist").file(target.name).sha256 in msg and actual in msg
    assert "--force" in msg
    data.fetch("mnist", dest=dest, mirror=str(mirror), force=True)
    data.check_file(target, data.spec("mnist").file(target.name))


def test_cli_fetch_with_corrupt_file_exits_nonzero(mirror, tmp_path):
    dest = data.fetch("mnist", dest=tmp_path / "d", mirror=str(mirror))
    (dest / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8bnot really gzip")
    proc = subprocess.run(
        [sys.executable, "-m", "labkit", "data", "fetch", "--dest", str(dest), "--mirror", str(mirror)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "train-labels-idx1-ubyte.gz" in proc.stderr and "expected sha256" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_truncated_gzip_in_mirror_is_rejected(mirror, tmp_path):
    bad = corrupt_copy(mirror, tmp_path, "train-labels-idx1-ubyte.gz", lambda b: b[: len(b) // 2])
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.gz"):
        data.fetch("mnist", dest=tmp_path / "d", mirror=str(bad), retries=1)


def test_recompressed_copy_is_accepted_by_content(mirror, tmp_path):
    """Debian's dataset packages recompress the .gz files; the content hash still matches."""
    src = tmp_path / "recompressed"
    (src / "mnist").mkdir(parents=True)
    for name in data.MNIST_FILES:
        raw = gzip.decompress((mirror / "mnist" / name).read_bytes())
        (src / "mnist" / name).write_bytes(gzip.compress(raw, compresslevel=1, mtime=0))
    dest = data.fetch("mnist", dest=tmp_path / "d", mirror=str(src))
    assert len(data.read_idx(dest / "t10k-labels-idx1-ubyte.gz")) == 10_000


def test_offline_error_says_what_to_do(tmp_path):
    with pytest.raises(DataError) as err:
        data.fetch("mnist", dest=tmp_path / "d", mirror="http://127.0.0.1:9/", retries=1, timeout=2)
    msg = str(err.value)
    assert "train-images-idx3-ubyte.gz" in msg and "LABKIT_DATA_MIRROR" in msg and "make data" in msg


def _fetch_in_child(args):
    dest, mirror = args
    return str(data.fetch("mnist", dest=dest, mirror=mirror))


def test_concurrent_fetch_by_four_processes(mirror, tmp_path):
    """Report 002's workers hit AlreadyExistsError downloading at once; here all four succeed."""
    dest = tmp_path / "shared-dest"
    with ProcessPoolExecutor(4) as pool:
        results = list(pool.map(_fetch_in_child, [(str(dest), str(mirror))] * 4))
    assert results == [str(dest)] * 4
    for name in data.MNIST_FILES:
        data.check_file(dest / name, data.spec("mnist").file(name))
    assert not list(dest.glob(".*.part"))


def test_explicit_dir_without_files_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"LABKIT_DATA.*lacks"):
        data.locate("mnist")


def test_explicit_dir_is_used_first(mirror, monkeypatch):
    monkeypatch.setenv("LABKIT_DATA", str(mirror))
    assert data.locate("mnist") == mirror / "mnist"


def test_unknown_dataset():
    with pytest.raises(DataError, match="known: mnist"):
        data.locate("cifar")


def test_load_mnist_full_shapes_and_ranges():
    d = data.load_mnist()
    assert d.x_train.shape == (60_000, 28, 28) and d.x_test.shape == (10_000, 28, 28)
    assert d.x_train.dtype == np.float32 and 0.0 <= d.x_train.min() and d.x_train.max() <= 1.0
    assert np.bincount(d.y_test).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert abs(d.x_train.mean() - 0.1307) < 1e-3


def test_stratified_limit_keeps_class_shares_and_is_seeded():
    d = data.load_mnist(limit=1000, test_limit=200, seed=3)
    assert len(d.x_train) == 1000 and len(d.y_test) == 200
    counts = np.bincount(d.y_train, minlength=10)
    assert counts.min() >= 85 and counts.max() <= 115  # every class near its share of 1000
    again = data.load_mnist(limit=1000, test_limit=200, seed=3)
    np.testing.assert_array_equal(d.x_train, again.x_train)
    first = data.load_mnist(limit=50, stratified=False)
    np.testing.assert_array_equal(first.y_train, data.load_mnist().y_train[:50])


def test_bad_idx_file_is_a_clear_error(tmp_path):
    path = tmp_path / "x-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + b"\x01\x02"))
    with pytest.raises(DataError, match="promises"):
        data.read_idx(path)


@pytest.mark.tensorflow
def test_make_dataset_shards_disjointly_and_rejects_bad_batch():
    x = np.arange(20, dtype=np.float32)
    y = np.arange(20)
    seen = []
    for i in range(2):
        ds = data.make_dataset(x, y, batch_size=4, seed=1, num_shards=2, shard_index=i)
        seen.append(sorted(int(v) for _, yb in ds for v in yb.numpy()))
    assert seen[0] == list(range(0, 20, 2)) and seen[1] == list(range(1, 20, 2))
    a = [yb.numpy().tolist() for _, yb in data.make_dataset(x, y, 5, seed=7)]
    b = [yb.numpy().tolist() for _, yb in data.make_dataset(x, y, 5, seed=7)]
    assert a == b
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            data.make_dataset(x, y, batch_size=bad)


@pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").exists(), reason="Debian's dataset-fashion-mnist is not installed"
)
def test_fashion_mnist_from_debian_package(monkeypatch):
    monkeypatch.delenv("LABKIT_DATA", raising=False)
    d = data.load_mnist("fashion-mnist", limit=100, test_limit=100)
    assert d.x_train.shape == (100, 28, 28) and d.name == "fashion-mnist"
