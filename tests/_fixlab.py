"""The grader's fixture lab ``fix``: a tiny notebook that records through ``labkit.record`` (a
total, a figure, its tasks' steps, an accuracy from saved weights, an answer), its rubric with a
whole-notebook timeout lab ``slow``, and the fake claims a submission may make."""

from __future__ import annotations

import textwrap

from nbformat.v4 import new_notebook

from helpers import cell

ANSWER = (
    "A nearest-centroid classifier is linear: its logits are x.mu_k - |mu_k|^2/2, so the saved "
    "W and b reproduce the recorded accuracy exactly."
)

# cell 3 is the solution region the release removes; tests swap it for misbehaving code
CELLS = [
    ("md", "# Fixture lab\nA tiny lab for the grader's tests.", []),
    ("code", "n = 10\ntest_limit = 500", ["parameters"]),
    (
        "code",
        "import json, os, sys\nimport numpy as np\nimport labkit\n"
        "print('WARNING: TensorFlow-style noise on stderr never costs points', file=sys.stderr)",
        [],
    ),
    ("code", "### BEGIN SOLUTION\ntotal = sum(range(n + 1))\n### END SOLUTION\nlabkit.record('total', total)", []),
    ("code", "import matplotlib.pyplot as plt\nplt.plot(range(n))\nplt.show()", ["fig-plot"]),
    (
        "code",
        textwrap.dedent("""\
        assert os.environ['LABKIT_RUNS'] == os.path.realpath('runs')  # cluster runs stay in the workdir
        os.makedirs('runs/fix/run1', exist_ok=True)
        steps = {'0': 5 * n, '1': 5 * n}
        for task, s in steps.items():
            with open(f'runs/fix/run1/task-{task}.json', 'w') as f:
                json.dump({'task': task, 'steps': s}, f)
        labkit.record('run_dir', 'runs/fix/run1')  # relative: the grader refuses paths out of the workdir
        labkit.record('worker_steps', steps)
        labkit.record('global_step', 10 * n)"""),
        [],
    ),
    (
        "code",
        textwrap.dedent("""\
        data = labkit.load_mnist(limit=1000, test_limit=test_limit)
        x = data.x_train.reshape(len(data.x_train), -1)
        mu = np.stack([x[data.y_train == k].mean(0) for k in range(10)])
        W, b = mu.T.astype(np.float32), (-0.5 * (mu ** 2).sum(1)).astype(np.float32)
        os.makedirs('artifacts', exist_ok=True)
        np.savez('artifacts/lab1_core_weights.npz', W=W, b=b)
        xt = data.x_test.reshape(len(data.x_test), -1)
        labkit.record('core_test_accuracy', float(((xt @ W + b).argmax(1) == data.y_test).mean()))"""),
        [],
    ),
    ("md", "**Question.** Why does the saved model reproduce the recorded accuracy?", []),
    ("md", ANSWER, ["analysis"]),
]

FAKE_CLAIMS = textwrap.dedent("""\
    os.makedirs('artifacts', exist_ok=True)
    np.savez('artifacts/lab1_core_weights.npz', W=np.zeros((784, 10), np.float32), b=np.zeros(10, np.float32))
    labkit.record('core_test_accuracy', 0.99)
    with open('runs/fix/run1/task-1.json', 'w') as f:
        json.dump({'task': '1', 'steps': 4 * n}, f)  # the task did fewer steps than the record claims""")

RUBRIC = """
[defaults]
cell_timeout = 10
notebook_timeout = 180
start_timeout = 90
memory_mb = 1200

[labs.fix]
notebook = "fixlab.ipynb"
title = "Fixture lab"
[labs.fix.parameters]
n = 20
[[labs.fix.checks]]
name = "total"
kind = "threshold"
points = 2
record = "total"
min = 210
max = 210
[[labs.fix.checks]]
name = "plot"
kind = "figures"
points = 1
cells = ["fig-plot"]
[[labs.fix.checks]]
name = "steps add up"
kind = "sum_equals"
points = 1
record = "worker_steps"
total = "global_step"
verify = { name = "task_steps", results = "{run_dir}/task-*.json", field = "steps", key = "task" }
[[labs.fix.checks]]
name = "accuracy"
kind = "threshold"
points = 3
record = "core_test_accuracy"
min = 0.6
verify = { name = "lab1_weights", test_limit = 500 }
[[labs.fix.checks]]
name = "analysis"
kind = "analysis"
points = 1

[labs.slow]
notebook = "fixslow.ipynb"
title = "Whole-notebook timeout"
cell_timeout = 600
notebook_timeout = 15
[[labs.slow.checks]]
name = "never"
kind = "record"
points = 1
record = "never"
"""


def lab_notebook(replace=None):
    """The fixture lab's notebook of ``CELLS``, cell ``i``'s source replaced by ``replace[i]`` where given."""
    replace = replace or {}
    nb = new_notebook(
        cells=[cell(replace.get(i, src), tags, markdown=kind == "md") for i, (kind, src, tags) in enumerate(CELLS)]
    )
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb
