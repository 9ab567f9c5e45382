# Two entry points for a fresh machine with Python 3.11+ and git:
#   make run   - set up, create a demo workspace if none is given, run the daemon in the foreground
#   make test  - set up, then run the whole test suite
PYTHON ?= python3
VENV ?= .venv
WORKSPACE ?= demo-workspace
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "mnoted needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q mnoted
	@touch $(STAMP)

run: $(STAMP)
	@test -d "$(WORKSPACE)/.mnote" || $(BIN)/mnote init "$(WORKSPACE)"
	$(BIN)/mnoted --workspace "$(WORKSPACE)"

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check mnoted tests bench
	$(BIN)/ruff format --check mnoted tests bench
	$(BIN)/mypy

# Every benchmark, each printing its figures beside a baseline measured in the same run.
bench: $(STAMP)
	$(BIN)/python bench/core.py
	$(BIN)/python bench/commit.py
	$(BIN)/python bench/objects.py
	$(BIN)/python bench/exchange.py
	$(BIN)/python bench/watch.py --large
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/daemon.py --sizes 100,10000,100000
	$(BIN)/python bench/search.py --sizes 10000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
