"""Datasets: locate, fetch, verify and parse MNIST, Fashion-MNIST and a9a.

Every file is checked against a pinned sha256 before it is parsed, so a truncated download or a
corrupt copy fails with a message that names the file and the fix, never with a numpy
traceback halfway through a lab. A dataset is looked for in ``data_dir`` or ``$LABKIT_DATA``,
then ``data/<dataset>/``, then a system directory, and else fetched from ``$LABKIT_DATA_MIRROR``
or the public mirrors; several processes may fetch at once (a file lock, then an atomic rename).

TensorFlow is imported lazily, only by ``make_dataset``, so that the launcher and the CLI stay
quick to start. More in docs/internals.md, section labkit.datasets.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]


class DataError(RuntimeError):
    """A dataset is missing, corrupt or unparseable; the message says how to fix it."""


@dataclass(frozen=True)
class FileSpec:
    name: str
    sha256: str | None  # of the file as distributed (the .gz for IDX files)
    content_sha256: str | None = None  # of the decompressed bytes: accepts recompressed copies


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: tuple[FileSpec, ...]
    mirrors: tuple[str, ...]
    system_dirs: tuple[str, ...] = field(default=())
    help: str = ""

    def file(self, name: str) -> FileSpec:
        return next(f for f in self.files if f.name == name)


MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

DATASETS: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec(
        "mnist",
        (
            FileSpec(
                MNIST_FILES[0],
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            ),
            FileSpec(
                MNIST_FILES[1],
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            ),
            FileSpec(
                MNIST_FILES[2],
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            ),
            FileSpec(
                MNIST_FILES[3],
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
            ),
        ),
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        help="the four original MNIST IDX .gz files",
    ),
    # Debian's package recompresses the .gz files, so they are pinned by the sha256
    # of their decompressed content, which every faithful copy shares.
    "fashion-mnist": DatasetSpec(
        "fashion-mnist",
        (
            FileSpec(MNIST_FILES[0], None, "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
            FileSpec(MNIST_FILES[1], None, "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
            FileSpec(MNIST_FILES[2], None, "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
            FileSpec(MNIST_FILES[3], None, "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
        ),
        mirrors=(
            "https://storage.googleapis.com/tensorflow/tf-keras-datasets/",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        ),
        system_dirs=("/usr/share/datasets/fashion-mnist",),
        help="Fashion-MNIST (also: apt install dataset-fashion-mnist)",
    ),
    "a9a": DatasetSpec(
        "a9a",
        (
            FileSpec("a9a", "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"),
            FileSpec("a9a.t", "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"),
        ),
        mirrors=("https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/",),
        help="LIBSVM a9a (UCI Adult, 123 binary features)",
    ),
}


def spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


# ----------------------------------------------------------------------------- verify


def _sha256(data_or_path) -> str:
    h = hashlib.sha256()
    if isinstance(data_or_path, (bytes, bytearray)):
        h.update(data_or_path)
        return h.hexdigest()
    with open(data_or_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _content_sha256(path: Path) -> str | None:
    """sha256 of a gzip file's decompressed bytes, or None when it does not decompress."""
    h = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (OSError, EOFError, zlib.error):  # BadGzipFile is an OSError
        return None
    return h.hexdigest()


def check_file(path: Path, fs: FileSpec, shown: str | None = None) -> None:
    """Raise DataError unless ``path`` holds the pinned bytes of ``fs`` (``shown`` names it in errors)."""
    actual = _sha256(path)
    if fs.sha256 is not None and actual == fs.sha256:
        return
    if fs.content_sha256 is not None and fs.name.endswith(".gz"):
        content = _content_sha256(path)
        if content == fs.content_sha256:
            return  # a faithful copy, recompressed
        if fs.sha256 is None:
            expected, actual = (
                f"{fs.content_sha256} (of the decompressed content)",
                (f"{content} (decompressed)" if content else f"{actual} (not a complete gzip file)"),
            )
        else:
            expected = fs.sha256
    else:
        expected = fs.sha256
    raise DataError(
        f"{shown or path} is corrupt or truncated: expected sha256 {expected}, got {actual} "
        f"({path.stat().st_size:,} bytes).\n"
        f"Fix: delete it and fetch again with `python -m labkit data fetch --force`, "
        f"or `make data`."
    )


# ----------------------------------------------------------------------------- locate / fetch


def default_root() -> Path:
    """``data/`` in the repository checkout, else a per-user cache."""
    if (REPO_ROOT / "pyproject.toml").exists():
        return REPO_ROOT / "data"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "labkit"


