"""Synthetic click-through data at any scale, with a known best achievable accuracy.

Reports 001 and 004 trained logistic regression on a click log with 33,762,578 hashed
features. This module makes data of that shape from a seed, so a lab can run at any scale
without downloading gigabytes, and so the *optimum is known*: rows of hashed categorical fields
with Zipf-popular values, labels drawn from a logistic model with a hidden true weight vector,
so ``optimum`` gives the Bayes-optimal accuracy and log-loss.

Everything is a pure function of ``(spec, split, row)``, in fixed seeded blocks of ``BLOCK``
rows: any slice can be generated on its own (a worker makes its shard alone), chunk sizes never
change the data, and memory stays bounded at any number of rows.

More in docs/internals.md, section labkit.datasets (how a row and its label are made).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from labkit.datasets.loaders import SparseData

BLOCK = 4096  # rows per independently seeded block; fixed, so data never depends on chunk sizes
SPLITS = {"train": 0, "test": 1}
CRITEO_FEATURES = 33_762_578  # the reports' num_features: a 135 MB float32 weight vector

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fast, well-spread hash of uint64 arrays (wraps mod 2^64)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unit(h: np.ndarray) -> np.ndarray:
    """uint64 hashes -> floats in (0, 1)."""
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


@dataclass(frozen=True)
class ClickSpec:
    """The shape of a synthetic click log. Same spec, same data, on any machine.

    ``weight_scale`` is the standard deviation of the true weights, and ``bias`` the
    true weight of the constant field: together they set how predictable clicks are
    (``optimum`` reports it) and the click rate.
    """

    num_features: int = 1_000_000
    num_fields: int = 38  # 30 always present + 8 optional (each present half the time)
    optional_fields: int = 8
    zipf_s: float = 1.2
    min_vocab: int = 3
    weight_scale: float = 0.6
    bias: float = -0.5
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.num_features, (int, np.integer)) or not 16 <= self.num_features <= 2**40:
            raise ValueError(f"num_features must be an integer in 16..2^40, got {self.num_features!r}")
        if not 2 <= self.num_fields <= 1000:
            raise ValueError(f"num_fields must be in 2..1000, got {self.num_fields}")
        if not 0 <= self.optional_fields < self.num_fields:
            raise ValueError(f"optional_fields must be in 0..num_fields-1, got {self.optional_fields}")
        if self.zipf_s <= 0 or self.zipf_s == 1.0:
            raise ValueError(f"zipf_s must be > 0 and != 1 (the bounded sampler divides by 1 - s), got {self.zipf_s}")

    @property
    def vocab_sizes(self) -> np.ndarray:
        """Values per field: 1 for the bias field, then log-spaced from min_vocab to num_features."""
        sizes = np.geomspace(self.min_vocab, self.num_features, self.num_fields - 1)
        return np.concatenate([[1], np.maximum(np.round(sizes), 1)]).astype(np.int64)

    @property
    def bias_index(self) -> int:
        return int(self.feature_index(np.array([0]), np.array([0]))[0])

    def feature_index(self, field: np.ndarray, value: np.ndarray) -> np.ndarray:
        """The hashing trick: (field, value id) -> column in 0..num_features-1."""
        key = (np.asarray(field, np.uint64) << np.uint64(40)) ^ np.asarray(value, np.uint64)
        h = _mix64(key ^ _mix64(np.uint64(self.seed) + np.uint64(0x9E3779B97F4A7C15)))
        return (h % np.uint64(self.num_features)).astype(np.int64)

    def true_weights(self, index: np.ndarray) -> np.ndarray:
        """The hidden ``w_true[index]``: N(0, weight_scale^2) from a hash; ``bias`` at the bias column."""
        index = np.asarray(index, np.int64)
        salt = _mix64(np.uint64(self.seed) ^ np.uint64(0xD1B54A32D192ED03))
        h1 = _mix64(index.astype(np.uint64) ^ salt)
        h2 = _mix64(h1 ^ np.uint64(0x632BE59BD9B4E019))
        normal = np.sqrt(-2.0 * np.log(_unit(h1))) * np.cos(2 * np.pi * _unit(h2))  # Box-Muller
        w = (self.weight_scale * normal).astype(np.float32)
        return np.where(index == self.bias_index, np.float32(self.bias), w)

    def to_json(self) -> dict:
        return {k: (int(v) if isinstance(v, np.integer) else v) for k, v in asdict(self).items()}


@dataclass
class ClickChunk:
    """Rows ``start .. start+len`` of a split: CSR features, labels in {0, 1}, and the true p."""

    data: SparseData
    p: np.ndarray  # float64: the true click probability of each row
    start: int

    def __len__(self) -> int:
        return len(self.p)


def _zipf_ranks(rng: np.random.Generator, s: float, vocab: np.ndarray, shape) -> np.ndarray:
    """Bounded Zipf value ids in 0..vocab-1 (id 0 most popular), by inverting the continuous CDF."""
    u = rng.random(shape)
    a = 1.0 - s
    hi = np.power(vocab.astype(np.float64) + 1.0, a)
    r = np.power(1.0 + u * (hi - 1.0), 1.0 / a)  # in [1, vocab+1)
    return np.minimum(np.floor(r).astype(np.int64) - 1, vocab - 1)


def _block(spec: ClickSpec, split: str, b: int) -> ClickChunk:
    rng = np.random.default_rng([spec.seed, SPLITS[split], b])
    vocab = spec.vocab_sizes
    values = _zipf_ranks(rng, spec.zipf_s, vocab, (BLOCK, spec.num_fields))
    present = np.ones((BLOCK, spec.num_fields), bool)
    if spec.optional_fields:  # the last optional_fields fields are missing half the time
        present[:, -spec.optional_fields :] = rng.random((BLOCK, spec.optional_fields)) < 0.5
    rows, fields = np.nonzero(present)
    cols = spec.feature_index(fields, values[rows, fields])
    # Hash collisions inside a row add up (value 2.0), as with any feature hasher.
    key = rows.astype(np.int64) * spec.num_features + cols
    key, counts = np.unique(key, return_counts=True)
    rows, cols = key // spec.num_features, key % spec.num_features
    vals = counts.astype(np.float32)
    logits = np.bincount(rows, weights=vals * spec.true_weights(cols), minlength=BLOCK)
    p = 1.0 / (1.0 + np.exp(-logits))
    labels = (rng.random(BLOCK) < p).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=BLOCK))]).astype(np.int64)
    return ClickChunk(SparseData(indptr, cols, vals, labels, spec.num_features), p, b * BLOCK)


def _concat(parts: list[ClickChunk], start: int, stop: int) -> ClickChunk:
    """Rows start..stop out of consecutive blocks."""
    offset = start - parts[0].start
    n = stop - start
    base = np.cumsum([0] + [c.data.nnz for c in parts])
    indptr = np.concatenate([[0]] + [c.data.indptr[1:] + base[i] for i, c in enumerate(parts)])
    indices = np.concatenate([c.data.indices for c in parts])
    values = np.concatenate([c.data.values for c in parts])
    labels = np.concatenate([c.data.labels for c in parts])
    p = np.concatenate([c.p for c in parts])
    lo, hi = indptr[offset], indptr[offset + n]
    data = SparseData(
        indptr[offset : offset + n + 1] - lo,
        indices[lo:hi],
        values[lo:hi],
        labels[offset : offset + n],
        parts[0].data.n_features,
    )
    return ClickChunk(data, p[offset : offset + n], start)


def iter_chunks(
    spec: ClickSpec, n_rows: int, split: str = "train", start: int = 0, chunk_rows: int = 65_536
) -> Iterator[ClickChunk]:
    """Rows ``start .. start+n_rows`` of ``split`` in chunks of at most ``chunk_rows`` rows.

    Memory is bounded by the chunk size (about 35 x 12 bytes per row, plus temporaries),
    whatever ``n_rows`` is; the rows do not depend on ``chunk_rows``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if n_rows < 0 or start < 0 or chunk_rows <= 0:
        raise ValueError(f"need n_rows >= 0, start >= 0, chunk_rows > 0; got {n_rows}, {start}, {chunk_rows}")
    stop = start + n_rows
    pos = start
    while pos < stop:
        end = min(pos + chunk_rows, stop)
        blocks = [_block(spec, split, b) for b in range(pos // BLOCK, (end - 1) // BLOCK + 1)]
        yield _concat(blocks, pos, end)
        pos = end


def generate(spec: ClickSpec, n_rows: int, split: str = "train", start: int = 0) -> ClickChunk:
    """Rows ``start .. start+n_rows`` in memory, as one chunk (fine up to a few million rows)."""
    chunks = list(iter_chunks(spec, n_rows, split, start, chunk_rows=max(n_rows, 1)))
    if not chunks:
        return ClickChunk(
            SparseData(
                np.zeros(1, np.int64),
                np.zeros(0, np.int64),
                np.zeros(0, np.float32),
                np.zeros(0, np.float32),
                spec.num_features,
            ),
            np.zeros(0),
            start,
        )
    return chunks[0]


def optimum(spec: ClickSpec, n_rows: int, split: str = "test", chunk_rows: int = 65_536) -> dict:
    """The best any model can do on these rows, because the true p of every row is known.

    - ``bayes_accuracy``: accuracy of predicting ``p > 0.5`` on the drawn labels;
      ``expected_bayes_accuracy``: its expectation, mean(max(p, 1-p)).
    - ``bayes_logloss``: log-loss of the true p on the drawn labels;
      ``expected_bayes_logloss``: mean binary entropy of p.
    - ``majority_accuracy``: always predicting the commoner label (the floor to beat).
    """
    n = pos = hits = 0
    exp_acc = ll = ent = 0.0
    nnz = 0
    for c in iter_chunks(spec, n_rows, split, chunk_rows=chunk_rows):
        p, y = np.clip(c.p, 1e-12, 1 - 1e-12), c.data.labels.astype(np.float64)
        n += len(c)
        pos += int(y.sum())
        hits += int(((p > 0.5) == (y > 0.5)).sum())
        exp_acc += float(np.maximum(p, 1 - p).sum())
        ll += float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).sum())
        ent += float(-(p * np.log(p) + (1 - p) * np.log1p(-p)).sum())
        nnz += c.data.nnz
    if n == 0:
        raise ValueError("optimum() needs n_rows > 0")
    rate = pos / n
    return {
        "rows": n,
        "click_rate": rate,
        "majority_accuracy": max(rate, 1 - rate),
        "bayes_accuracy": hits / n,
        "expected_bayes_accuracy": exp_acc / n,
        "bayes_logloss": ll / n,
        "expected_bayes_logloss": ent / n,
        "majority_logloss": -(rate * math.log(max(rate, 1e-12)) + (1 - rate) * math.log(max(1 - rate, 1e-12))),
        "nnz_per_row": nnz / n,
    }


