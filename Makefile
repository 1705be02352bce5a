# Quickstart: `make train` and `make test` (each sets up .venv on first use).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup train predict export serve schema test test-slow test-all mutants lint format doctor bench bench-long clean upgrade

# The stamp depends on what defines the environment: edit either file and the next make reinstalls.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(PY) scripts/train.py $(ARGS)

# One pytest worker per core (pytest-xdist; WORKERS=0: one process, as -s needs): most tests run a real
# script, whose start-up is single-threaded. A test file stays on one worker, so the trained runs
# its module fixtures share are made once.
WORKERS ?= auto
XDIST = -n $(WORKERS) --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(XDIST) $(ARGS)

# The long tests under the same workers: every run writes under its test's own tmp_path, every
# server and process group listens on a free port, and no test asserts a speed, so two files side
# by side only take longer each. The longest files are split by case (test_corpus_resume_*.py,
# test_benchmarks_*.py) so that no single file holds one worker long after the other is done.
test-slow: $(STAMP)
	$(PY) -m pytest -m slow $(XDIST) $(ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(XDIST) $(ARGS)

# Plant each curated bug of tests/mutation/mutants.py in a copy of the repo and check that the
# default-suite tests listed for it fail; any escaped or stale mutant fails the target.
mutants: $(STAMP)
	$(PY) tests/mutation/run.py $(ARGS)

# Style (ruff) is `make lint`, never `make test`: your code's style is yours. `make lint` checks the
# whole clone, `make lint LINT_PATHS=engine` the engine's code only (what CI runs: your room,
# src/project, is yours), `make lint LINT_PATHS=src/project` yours only. `make format` fixes what
# `make lint` reports wherever ruff can, over the same paths.
ENGINE_CODE := src/trainwell src/hydra_plugins scripts tests benchmarks
LINT_PATHS ?= .
LINTED = $(if $(filter engine,$(LINT_PATHS)),$(ENGINE_CODE),$(LINT_PATHS))

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

# Formats even when `ruff check --fix` leaves something to fix (`-`: go on); the last check
# then fails the target on what is left.
format: $(STAMP)
	-$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check $(LINTED)

doctor: $(STAMP)
	$(PY) scripts/doctor.py $(ARGS)

# The benchmarks with their small defaults; each prints its figures as its last line (docs/benchmarks.md).
# make bench: the training-side figures (minutes in all); make bench-long: those that take minutes
# each (serving, shutdown, export, imbalance, doctor time, numpy state); the GPU suite needs a GPU
# (docs/benchmarks.md). `runner:part` runs `benchmarks/runner.py part` (a runner of several parts).
BENCHMARKS := pace:overhead features:memory features:data_pipeline pace:throughput pace:host pace:epoch host_syncs features:startup features:guards features:resume features:cv features:summary features:ema
# The op parity table (docs/benchmarks.md): a step's operations beyond the raw loop's, per mode.
OPS_ARGS := --num-samples 64 --num-val 16 --batch 8 --modes fp32 bf16 bf16_cl
BENCHMARKS_LONG := shipping:serving shipping:shutdown shipping:export features:imbalance features:doctor features:state
RUN_BENCHMARK = set -- $$(echo $$b | tr : ' '); echo "== benchmarks/$$1.py $$2"; $(PY) benchmarks/$$1.py $$2 || exit 1
bench: $(STAMP)
	@for b in $(BENCHMARKS); do $(RUN_BENCHMARK); done
	@echo "== benchmarks/pace.py throughput --ops"; $(PY) benchmarks/pace.py throughput --ops $(OPS_ARGS)

bench-long: $(STAMP)
	@for b in $(BENCHMARKS_LONG); do $(RUN_BENCHMARK); done

# make predict ARGS="ckpt_path=<run dir>/checkpoints/best.ckpt": <run dir>/predictions/test.csv
predict: $(STAMP)
	$(PY) scripts/predict.py $(ARGS)

# make export ARGS="ckpt_path=<run dir>/checkpoints/best.ckpt": <run dir>/export/
export: $(STAMP)
	$(PY) scripts/export.py $(ARGS)

# make serve: the export under logs/ whose manifest.json was written last (ARGS="port=8080" ...);
# make serve ARGS="artifact=<run dir>/export" serves another one.
serve: $(STAMP)
	$(PY) scripts/serve.py artifact=latest $(ARGS)

# make schema: a JSON Schema per config group in .schemas/ (generated, not committed), which
# .vscode/settings.json maps to conf/<group>/*.yaml for the YAML extension; ARGS="<config dir>"
# adds a search dir of your own. Run it again after adding a class or a group.
schema: $(STAMP)
	$(PY) scripts/schema.py $(ARGS)

# make upgrade TEMPLATE=<git url or path> REF=<tag|branch|commit>: merge a later release of the
# template into this clone with git (docs/upgrading.md); needs git and python3, not the venv.
upgrade:
	@$(PYTHON) scripts/upgrade.py "$(TEMPLATE)" "$(REF)"
