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
DEPLOY_DIR ?= .deploy
DEPLOY_PORT ?= 4200
SETUP ?= setup  # `make run SETUP=` uses an existing $(VENV) as it is (the deployment tests do)
export HF_HUB_OFFLINE ?= 1
export YOLO_OFFLINE ?= 1
PIP_INSTALL = $(BIN)/pip install -q --no-cache-dir

.PHONY: setup run test lint lint-tree lint-imports test-fast bench gpu-check gpu-kit deploy deploy-stop clean help

help:            ## list the targets
	@grep -E '^[a-z-]+:.*##' Makefile | sed 's/:.*##/\t/'

# The venv takes ~9 GB (torch's CUDA build alone 5.5 GB); pip's download cache would add a second
# copy of every wheel fetched from the network, so it is off: a fresh CI disk ran out with it on.
$(BIN)/.installed: pyproject.toml
	@command -v ffmpeg >/dev/null && command -v chromium >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq ffmpeg chromium)  # chromium: the browser tests
	@echo "disk free before install: $$(df -h --output=avail "$(CURDIR)" | tail -1)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP_INSTALL) -U pip
	# torch first, pinned: pip finds this build on the local wheel cache (no multi-GB download here)
	$(PIP_INSTALL) torch==2.14.1 torchvision==0.29.1
	$(PIP_INSTALL) -e ".[models,cluster,dev]"
	touch $@

setup: $(BIN)/.installed   ## create .venv with everything (idempotent)

run: $(SETUP)    ## run the whole pipeline on the embedded sample (outputs under data/out)
	$(BIN)/vsi-wild run --config $(CONFIG) --data-root $(DATA_ROOT)

test: setup lint-imports lint ## the layering contracts, ruff and mypy, then the full test suite (what CI runs)
	$(BIN)/python -m pytest -ra $(PYTEST_ARGS)

# import-linter and mypy find a package's modules by walking its folder, but vsi_wild.stages, .tasks
# and .flows live beside vsi_wild/ (package-dir in pyproject.toml): they walk a tree of links laid out
# as installed, run from inside that tree (in the repository root ./vsi_wild would shadow it).
LINT_TREE := build/lint-imports
lint-tree: $(SETUP)
	rm -rf $(LINT_TREE) && mkdir -p $(LINT_TREE)/vsi_wild
	ln -s $(CURDIR)/vsi_wild/* $(LINT_TREE)/vsi_wild/
	for m in $$($(BIN)/python -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]; print(*(k.partition(".")[2] + "=" + v for k, v in d.items() if "." in k))'); do \
	  ln -s $(CURDIR)/$${m#*=} $(LINT_TREE)/vsi_wild/$${m%%=*}; done

lint-imports: lint-tree ## the import contracts of pyproject.toml's [tool.importlinter] (docs/architecture.md)
	cd $(LINT_TREE) && PYTHONPATH=. $(abspath $(BIN))/lint-imports --no-cache --no-logo $(CURDIR)/pyproject.toml

lint: lint-tree  ## ruff (lint + format check) over the repository, mypy over the package ([tool.ruff], [tool.mypy])
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd $(LINT_TREE) && MYPYPATH=. $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml \
	  --cache-dir $(CURDIR)/build/mypy-cache --python-executable $(abspath $(BIN))/python -p vsi_wild

test-fast: setup ## tests without the slow and model-heavy ones
	$(BIN)/python -m pytest -ra -m "not slow and not models" $(PYTEST_ARGS)

bench: setup     ## speed and memory ratios, each measured in one run (prints `name: value` lines)
	$(BIN)/python bench/run_all.py

# On the GPU machine, offline: each production backend on CUDA (real weights from models.weights_dir
# where present, random ones otherwise), fps, peak memory, video hours per GPU-hour; JSON in build/.
GPU_CHECK_ARGS ?=
gpu-check: $(SETUP) ## GPU speed/memory of each production backend (bench/gpu_check.py; build/gpu_check.json)
	YOLO_CONFIG_DIR=$${YOLO_CONFIG_DIR:-$(CURDIR)/build/yolo-config} $(BIN)/python bench/gpu_check.py $(GPU_CHECK_ARGS)

# The lent GPU machine has Python 3.12 and torch but none of our packages and no network: this puts
# the wheels bench/gpu_check_device.sh installs there into .whl/ (~10 MB; carry .whl with the call).
GPU_KIT_PLATFORMS = $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64,--platform $(p))
gpu-kit: $(SETUP) ## wheels for `make gpu-check` on the lent GPU machine (.whl/; then: bash bench/gpu_check_device.sh there)
	mkdir -p .whl
	grep -v '^#' bench/gpu_kit.txt | grep -v '^iopath' | grep . | xargs $(BIN)/pip download -q --no-deps --only-binary=:all: \
		--python-version 3.12 --implementation cp $(GPU_KIT_PLATFORMS) -d .whl
	grep '^iopath' bench/gpu_kit.txt | xargs $(BIN)/pip download -q --no-deps --no-binary=:all: -d .whl
	@du -sh .whl

deploy: $(SETUP) ## Prefect server on 127.0.0.1, work pools cpu/gpu, deployments, workers (docs/cluster.md)
	$(BIN)/python -m vsi_wild.deploy up --dir $(DEPLOY_DIR) --port $(DEPLOY_PORT)

deploy-stop:     ## stop everything `make deploy` started
	$(BIN)/python -m vsi_wild.deploy down --dir $(DEPLOY_DIR) --port $(DEPLOY_PORT)

clean:           ## remove outputs (keeps .venv)
	rm -rf data/out .pytest_cache
