# Kinema4D platform: setup, test, lint, demo. `make help` lists targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
K4D := $(VENV)/bin/k4d
PACKAGES := -e libs/runtime[local,dev,viz] -e services/kinematics[bench] -e services/projection[bench] \
            -e libs/model[torch] -e libs/tabletop[physics] -e services/generator[onnx] -e services/simulator -e services/simulator/embedded -e services/trainer[train] -e services/evaluator[test] -e services/datagen \
            -e services/policy[viz]
STAMP := $(VENV)/.setup-stamp
PYTEST_ARGS ?=

.PHONY: help setup test test-all lint demo protos proto-baseline constraints bench bench-gpu clean

help:
	@echo "make setup   create $(VENV) and install every package (pinned by constraints.txt)"
	@echo "make test    setup, then the default test suite (real broker + S3 server started by the tests)"
	@echo "make test-all  the default suite plus slow tests"
	@echo "make lint    ruff, import circles, buf lint"
	@echo "make demo    the main job: k4d simulate on the shipped Panda example"
	@echo "make demo-model  generate data, train, export and evaluate the demo model (about 5 h on 2 cores; resumable)"
	@echo "make protos  regenerate the committed gRPC/protobuf stubs"
	@echo "make bench   run every benchmark under benchmarks/ (GPU ones skip without a GPU)"
	@echo "make bench-gpu  everything that needs a GPU, one <= 9 min call, one JSON file (benchmarks/gpu/run.sh)"

setup: $(STAMP)

# Idempotent: re-runs only when the pins or a package's pyproject change.
$(STAMP): constraints.txt libs/runtime/pyproject.toml libs/model/pyproject.toml libs/tabletop/pyproject.toml services/*/pyproject.toml
	bash tools/install-system-deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first, pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt $(PACKAGES)
	bash infra/tools/install-kubectl.sh $(VENV)/bin
	touch $(STAMP)

test: setup
	$(PY) -m pytest -m "not slow and not gpu" $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check libs services tests tools benchmarks infra
	$(PY) tools/check_import_cycles.py
	$(PY) tools/check_docs.py
	cd proto && ../$(VENV)/bin/buf lint

demo: setup
	bash examples/demo.sh $(K4D)

# The demo model's recipe (issue 13; hours on a 2-core CPU, resumable): data, training,
# export to models/demo-small, evaluation. See models/demo-small/README.md.
.PHONY: demo-model
demo-model: setup
	bash examples/train/demo-model.sh $(K4D)

protos: setup
	$(PY) tools/gen_protos.py

proto-baseline: setup
	cd proto && ../$(VENV)/bin/buf build -o baseline/kinema4d-v1.binpb

# Re-pin every third-party package from the current venv (review the diff).
constraints:
	$(PIP) freeze --exclude-editable | grep -v -E '^(-e|k4d-)' | sed -E 's/\+cpu$$//' > constraints.txt

bench: setup
	$(PY) benchmarks/run.py

# On a lent GPU machine (no venv there): BENCH_GPU_ARGS="--out FILE". Here: first
# BENCH_GPU_ARGS=prepare (builds benchmarks/gpu/wheels/ for it), or --dry-run (CPU check).
BENCH_GPU_ARGS ?=
bench-gpu:
	bash benchmarks/gpu/run.sh $(BENCH_GPU_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
