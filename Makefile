# labkit: `make grade` runs every lab notebook and checks it; `make test` runs the tests;
# `make release` writes the student kit, which has its own README and Makefile.
# Every target depends on `setup`, which builds .venv once (a stamp file makes later calls no-ops).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed
# What `make setup` installs: everything (the grader, the tests, the linter); a cluster node or a
# student needs only requirements.txt (REQUIREMENTS=requirements.txt).
REQUIREMENTS ?= requirements-test.txt

# Where the loader looks for data (see README "Data"). Both are optional.
#   DATA=DIR         use the dataset files already in DIR (LABKIT_DATA)
#   DATA_MIRROR=X    fetch from X, a local directory or a base URL (LABKIT_DATA_MIRROR)
ifdef DATA
export LABKIT_DATA := $(abspath $(DATA))
endif
ifdef DATA_MIRROR
export LABKIT_DATA_MIRROR := $(if $(findstring ://,$(DATA_MIRROR)),$(DATA_MIRROR),$(abspath $(DATA_MIRROR)))
endif

SUBMISSIONS ?=
JOBS        ?=
SLURM       ?=
SLURM_ARGS  ?=
GRADE_ARGS  ?=
PYTEST_ARGS ?=

.PHONY: setup data lab test test-fast test-order check grade grade-import grade-answers grade-merge grade-export grade-deliver \
        bench canary release cluster-setup cloudlab-update cloudlab-local clean

setup: $(STAMP)

$(STAMP): $(wildcard requirements*.txt) pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r $(REQUIREMENTS)
	$(PY) -m pip install --no-deps -e .
	touch $@

data: setup
	$(PY) -m labkit data fetch --dataset mnist --dataset a9a

# each lab's folder holds its notebook
NOTEBOOKS_DIR = labkit/labs/
lab: setup
	$(PY) -m jupyterlab $(NOTEBOOKS_DIR)

# TEST_JOBS workers side by side (pytest-xdist; tests that must not overlap share a group, and
# the groups run longest first, see tests/conftest.py); TEST_JOBS=0 runs in this one process.
TEST_JOBS ?= 2
XDIST     := $(if $(filter-out 0,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadgroup --no-loadscope-reorder)
test: setup
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The seconds each test took in this checkout's last run (pytest's cache), as the
# order a fresh clone runs them in: longest first.
test-order:
	@test -f .pytest_cache/v/labkit/test-seconds || { echo "run make test first: no timings in .pytest_cache"; exit 1; }
	cp .pytest_cache/v/labkit/test-seconds tests/test_seconds.json

# The edit-test loop: the tests that load no TensorFlow and no Jupyter kernel (marked fast by
# tests/conftest.py, which fails a fast test that loads either), in about a minute.
test-fast: setup
	$(PY) -m pytest -m fast $(XDIST) $(PYTEST_ARGS)

# SUBMISSIONS: DIR/<student>/<notebook>.ipynb, Canvas's "Download Submissions" zip or Gradescope's
# export; LAB='lab1 lab2' grades those labs (default: the labs submitted); ROSTER: Canvas's gradebook
# export (Grades > Export); DUE: the due date Gradescope's submission times are compared with;
# GROUPS: Canvas's group set CSV, for a group assignment (each group's file credited to every member).
# OUT: the class's folder and gradebook, for every grading target (default out/grade; OUT=out/fall-b for
# a second class); STUDENT=NAME regrades that one student, leaving everyone else's runs as they are.
# Without SUBMISSIONS the reference notebooks are graded into out/reference, never into the class's OUT.
OUT    ?= out/grade
STUDENT ?=
LAB    ?=
ROSTER ?=
ANONYMOUS ?=
DUE    ?=
GROUPS ?=
grade: setup data
	$(PY) -m labkit grade $(SUBMISSIONS) --out $(if $(SUBMISSIONS),$(OUT),out/reference) $(if $(STUDENT),--student $(STUDENT)) $(if $(JOBS),-j $(JOBS)) $(if $(SLURM),--slurm $(SLURM) --slurm-args='$(SLURM_ARGS)') $(foreach l,$(LAB),--lab $(l)) $(if $(ROSTER),--roster $(ROSTER)) $(if $(DUE),--due '$(DUE)') $(if $(GROUPS),--groups $(GROUPS)) $(GRADE_ARGS)

# Lay out an LMS download as DIR/<student>/<notebook>.ipynb to look at first (`make grade` does it itself).
DOWNLOAD ?=
INTO     ?= submissions
grade-import: setup
	@test -n "$(DOWNLOAD)" || { echo "usage: make grade-import DOWNLOAD=submissions.zip [INTO=submissions] [ROSTER=...] [DUE=...] [GROUPS=...]" >&2; exit 2; }
	$(PY) -m labkit grade-import $(DOWNLOAD) --into $(INTO) $(if $(ROSTER),--roster $(ROSTER)) $(if $(DUE),--due '$(DUE)') $(if $(GROUPS),--groups $(GROUPS))

# After `make grade SUBMISSIONS=...`: the TAs' answer pages and CSVs, merging their scores (PREFER: the
# file that wins a conflict), the gradebook exports and the feedback pages packed for the LMS
# (README "Grading"). None of these runs a notebook.
SCORES ?=
PREFER ?=
grade-answers: setup
	$(PY) -m labkit grade-answers --out $(OUT) $(if $(ANONYMOUS),--anonymous)

grade-merge: setup
	@test -n "$(SCORES)" || { echo "usage: make grade-merge SCORES='$(OUT)/answers/lab1/answer-q1.csv ...'" >&2; exit 2; }
	$(PY) -m labkit grade-merge $(SCORES) --out $(OUT) $(if $(PREFER),--prefer $(PREFER))

grade-export: setup
	$(PY) -m labkit grade-export --out $(OUT) $(if $(ROSTER),--roster $(ROSTER)) $(if $(NEW_ASSIGNMENT),--new-assignment) $(if $(SCALE_TO_CANVAS),--scale-to-canvas) $(GRADE_ARGS)

grade-deliver: setup
	$(PY) -m labkit grade-deliver --out $(OUT)

bench: setup data
	$(PY) -m labkit bench --out out/bench

# Before a term: the reference notebooks graded in a scratch venv (out/canary/venv) with the newest
# TensorFlow, Keras and papermill the registry has, and again with the course's pins; out/canary/report.md
# says what changed or broke. The course's .venv is not touched. BASELINE=out/reference reuses a grading.
BASELINE ?=
canary: setup data
	$(PY) -m labkit canary --out out/canary $(if $(BASELINE),--baseline $(BASELINE))

RELEASE ?= release
release: setup
	$(PY) -m labkit release --out $(RELEASE)

# The student kit's `make check` on the reference notebooks: the public rubric, then each lab run as
# the grader runs it (LAB=N for one lab; NOTEBOOK=FILE for another notebook).
LAB      ?=
NOTEBOOK ?=
check: setup data
	$(PY) -m labkit release --public-rubric out/check/rubric.toml
	$(PY) -m labkit check $(if $(NOTEBOOK),"$(NOTEBOOK)") $(if $(LAB),--lab $(LAB)) --rubric out/check/rubric.toml

# Prepare a cluster's nodes over ssh: copy this kit, install it, fetch the data, check versions
# (docs/cluster.md).  make cluster-setup HOSTS=hosts.txt [DATA_MIRROR=DIR_OR_URL] [CLUSTER_ARGS=...]
HOSTS        ?=
CLUSTER_ARGS ?=
cluster-setup: setup
	@test -n "$(HOSTS)" || { echo "usage: make cluster-setup HOSTS=hosts.txt [DATA_MIRROR=...] [CLUSTER_ARGS=...]" >&2; exit 2; }
	$(PY) -m labkit nodes setup --hosts $(HOSTS) $(if $(DATA_MIRROR),--data-mirror $(LABKIT_DATA_MIRROR)) $(CLUSTER_ARGS)

# On a running CloudLab experiment's node0, after the course's kit changed: pull the profile's
# repository, bring ~/labkit up to date from it (its notebooks left as they are: only new ones are
# added), reinstall, and the same on the hosts file's other nodes (docs/cluster.md section 0).
#   make cloudlab-update [HOSTS=~/hosts.txt] [REPOSITORY=/local/repository] [DATA_MIRROR=DIR_OR_URL]
REPOSITORY ?= /local/repository
cloudlab-update:
	sudo bash $(firstword $(wildcard startup.sh cloudlab/startup.sh)) --update --user "$$(id -un)" \
		--repository $(REPOSITORY) $(if $(HOSTS),--hosts $(abspath $(HOSTS))) $(if $(DATA_MIRROR),--mirror $(LABKIT_DATA_MIRROR))

# Emulated CloudLab nodes on this machine (root): a shell on node0 as the experiment's account,
# the others reached by `ssh node1` ...; all of it goes when the shell ends (docs/cluster.md).
# SLURM=1: with a Slurm across them (slurmctld on node0, a slurmd on each; docs/cluster.md section 9).
# SHARED_HOME=1: the account's home one folder on every node, as an NFS home is (SLURM=1 has it too).
#   make cloudlab-local [NODES=4] [LINK=1gbit,0.2ms] [SLURM=1] [SHARED_HOME=1] [CLOUDLAB_ARGS="--command '...'"]
NODES         ?= 4
LINK          ?= 1gbit
CLOUDLAB_ARGS ?=
cloudlab-local: setup
	$(PY) -m labkit cloudlab-local --nodes $(NODES) --link $(LINK) $(if $(SLURM),--slurm) $(if $(SHARED_HOME),--shared-home) $(CLOUDLAB_ARGS)

clean:
	rm -rf out runs notebooks/runs labkit/labs/*/runs labkit/labs/*/artifacts release .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