def _complete_dir(ds: DatasetSpec, directory: Path) -> Path | None:
    for d in (directory / ds.name, directory):
        if all((d / f.name).exists() for f in ds.files):
            return d
    return None


def locate(
    name: str = "mnist", data_dir: str | os.PathLike | None = None, fetch_missing: bool = True, verify: bool = True
) -> Path:
    """The directory that holds a verified copy of dataset ``name`` (see the module docstring)."""
    ds = spec(name)
    explicit = data_dir if data_dir is not None else os.environ.get("LABKIT_DATA") or None
    if explicit is not None:
        found = _complete_dir(ds, Path(explicit).expanduser())
        if found is None:
            missing = [
                f.name
                for f in ds.files
                if not (Path(explicit) / f.name).exists() and not (Path(explicit) / ds.name / f.name).exists()
            ]
            raise DataError(
                f"{ds.name}: {explicit} (from {'data_dir' if data_dir is not None else '$LABKIT_DATA'}) "
                f"lacks {', '.join(missing)}.\nFix: point it at a directory holding {ds.help}, "
                f"or unset it to use data/{ds.name}/ and fetch there."
            )
        candidates = [found]
    else:
        candidates = [
            d for d in (_complete_dir(ds, default_root()), *(_complete_dir(ds, Path(s)) for s in ds.system_dirs)) if d
        ]
    if candidates:
        if verify:
            for f in ds.files:
                check_file(candidates[0] / f.name, f)
        return candidates[0]
    if not fetch_missing:
        raise DataError(
            f"{ds.name} is not in {default_root() / ds.name}.\nFix: run `make data` "
            f"or `python -m labkit data fetch --dataset {ds.name}`."
        )
    return fetch(name)


def _mirror_candidates(ds: DatasetSpec, mirror: str | None) -> list[str]:
    mirror = mirror if mirror is not None else os.environ.get("LABKIT_DATA_MIRROR") or None
    if mirror is None:
        return list(ds.mirrors)
    if "://" in mirror:
        base = mirror.rstrip("/") + "/"
        return [base + ds.name + "/", base]
    # A local directory, either the dataset's own or a root of per-dataset folders.
    root = Path(mirror).expanduser()
    return [str(d) for d in (root / ds.name, root)]


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _transient(err: BaseException) -> bool:
    if isinstance(err, urllib.error.HTTPError):
        return err.code >= 500 or err.code == 429
    return isinstance(err, (urllib.error.URLError, TimeoutError, ConnectionError, DataError))


def _copy_from(source: str, fs: FileSpec, tmp: Path, timeout: float) -> None:
    if "://" in source:
        with urllib.request.urlopen(source + fs.name, timeout=timeout) as resp, open(tmp, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    else:
        src = Path(source) / fs.name
        if not src.exists():
            raise FileNotFoundError(src)
        shutil.copyfile(src, tmp)


def _fetch_one(fs: FileSpec, sources: list[str], dest: Path, retries: int, timeout: float) -> str:
    """Copy one file from the first source that yields verified bytes; return that source."""
    errors: list[str] = []
    for attempt in range(retries):
        retry = False
        for source in sources:
            fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=f".{fs.name}.", suffix=".part")
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                _copy_from(source, fs, tmp, timeout)
                check_file(tmp, fs, shown=f"{source.rstrip('/')}/{fs.name}")
                os.chmod(tmp, 0o644)  # mkstemp makes files private; data is for everyone
                os.replace(tmp, dest / fs.name)  # atomic: readers see nothing or the verified file
                return source
            except FileNotFoundError:
                errors.append(f"{source}: no {fs.name} there")
            except (OSError, DataError) as e:
                reason = f"HTTP {e.code}" if isinstance(e, urllib.error.HTTPError) else str(e).splitlines()[0]
                errors.append(reason if isinstance(e, DataError) else f"{source}: {reason}")
                retry |= _transient(e)
            finally:
                tmp.unlink(missing_ok=True)
        if not retry:
            break
        if attempt + 1 < retries:
            time.sleep(min(2**attempt, 8))
    tried = "\n  ".join(dict.fromkeys(errors))
    raise DataError(
        f"could not fetch {fs.name} into {dest}:\n  {tried}\n"
        f"Fix: with no internet, set LABKIT_DATA_MIRROR to a directory or URL that holds the file "
        f"(for example `make data DATA_MIRROR=/path/to/shared/data`), or copy it into {dest}/ yourself."
    )


