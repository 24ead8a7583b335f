"""labkit.learning.sparse (gradients, O(nnz) cost), labkit.datasets.clickdata (determinism, shards), LIBSVM reader."""

import os

import numpy as np
import pytest

from labkit.datasets import clickdata as cd
from labkit.datasets.loaders import DataError, SparseData, read_libsvm


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported by the tests that use it (marked ``tensorflow``), not when this file is
    collected: the fast lane (``make test-fast``) collects it too."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def sparse(tf):
    from labkit.learning import sparse  # imports TensorFlow

    return sparse


def _random_batch(rng, b=8, f=40, dtype=np.float64):
    """A CSR batch with a duplicate row, an empty row and unsorted feature ids."""
    import tensorflow as tf

    dense = (rng.random((b, f)) < 0.15) * rng.normal(size=(b, f))
    dense[1] = dense[0]
    dense[2] = 0.0
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(1))])
    rows, cols = np.nonzero(dense)
    perm = rng.permutation(len(cols))  # X's non-zeros need not be in row order
    x = tf.SparseTensor(np.stack([rows, cols], 1)[perm], dense[rows, cols][perm].astype(dtype), [b, f])
    y = (rng.random(b) < 0.5).astype(np.float32)
    return x, y, dense, indptr


@pytest.mark.parametrize("labels", ["01", "pm1"])
@pytest.mark.tensorflow
def test_sparse_gradient_equals_autodiff_on_dense(labels, tf, sparse):
    rng = np.random.default_rng(0)
    x, y, dense, _ = _random_batch(rng)
    if labels == "pm1":
        y = 2 * y - 1
    w = tf.Variable(rng.normal(size=dense.shape[1]))
    with tf.GradientTape() as tape:
        loss_ref = sparse.loss_dense(w, dense, y, labels)
    g_ref = tape.gradient(loss_ref, w)
    loss, g = sparse.sparse_gradient(w, x, y, labels)
    assert isinstance(g, tf.IndexedSlices)
    # Only the batch's features, each once.
    touched = np.flatnonzero((dense != 0).any(0))
    assert sorted(g.indices.numpy().tolist()) == touched.tolist()
    np.testing.assert_allclose(float(loss), float(loss_ref), rtol=1e-12)
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), g_ref.numpy(), rtol=1e-10, atol=1e-12)
    for per_example in (False, True):  # report 001's dense baseline agrees too
        loss_d, g_d = sparse.dense_gradient(w, x, y, labels, per_example=per_example)
        np.testing.assert_allclose(g_d.numpy(), g_ref.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(float(loss_d), float(loss_ref), rtol=1e-12)


@pytest.mark.tensorflow
def test_sparse_gradient_matches_finite_differences(tf, sparse):
    rng = np.random.default_rng(1)
    x, y, dense, _ = _random_batch(rng, b=6, f=12)
    w0 = rng.normal(size=12)
    _, g = sparse.sparse_gradient(tf.constant(w0), x, y)
    g = tf.convert_to_tensor(g).numpy()
    eps = 1e-6
    for j in range(12):
        e = np.zeros(12)
        e[j] = eps
        num = (float(sparse.loss_dense(w0 + e, dense, y)) - float(sparse.loss_dense(w0 - e, dense, y))) / (2 * eps)
        assert abs(num - g[j]) < 1e-8, (j, num, g[j])


@pytest.mark.tensorflow
def test_labels_convention_is_checked(tf, sparse):
    x, y, _, _ = _random_batch(np.random.default_rng(2))
    with pytest.raises(ValueError, match="pm1"):
        sparse.sparse_gradient(tf.zeros(40, tf.float64), x, 2 * y - 1, labels="01")
    with pytest.raises(ValueError, match="'01' .*'pm1'"):
        sparse.labels01(y, labels="+-1")


@pytest.mark.tensorflow
def test_sparse_update_changes_only_touched_rows(tf, sparse):
    rng = np.random.default_rng(3)
    x, y, dense, _ = _random_batch(rng, dtype=np.float32)
    w = tf.Variable(rng.normal(size=40).astype(np.float32))
    before = w.numpy().copy()
    _, g = sparse.sparse_gradient(w, x, y)
    sparse.apply_sparse(w, g, lr=0.5)
    changed = np.flatnonzero(w.numpy() != before)
    assert set(changed) <= set(g.indices.numpy())
    np.testing.assert_allclose(w.numpy(), before - 0.5 * tf.convert_to_tensor(g).numpy(), rtol=1e-6)


@pytest.mark.tensorflow
def test_step_cost_is_o_nnz_not_o_num_features(tf, sparse):
    """Same batch (same nnz), 100x more features: the sparse step's time and memory stay put."""
    spec = cd.ClickSpec(num_features=10_000, seed=4)
    chunk = cd.generate(spec, 100)
    x, y = sparse.csr_to_sparse(chunk.data)
    wide = tf.SparseTensor(x.indices, x.values, [100, 1_000_000])
    small = sparse.step_cost("sparse", 10_000, x, y, runs=30, threads=1)
    big = sparse.step_cost("sparse", 1_000_000, wide, y, runs=30, threads=1)
    dense_small = sparse.step_cost("dense", 10_000, x, y, runs=3, threads=1)
    dense_big = sparse.step_cost("dense", 1_000_000, wide, y, runs=3, threads=1)
    # The memory measurement can see O(num_features) work: the dense baseline's grows ~100x.
    assert dense_big["alloc_bytes"] > 50 * dense_small["alloc_bytes"], (dense_small, dense_big)
    assert big["alloc_bytes"] < 2 * small["alloc_bytes"], (small, big)
    assert big["step_ms"] < 10 * small["step_ms"], (small, big)


# ----------------------------------------------------------------------------- synthetic click data


def test_click_generator_is_deterministic_and_chunk_independent():
    spec = cd.ClickSpec(num_features=100_000, seed=7)
    a = cd.generate(spec, 5000)
    b = cd.generate(spec, 5000)
    for f in ("indptr", "indices", "values", "labels"):
        np.testing.assert_array_equal(getattr(a.data, f), getattr(b.data, f))
    # Chunks of any size, and slices taken on their own, give the same rows.
    parts = list(cd.iter_chunks(spec, 5000, chunk_rows=777))
    assert [len(p) for p in parts][:2] == [777, 777]
    np.testing.assert_array_equal(np.concatenate([p.data.indices for p in parts]), a.data.indices)
    mid = cd.generate(spec, 1000, start=4000)
    np.testing.assert_array_equal(mid.data.labels, a.data.labels[4000:])
    np.testing.assert_array_equal(mid.data.indices, a.data.indices[a.data.indptr[4000] :])
    # Another seed or split is other data.
    assert not np.array_equal(
        cd.generate(cd.ClickSpec(num_features=100_000, seed=8), 5000).data.indices, a.data.indices
    )
    assert not np.array_equal(cd.generate(spec, 5000, "test").data.indices, a.data.indices)


def test_click_generator_shape_and_optimum():
    spec = cd.ClickSpec(num_features=cd.CRITEO_FEATURES)
    c = cd.generate(spec, 20_000)
    per_row = np.diff(c.data.indptr)
    assert 30 <= per_row.min() and per_row.max() <= 40 and 33 < per_row.mean() < 35
    assert c.data.indices.max() < cd.CRITEO_FEATURES
    # Zipf popularity: the most common 1% of the touched features cover most non-zeros.
    _, counts = np.unique(c.data.indices, return_counts=True)
    top = np.sort(counts)[::-1][: len(counts) // 100].sum()
    assert top > 0.5 * c.data.nnz
    # Labels follow p: the Bayes predictor beats the majority class, and p is calibrated.
    opt = cd.optimum(spec, 20_000)
    assert opt["bayes_accuracy"] > opt["majority_accuracy"] + 0.05
    assert opt["bayes_logloss"] < opt["majority_logloss"]
    assert abs(c.data.labels.mean() - c.p.mean()) < 0.02


@pytest.mark.tensorflow
def test_tfrecord_shards_round_trip(tmp_path, tf, sparse):
    spec = cd.ClickSpec(num_features=50_000, seed=2)
    shards = cd.write_tfrecords(spec, tmp_path, 300, num_shards=2, log=None)
    assert [s["rows"] for s in shards] == [150, 150]
    assert [s["bytes"] for s in shards] == [os.path.getsize(s["path"]) for s in shards]  # what is on disk
    assert cd.read_meta(tmp_path)["spec"]["num_features"] == 50_000
    ds = cd.tfrecord_dataset([s["path"] for s in shards], 50_000, batch_size=300)
    x, y = next(iter(ds))
    ref_x, ref_y = sparse.csr_to_sparse(cd.generate(spec, 300).data)
    np.testing.assert_array_equal(tf.sparse.to_dense(x).numpy(), tf.sparse.to_dense(ref_x).numpy())
    np.testing.assert_array_equal(y.numpy(), ref_y.numpy())


@pytest.mark.tensorflow
def test_sparse_sgd_learns_click_data(tf, sparse):
    """End to end in one process: a few hundred sparse steps beat the majority class."""
    spec = cd.ClickSpec(num_features=200_000, seed=5)
    train, test = cd.generate(spec, 30_000), cd.generate(spec, 5000, "test")
    w = tf.Variable(tf.zeros([spec.num_features]))
    step = sparse.make_train_step(w, lr=0.5)
    for x, y in sparse.batch_iter(train.data, 100, epochs=1):
        step(x, y)
    res = sparse.evaluate(w, *sparse.csr_to_sparse(test.data))
    opt = cd.optimum(spec, 5000)
    assert res["accuracy"] > opt["majority_accuracy"] + 0.03, (res, opt)
    assert res["accuracy"] <= opt["bayes_accuracy"] + 0.01


# ----------------------------------------------------------------------------- LIBSVM reader


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("+1 1:1 3:1\n\n-1 2:1\n", 2, "blank line"),
        ("+1 1:1\n-1 2:1\n+1 7:1\n", 3, "outside 1..5"),
        ("+1 0:1\n", 1, "outside 1..5"),
        ("+1 1:1\n-1 2:abc\n", 2, "2:abc"),
        ("+1 1:nan\n", 1, "finite"),
        ("+1 1\n", 1, "'1' is not"),
        ("yes 1:1\n", 1, "label 'yes' is not a number"),
        ("2 1:1\n", 1, "not binary"),
    ],
)
def test_read_libsvm_errors_name_the_line(tmp_path, text, line, match):
    p = tmp_path / "bad.svm"
    p.write_text(text)
    with pytest.raises(DataError, match=match) as e:
        read_libsvm(p, n_features=5)
    assert f"{p}:{line}:" in str(e.value)


@pytest.mark.tensorflow
def test_read_libsvm_parses_labels_and_explicit_width(tmp_path, tf, sparse):
    p = tmp_path / "ok.svm"
    p.write_text("+1 1:1 3:0.5  # comment\n-1 2:1\n0 4:2\n")
    d = read_libsvm(p, n_features=5)  # feature 5 never appears; the width is what we pass
    assert isinstance(d, SparseData) and d.n_features == 5
    np.testing.assert_array_equal(d.labels, [1, 0, 0])
    np.testing.assert_array_equal(d.to_dense()[0], [1, 0, 0.5, 0, 0])
    x, y = sparse.csr_to_sparse(d, rows=[2, 0])
    np.testing.assert_array_equal(tf.sparse.to_dense(x).numpy(), d.to_dense()[[2, 0]])
