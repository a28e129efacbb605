# sjdbench developer commands. `make install` then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install install-cpu test test-all lint format docs docs-serve bench bench-batch study report-toy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	@echo "installed: activate with 'source $(VENV)/bin/activate' or call $(BIN)/sjdbench"

# Laptops without a GPU: torch's CPU-only wheels (PyPI's default torch bundles CUDA libraries), then
# the same editable install; pip keeps the CPU torch because it already satisfies the requirement.
install-cpu: $(BIN)/python
	$(BIN)/pip install --quiet torch torchvision --index-url $(TORCH_CPU_INDEX)
	$(BIN)/pip install --quiet -e ".[dev]"
	@echo "installed with CPU-only torch: call $(BIN)/sjdbench"

# tests run in TEST_WORKERS processes (pytest-xdist), one torch thread each
TEST_WORKERS ?= 2

test: $(BIN)/python
	@$(BIN)/python -c "import sjdbench, xdist" 2>/dev/null || $(MAKE) install
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not gpu"

test-all: $(BIN)/python
	@$(BIN)/python -c "import sjdbench, xdist" 2>/dev/null || $(MAKE) install
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not gpu"

# ruff (lint and format check) over the code, mypy over the package
lint: $(BIN)/python
	@$(BIN)/python -c "import ruff, mypy" 2>/dev/null || $(MAKE) install
	$(BIN)/ruff check sjdbench tests benchmarks scripts
	$(BIN)/ruff format --check sjdbench tests benchmarks scripts
	$(BIN)/mypy

# The documentation site (mkdocs.yml): built into site/ with --strict, so a broken link or anchor, a
# page missing from the navigation or a missing measured-table fragment fails; docs-serve rebuilds as
# you edit (http://127.0.0.1:8000). NO_MKDOCS_2_WARNING silences mkdocs-material's banner about its
# successor, which is no warning about these docs.
DOCS_ENV := NO_MKDOCS_2_WARNING=1

docs: $(BIN)/python
	@$(BIN)/python -c "import mkdocs, material, mkdocstrings" 2>/dev/null || $(MAKE) install
	$(DOCS_ENV) $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(BIN)/python
	@$(BIN)/python -c "import mkdocs, material, mkdocstrings" 2>/dev/null || $(MAKE) install
	$(DOCS_ENV) $(BIN)/mkdocs serve --strict

format: $(BIN)/python
	$(BIN)/ruff format sjdbench tests benchmarks scripts
	$(BIN)/ruff check --fix sjdbench tests benchmarks scripts

# Every preset at W = 16, 32, 64 against AR on the toy, interleaved prompt by prompt: step compression,
# paired latency speedup, share of wall time outside model forwards, machinery ms per iteration, and
# the cost of one W-token window forward in AR steps. BENCH_ARGS narrows it, e.g. BENCH_ARGS="--decoders sjd --windows 16".
bench: $(BIN)/python
	$(BIN)/python benchmarks/bench_decoders.py $(BENCH_ARGS)

# Throughput against batch size (AR and decoders at B = 1, 4, 8, 16, side by side in one process)
bench-batch: $(BIN)/python
	$(BIN)/python benchmarks/bench_batch.py $(BENCH_ARGS)

# The full toy study: every preset at W = 16 on 256 held-out captions, AR at seeds 0 and 1, eval and
# report, batched, in two worker processes; prints its wall and CPU time (about 40 minutes on 2 cores)
# and writes its quality table to docs/generated/study.md
study: $(BIN)/python
	@$(BIN)/python -c "import sjdbench" 2>/dev/null || $(MAKE) install
	$(BIN)/python scripts/study.py $(STUDY_ARGS)

report-toy: $(BIN)/python  # toy sweeps + scores + `sjdbench report`; refreshes the docs' toy report table and figures
	$(BIN)/python scripts/toy_report.py

clean:
	rm -rf $(VENV) build dist site *.egg-info
