# The commands people type. Each works from a fresh clone with Python >= 3.10 and pip.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.clpool-installed

.PHONY: install test check bench lint test-oclgrind clean

install: $(STAMP)

# PoCL from PyPI cannot compile for some CPUs (AMD Zen 5: no target; see RELIABILITY.md):
# when clpool verifies no device (a canary of every kernel, in a child process), add
# Intel's CPU OpenCL runtime from PyPI (the `intel` extra).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[pocl,test,dev]'
	$(BIN)/python -c 'import sys, clpool; sys.exit(not any(d.default for d in clpool.devices(verified=True)))' \
	  || $(BIN)/python -m pip install -q -e '.[pocl,intel,test,dev]'
	$(BIN)/clpool devices
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Every kernel under the Oclgrind simulator (apt-get install oclgrind): invalid accesses,
# data races and uninitialized reads fail the run. See RELIABILITY.md.
test-oclgrind: $(STAMP)
	$(BIN)/python -m pytest -q -m oclgrind

check: $(STAMP)
	$(BIN)/clpool check

bench: $(STAMP)
	$(BIN)/clpool bench

# mypy --strict (pyproject.toml's [tool.mypy]) on the package; the tests are not typed.
# clpool/torch.py is checked against torch's own types, so only where torch is installed
# (the extra "torch"; make install does not add it).
lint: $(STAMP)
	$(BIN)/ruff check clpool tests scripts
	$(BIN)/ruff format --check clpool
	@if $(BIN)/python -c 'import torch' 2>/dev/null; then \
	  echo "$(BIN)/mypy"; $(BIN)/mypy; \
	else \
	  echo "mypy: torch is not installed, so clpool/torch.py is not checked (pip install -e '.[torch]')"; \
	  $(BIN)/mypy --exclude 'clpool/torch\.py$$'; \
	fi

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache
