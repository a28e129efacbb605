# sjdbench developer commands. `make install` then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install test test-all bench report-toy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	@echo "installed: activate with 'source $(VENV)/bin/activate' or call $(BIN)/sjdbench"

test: $(BIN)/python
	@$(BIN)/python -c "import sjdbench" 2>/dev/null || $(MAKE) install
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q -m "not slow and not gpu"

test-all: $(BIN)/python
	@$(BIN)/python -c "import sjdbench" 2>/dev/null || $(MAKE) install
	OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q -m "not gpu"

bench: $(BIN)/python
	$(BIN)/python benchmarks/bench_decoders.py

report-toy: $(BIN)/python  # toy sweeps + scores + `sjdbench report`; refreshes the README's table and figures
	$(BIN)/python scripts/toy_report.py

clean:
	rm -rf $(VENV) build dist *.egg-info
