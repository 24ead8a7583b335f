"""Sparse vs dense LR gradient step (Lab 3): time per step at 1e6 and 33.7M features, batch 100;
bytes per step of the sparse step on a real parameter-server cluster against the O(nnz) bound.

The dense step is report 001's ``sparse_tensor_dense_matmul(X_T, error)`` plus a dense
update: it writes and reads num_features floats per step. The sparse step touches only
the batch's unique features. Both run side by side in one process on the same batch.
"""
from __future__ import annotations

from labkit.bench import entry, ratio

BATCH = 100


def run(quick: bool = False) -> dict:
    from labkit import clickdata as cd
    from labkit import sparse

    sizes = [100_000, 1_000_000] if quick else [1_000_000, cd.CRITEO_FEATURES]
    rows, ratios = [], []
    for f in sizes:
        spec = cd.ClickSpec(num_features=f)
        x, y = sparse.csr_to_sparse(cd.generate(spec, BATCH).data)
        uniq = len(set(x.indices.numpy()[:, 1].tolist()))
        res = {}
        for method, runs in (("sparse", 200), ("dense", 5 if f > 5_000_000 else 30)):
            res[method] = sparse.time_step(method, f, x, y, runs=runs, threads=1)
            rows.append({"num_features": f, "method": method, "batch": BATCH, "nnz": res[method]["nnz"],
                         "unique features": uniq, "step ms": res[method]["step_ms"],
                         "weights MB": f * 4 / 1e6})
        speedup = res["dense"]["step_ms"] / res["sparse"]["step_ms"]
        goal = ">= 100" if f == cd.CRITEO_FEATURES else ""
        ratios.append(ratio(f"dense / sparse step time, {f:,} features", speedup, goal))
    ps_row = ps_step_bytes(quick)
    rows.append(ps_row)
    ratios.append(ratio("bytes per sparse PS step / nnz bound (16 B x unique features)",
                        ps_row["measured / bound"], "<= 2"))
    return {
        "title": "Sparse vs dense LR gradient step (batch 100, 1 intra-op thread)",
        "rows": rows, "ratios": ratios,
        "notes": ["step = gradient + SGD update of a local weight variable, median of untraced "
                  "Session.run calls; the batch is synthetic click data (labkit.clickdata, Zipf, ~34 nnz/row)",
                  "report 001 Table 1's per-example variant (a [num_features, batch] matrix) is left "
                  "out: 13.5 GB at 33.7M features and batch 100",
                  "PS step bytes: a real 1 ps + 2 worker async cluster on 127.0.0.1 (labkit.tasks.sparse_lr), "
                  "each worker's own TCP bytes (socket counters) per step; the bound is the payload: unique ids "
                  "once (8 B), their weights back and their gradients out (4 + 4 B)"],
    }


def ps_step_bytes(quick: bool) -> dict:
    """One async run on 1 ps + 2 workers at 10^6 features, batch 100: measured bytes per
    worker step against ``costmodel.sparse_ps_step_bytes`` of the unique features it sent."""
    from labkit.experiments import sparse_lr

    exp = sparse_lr.train([f"async:{BATCH}"], workers=2, samples=10_000 if quick else 40_000, eval_every=0,
                          train_rows=20_000, test_rows=1000, save_weights=False, progress=False, timeout=600)
    s = exp.summary().iloc[0]
    return {"num_features": 1_000_000, "method": "sparse, PS cluster (async, 2 workers)", "batch": BATCH,
            "unique features": round(float(s["unique_per_step"])), "bytes per step": round(float(s["bytes_per_step"])),
            "bound bytes per step": round(float(s["bound_bytes_per_step"])),
            "dense bytes per step": float(s["dense_bytes_per_step"]),
            "measured / bound": float(s["measured_over_bound"]), "steps": int(s["global_steps"])}


if __name__ == "__main__":
    entry(run)
