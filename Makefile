# Developer entry points. `make setup test` does everything on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
export CRI_RESMGR_DEV_CACHE ?= $(HOME)/.cache/cri-resmgr-dev

.PHONY: setup venv tools demo test test-unit test-integration lint bench bench-relay bench-policy bench-install bench-extension clean

setup: venv tools

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "setup: $(PYTHON) not found (need Python >= 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip check
	touch $@

tools:
	bash hacks/setup-tools.sh

# The main job: a local seed API plus a systemd node, enable -> pinned pod -> disable.
demo: venv tools
	$(PY) hacks/demo.py

# pytest exits 5 when it collected nothing; a run that tests nothing is a failure.
PYTEST = $(PY) -m pytest
define run_pytest
	$(PYTEST) $(1); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc
endef

test: venv
	$(call run_pytest,)

test-unit: venv
	$(call run_pytest,test/unit)

test-integration: venv
	$(call run_pytest,test/integration)

lint: venv
	$(VENV)/bin/ruff check .

# Static pattern rule: make never applies implicit (%) rules to .PHONY targets.
bench-relay bench-policy bench-install bench-extension: bench-%: venv
	$(PY) -m pytest -s -p no:cacheprovider -o addopts="" test/bench/bench_$*.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Our own gRPC APIs (resmgr/proto/*.proto): regenerate the committed stubs, or check they are current.
PROTOS := resmgr/proto/config.proto resmgr/proto/agent.proto

.PHONY: proto proto-check
proto: venv
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

proto-check: venv
	$(PY) -m resmgr.proto.check

# Shipping: the single-file executable (cached by source hash) and the container images.
EXE ?= _out/bin/cri-resmgr

.PHONY: build-exe
build-exe: venv
	bash hacks/build-executable.sh $(EXE)
