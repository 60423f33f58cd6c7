# vsi-wild: the two commands a newcomer needs are `make run` and `make test`.
# Both set up .venv on first use (ffmpeg from Debian, torch from the local wheel cache, the
# project with its `models` and `dev` extras); later calls reuse it.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= configs/sample.yaml
DATA_ROOT ?= data/out
PYTEST_ARGS ?=
export HF_HUB_OFFLINE ?= 1
export YOLO_OFFLINE ?= 1

.PHONY: setup run test test-fast bench deploy clean help

help:            ## list the targets
	@grep -E '^[a-z-]+:.*##' Makefile | sed 's/:.*##/\t/'

$(BIN)/.installed: pyproject.toml
	@command -v ffmpeg >/dev/null || (apt-get update -qq && apt-get install -y -qq ffmpeg)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# torch first, pinned: pip finds this build on the local wheel cache (no multi-GB download here)
	$(BIN)/pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install -q -e ".[models,dev]"
	touch $@

setup: $(BIN)/.installed   ## create .venv with everything (idempotent)

run: setup       ## run the whole pipeline on the embedded sample (outputs under data/out)
	$(BIN)/vsi-wild run --config $(CONFIG) --data-root $(DATA_ROOT)

test: setup      ## the full test suite (what CI runs)
	$(BIN)/python -m pytest -ra $(PYTEST_ARGS)

test-fast: setup ## tests without the slow and model-heavy ones
	$(BIN)/python -m pytest -ra -m "not slow and not models" $(PYTEST_ARGS)

bench: setup     ## speed and memory ratios, each measured in one run (prints `name: value` lines)
	$(BIN)/python bench/run_all.py

clean:           ## remove outputs (keeps .venv)
	rm -rf data/out .pytest_cache