def describe(spec: ClickSpec, n_rows: int = 50_000, split: str = "test") -> dict:
    """Print and return ``optimum`` with the spec: what 'good' means for this data."""
    opt = optimum(spec, n_rows, split)
    print(
        f"click data: {spec.num_features:,} features ({spec.num_features * 4 / 1e6:,.1f} MB of float32 "
        f"weights), {opt['nnz_per_row']:.1f} non-zeros/row, click rate {opt['click_rate']:.3f}\n"
        f"  best achievable (true model) on {opt['rows']:,} {split} rows: accuracy "
        f"{opt['bayes_accuracy']:.4f} (expected {opt['expected_bayes_accuracy']:.4f}), "
        f"log-loss {opt['bayes_logloss']:.4f} (expected {opt['expected_bayes_logloss']:.4f})\n"
        f"  majority-class baseline: accuracy {opt['majority_accuracy']:.4f}, "
        f"log-loss {opt['majority_logloss']:.4f}"
    )
    return opt


# ----------------------------------------------------------------------------- TFRecord shards

FEATURE_KEYS = {"index": "index", "value": "value", "label": "label"}


def write_tfrecords(
    spec: ClickSpec,
    out_dir,
    n_rows: int,
    split: str = "train",
    num_shards: int = 4,
    chunk_rows: int = 65_536,
    log=print,
) -> list[dict]:
    """Write rows 0..n_rows of ``split`` as ``num_shards`` TFRecord files of ``tf.train.Example``.

    Each example holds ``index`` (int64 list), ``value`` (float list) and ``label`` (float).
    Shard k holds a contiguous slice of rows. ``meta.json`` next to the shards keeps the spec
    (so a reader knows ``num_features``). Returns one dict per shard: path, rows, bytes.
    """
    import tensorflow as tf

    if num_shards <= 0 or n_rows < num_shards:
        raise ValueError(f"need 1 <= num_shards <= n_rows, got num_shards={num_shards}, n_rows={n_rows}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, n_rows, num_shards + 1).astype(np.int64)
    shards = []
    for k in range(num_shards):
        path = out / f"{split}-{k:05d}-of-{num_shards:05d}.tfrecord"
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        with tf.io.TFRecordWriter(str(path)) as w:
            for c in iter_chunks(spec, hi - lo, split, start=lo, chunk_rows=chunk_rows):
                d = c.data
                for i in range(len(c)):
                    a, b = d.indptr[i], d.indptr[i + 1]
                    ex = tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "index": tf.train.Feature(int64_list=tf.train.Int64List(value=d.indices[a:b])),
                                "value": tf.train.Feature(float_list=tf.train.FloatList(value=d.values[a:b])),
                                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[d.labels[i]])),
                            }
                        )
                    )
                    w.write(ex.SerializeToString())
        shards.append({"path": str(path), "rows": hi - lo, "bytes": path.stat().st_size})
    total = sum(s["bytes"] for s in shards)
    meta = {"spec": spec.to_json(), "split": split, "rows": n_rows, "shards": shards}
    (out / f"{split}-meta.json").write_text(json.dumps(meta, indent=2))
    if log:
        log(
            f"wrote {num_shards} {split} shards, {n_rows:,} rows, {total / 1e6:,.1f} MB "
            f"({total / max(n_rows, 1):.0f} bytes/row) in {out}"
        )
    return shards


def read_meta(out_dir, split: str = "train") -> dict:
    path = Path(out_dir) / f"{split}-meta.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found; write the shards first with "
            f"labkit.datasets.clickdata.write_tfrecords(spec, {str(out_dir)!r}, n_rows)"
        )
    return json.loads(path.read_text())


def tfrecord_dataset(
    paths, num_features: int, batch_size: int, *, shuffle_buffer: int = 0, seed: int = 0, repeat: bool = False
):
    """A ``tf.data`` pipeline of ``(tf.SparseTensor [batch, num_features], labels [batch])``.

    Parsing a whole batch at once with ``tf.io.SparseFeature`` builds the SparseTensor
    directly, in row order (what ``labkit.learning.sparse`` expects).
    """
    import tensorflow as tf

    features = {
        "x": tf.io.SparseFeature(index_key="index", value_key="value", dtype=tf.float32, size=int(num_features)),
        "label": tf.io.FixedLenFeature([], tf.float32),
    }
    ds = tf.data.TFRecordDataset([str(p) for p in paths])
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(int(batch_size)).map(lambda s: tf.io.parse_example(s, features))
    return ds.map(lambda d: (d["x"], d["label"])).prefetch(tf.data.AUTOTUNE)
