# Every target works on a fresh clone: the first one run creates .venv and installs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STORE ?= sqlite
CORPUS ?= ../shared/datasets/msmarco-dev/corpus.jsonl

.PHONY: install run test lint bench clean

install: $(STAMP)

# torch first, pinned to the CPU build: anything later that wants torch is then satisfied
# instead of pulling the CUDA wheels.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

run: install
	$(BIN)/knowledge-api serve

test: install lint
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check knowledge_api tests scripts
	$(BIN)/mypy

bench: install
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk) || echo "wrk could not be installed: throughput figures are skipped"
	$(BIN)/python scripts/bench.py --store $(STORE) --corpus $(CORPUS)
	$(BIN)/python scripts/bench_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