def fetch(
    name: str = "mnist",
    dest: str | os.PathLike | None = None,
    mirror: str | None = None,
    force: bool = False,
    retries: int = 3,
    timeout: float = 60.0,
    log=None,
) -> Path:
    """Fetch dataset ``name`` into ``dest`` (default ``data/<name>/``), verify it and return ``dest``.

    A file already in place is verified, not replaced; a corrupt one raises DataError
    unless ``force=True``. Safe to call from many processes at once.
    """
    ds = spec(name)
    dest = Path(dest) if dest is not None else default_root() / ds.name
    sources = _mirror_candidates(ds, mirror)
    with _lock(dest / ".fetch.lock"):
        for fs in ds.files:
            if (dest / fs.name).exists() and not force:
                check_file(dest / fs.name, fs)
                continue
            source = _fetch_one(fs, sources, dest, retries, timeout)
            if log:
                log(f"{ds.name}: {fs.name} verified, from {source}")
    return dest


# ----------------------------------------------------------------------------- parse


def read_idx(path: Path) -> np.ndarray:
    """Parse one gzipped IDX file (images: magic 2051, labels: magic 2049)."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path} is not a readable gzip file ({e}). Fix: delete it and run `make data`.") from e
    magic = int.from_bytes(raw[:4], "big")
    ndim = {2049: 1, 2051: 3}.get(magic)
    if ndim is None:
        raise DataError(f"{path}: bad IDX magic number {magic}; expected 2049 (labels) or 2051 (images).")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    if len(raw) != offset + int(np.prod(dims)):
        raise DataError(f"{path}: IDX header promises {dims} but holds {len(raw) - offset} bytes of data.")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


@dataclass
class ImageData:
    """Images as float32 in [0, 1], shape (n, 28, 28) for MNIST; labels as int64 class ids."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str = "mnist"

    @property
    def num_classes(self) -> int:
        return 10

    def __repr__(self) -> str:
        return f"ImageData({self.name}: train {self.x_train.shape}, test {self.x_test.shape}, {self.x_train.dtype})"


def subset_indices(labels: np.ndarray, limit: int | None, stratified: bool = True, seed: int = 0) -> np.ndarray:
    """Indices of a ``limit``-sized subset.

    Stratified (default): every class keeps its share of ``limit`` (largest remainders),
    chosen at random with ``seed`` and returned in the original order. Otherwise the
    first ``limit`` rows.
    """
    n = len(labels)
    if limit is None or limit >= n:
        return np.arange(n)
    if limit <= 0:
        raise ValueError(f"limit must be a positive number of samples, got {limit}")
    if not stratified:
        return np.arange(limit)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * limit / n
    take = np.floor(quota).astype(int)
    for i in np.argsort(-(quota - take))[: limit - take.sum()]:
        take[i] += 1
    chosen = [rng.choice(np.flatnonzero(labels == c), k, replace=False) for c, k in zip(classes, take)]
    return np.sort(np.concatenate(chosen))


def load_mnist(
    name: str = "mnist",
    data_dir=None,
    limit: int | None = None,
    test_limit: int | None = None,
    stratified: bool = True,
    seed: int = 0,
) -> ImageData:
    """Load MNIST (or ``name="fashion-mnist"``) as float32 images in [0, 1] and int labels.

    ``limit`` / ``test_limit`` take a subset for fast runs (see ``subset_indices``).
    """
    if name not in ("mnist", "fashion-mnist"):
        raise DataError(f"load_mnist reads IDX image sets (mnist, fashion-mnist), not {name!r}")
    d = locate(name, data_dir)
    arrays = [read_idx(d / f) for f in MNIST_FILES]
    xtr, ytr, xte, yte = arrays
    if len(xtr) != len(ytr) or len(xte) != len(yte):
        raise DataError(f"{d}: image and label counts differ ({len(xtr)}/{len(ytr)}, {len(xte)}/{len(yte)})")
    tr = subset_indices(ytr, limit, stratified, seed)
    te = subset_indices(yte, test_limit, stratified, seed)
    scale = np.float32(1 / 255)
    return ImageData(
        xtr[tr].astype(np.float32) * scale,
        ytr[tr].astype(np.int64),
        xte[te].astype(np.float32) * scale,
        yte[te].astype(np.int64),
        name,
    )


def synthetic_images(shape, train: int, test: int, seed: int = 0, name: str | None = None) -> ImageData:
    """Random float32 images of ``shape`` in [0, 1] with random labels 0-9: for measuring
    throughput and bytes on the wire, which do not depend on the pixels (nothing learns here:
    the labels are noise). The same arrays for the same arguments, in every process."""
    for what, n in (("train", train), ("test", test)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{what} must be a positive number of images, got {n!r}")
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in shape)
    x = rng.random((train + test, *shape), dtype=np.float32)
    y = rng.integers(0, 10, train + test).astype(np.int64)
    return ImageData(x[:train], y[:train], x[train:], y[train:], name or f"synthetic {'x'.join(map(str, shape))}")


# ----------------------------------------------------------------------------- LIBSVM


@dataclass
class SparseData:
    """A LIBSVM data set in CSR form. Labels are in {0, 1}; feature ids are 0-based."""

    indptr: np.ndarray  # int64, (n_rows + 1,)
    indices: np.ndarray  # int64, (nnz,)
    values: np.ndarray  # float32, (nnz,)
    labels: np.ndarray  # float32, (n_rows,)
    n_features: int

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def rows(self, idx) -> "SparseData":
        """The rows ``idx`` (any integer index array), as a new SparseData."""
        idx = np.asarray(idx)
        starts, ends = self.indptr[idx], self.indptr[idx + 1]
        lengths = ends - starts
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if len(idx) else np.array([], int)
        return SparseData(
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            self.indices[take],
            self.values[take],
            self.labels[idx],
            self.n_features,
        )

    def to_dense(self) -> np.ndarray:
        out = np.zeros((len(self), self.n_features), np.float32)
        rows = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out


def read_libsvm(path, n_features: int) -> SparseData:
    """Parse a LIBSVM/svmlight file: ``<label> <index>:<value> ...`` with 1-based indices.

    ``n_features`` is required: a9a's test file never uses feature 123, so a width
    inferred from the file would disagree with the training set. Labels +1/1 map to 1,
    -1/0 map to 0. Blank lines, out-of-range indices and non-numeric values raise
    DataError with the line number.
    """
    indptr, indices, values, labels = [0], [], [], []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split("#", 1)[0].split()
            if not parts:
                raise DataError(f"{path}:{lineno}: blank line; every line needs '<label> <index>:<value> ...'")
            try:
                label = float(parts[0])
            except ValueError:
                raise DataError(f"{path}:{lineno}: label {parts[0]!r} is not a number") from None
            if label not in (1.0, -1.0, 0.0):
                raise DataError(f"{path}:{lineno}: label {parts[0]!r} is not binary (+1/-1 or 1/0)")
            labels.append(1.0 if label > 0 else 0.0)
            for tok in parts[1:]:
                key, sep, val = tok.partition(":")
                try:
                    j, v = int(key), float(val)
                except ValueError:
                    raise DataError(f"{path}:{lineno}: {tok!r} is not '<index>:<number>'") from None
                if not sep or not np.isfinite(v):
                    raise DataError(f"{path}:{lineno}: {tok!r} is not '<index>:<finite number>'")
                if not 1 <= j <= n_features:
                    raise DataError(
                        f"{path}:{lineno}: feature index {j} is outside 1..{n_features}; pass the right n_features"
                    )
                indices.append(j - 1)
                values.append(v)
            indptr.append(len(indices))
    return SparseData(
        np.asarray(indptr, np.int64),
        np.asarray(indices, np.int64),
        np.asarray(values, np.float32),
        np.asarray(labels, np.float32),
        n_features,
    )


A9A_FEATURES = 123


def load_a9a(data_dir=None) -> tuple[SparseData, SparseData]:
    """The a9a train and test sets (32,561 and 16,281 rows, 123 features)."""
    d = locate("a9a", data_dir)
    return read_libsvm(d / "a9a", A9A_FEATURES), read_libsvm(d / "a9a.t", A9A_FEATURES)


# ----------------------------------------------------------------------------- tf.data


def make_dataset(
    x,
    y,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_shards: int = 1,
    shard_index: int = 0,
    repeat: bool = False,
    drop_remainder: bool = False,
):
    """A ``tf.data`` pipeline over in-memory arrays: shard, shuffle (seeded), batch, prefetch.

    Sharding by worker index happens before shuffling, so every worker sees a fixed,
    disjoint slice of the data and a run is reproducible for a given seed.
    """
    if not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index {shard_index} is outside 0..{num_shards - 1}")
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if num_shards > 1:
        ds = ds.shard(num_shards, shard_index)
    if shuffle:
        ds = ds.shuffle(min(len(x), 60_000), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    return ds.batch(int(batch_size), drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
