# Developer entry points. `make setup test` does everything on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
export CRI_RESMGR_DEV_CACHE ?= $(HOME)/.cache/cri-resmgr-dev

.PHONY: setup venv tools demo test test-unit test-integration test-main test-landscape test-explore lint bench bench-relay bench-policy bench-nri bench-install bench-extension clean

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

# The main job: enable -> pinned pod -> config change -> disable on the local landscape
# (real kubelets, real gardener-resource-manager; gardenlet played). DEMO_ARGS=--keep keeps it running.
demo: venv tools build-images
	$(PY) hacks/demo.py --images-dir $(IMAGES_DIR) $(DEMO_ARGS)

# The landscape alone, left running for kubectl (hacks/landscape.py env prints how to reach it).
.PHONY: landscape-up landscape-down bench-landscape
landscape-up: venv tools build-images
	$(PY) hacks/landscape.py up --keep --images-dir $(IMAGES_DIR)

landscape-down: venv
	$(PY) hacks/landscape.py down

bench-landscape: venv tools
	$(PY) -m pytest -s -p no:cacheprovider -o addopts="" test/bench/bench_landscape.py

# A real gardenlet installs the extension: garden API + gardener-apiserver + gardener-controller-manager + gardenlet
# on their own landscape; prints controllerinstallation_healthy_s (docs/development/current-gardener.md section 5).
.PHONY: test-controller-installation
test-controller-installation: venv
	$(call run_pytest,-s test/e2e/local/test_controller_installation.py)

# pytest exits 5 when it collected nothing; a run that tests nothing is a failure.
PYTEST = $(PY) -m pytest
define run_pytest
	$(PYTEST) $(1); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc
endef

# Every tier in one pytest session, on parallel workers (pytest-xdist): the two landscape groups of
# test/fixtures/workers.py, each on a worker with a landscape of its own, and every other test file on the rest, all at
# once (the landscape tier mostly waits, the others mostly compute). Landscape files first, so the groups start at once.
# The JUnit report has every test's duration.
TEST_WORKERS ?= 4
test: venv
	$(call run_pytest,-n $(TEST_WORKERS) --no-loadscope-reorder $(PYTEST_ARGS) --junitxml=_out/junit.xml test/e2e test/unit test/integration)

test-unit: venv
	$(call run_pytest,test/unit)

# Tiers (test/fixtures/tiers.py; each test carries its tier's marker): unit (pyproject's testpaths, so a bare
# `pytest` runs only the fast tier), integration, landscape (test/e2e/local), e2e (a real Gardener).
# Two halves, split by wall time rather than by tier, for CI as two jobs (.ci/run main | .ci/run landscape) on two
# machines: the landscape half is the scenarios on the shared landscape; the landscape-tier test that starts a
# landscape of its own (a garden whose real gardenlet makes the ControllerInstallation) runs at the end of the other
# half.
OWN_LANDSCAPE_TESTS := test/e2e/local/test_controller_installation.py
MAIN_HALF := test/unit test/integration test/e2e/gardener $(OWN_LANDSCAPE_TESTS)
LANDSCAPE_HALF := test/e2e/local $(foreach t,$(OWN_LANDSCAPE_TESTS),--deselect=$(t))
test-main: venv
	$(call run_pytest,$(PYTEST_ARGS) $(MAIN_HALF))

test-landscape: venv
	$(call run_pytest,$(PYTEST_ARGS) $(LANDSCAPE_HALF))

test-integration: venv
	$(call run_pytest,test/integration)

# Property tests with random seeds and EXPLORE_FACTOR (default 10) times the examples. CI runs
# them derandomized (CI=true -> hypothesis profile "ci"); this is how new failures are found.
# The whole run is reproducible with the seed it prints: make test-explore SEED=<n>.
test-explore: venv
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "test-explore: hypothesis seed $$seed (reproduce: make test-explore SEED=$$seed)"; \
	HYPOTHESIS_PROFILE=explore $(PYTEST) -m property -p no:cacheprovider --hypothesis-seed=$$seed test/unit test/integration $(EXPLORE_ARGS); \
	rc=$$?; echo "test-explore: seed $$seed, exit $$rc"; if [ $$rc -eq 5 ]; then echo "no property tests collected" >&2; exit 1; fi; exit $$rc

lint: venv
	$(VENV)/bin/ruff check .

# Static pattern rule: make never applies implicit (%) rules to .PHONY targets. A benchmark runs longer
# than a test (bench-policy: 9 policies x 2000 decisions); its bound is an hour, not pytest's 600 s.
# bench-relay measures what a node runs: the unpacked build (_out/bin/cri-resmgr.dir/, which the bench brings up
# to date itself with hacks/build-executable.sh, as build-exe does) on containerd 2 (setup step containerd2).
# RELAY_BENCH_EXE=onefile measures the one-file build (its bootloader counts in every RSS figure),
# RELAY_BENCH_EXE=venv the venv's cri-resmgr instead,
# CRI_RESMGR_TEST_CONTAINERD=debian Debian's containerd 1.6. The summary line says which (build=..., containerd=...).
# RELAY_BENCH_BASELINE=<commit> also measures that commit's build in the same run (a second summary line).
bench-relay bench-policy bench-nri bench-install bench-extension: bench-%: venv
	$(PY) -m pytest -s -p no:cacheprovider -o addopts="" --timeout=3600 test/bench/bench_$*.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Our own gRPC APIs (resmgr/proto/*.proto): regenerate the committed stubs, or check they are current.
PROTOS := resmgr/proto/config.proto resmgr/proto/agent.proto resmgr/nri/api.proto resmgr/nri/ttrpc.proto

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

# Container images; no Docker daemon anywhere:
#   build-images             daemonless docker-archive tars (hacks/build-images.py) in $(IMAGES_DIR)
#   build-dockerfile-images  the Dockerfile's two targets built with buildah (hacks/build-dockerfile-images.py)
#                            as docker-archive tars in $(DOCKERFILE_IMAGES_DIR); cached by content hash
#   push-images              skopeo copy of the $(IMAGES_FROM) tars into the local registry on $(LOCAL_REGISTRY)
#                            (started from _out/registry if nothing answers), which mirrors $(REGISTRY) for nodes;
#                            PUSH_MIRROR= pushes to $(REGISTRY) itself instead (a real registry: `skopeo login` first)
#   registry-start / registry-stop   the local registry alone (hacks/registry.py)
REGISTRY ?= europe-docker.pkg.dev/gardener-project/public/gardener/extensions
TAG ?= v0.1.0
IMAGES_DIR ?= _out/images
DOCKERFILE_IMAGES_DIR ?= _out/images-dockerfile
IMAGES_FROM ?= dockerfile
LOCAL_REGISTRY ?= 127.0.0.1:5000
PUSH_MIRROR ?= $(LOCAL_REGISTRY)
PUSH_DIR = $(if $(filter dockerfile,$(IMAGES_FROM)),$(DOCKERFILE_IMAGES_DIR),$(IMAGES_DIR))

.PHONY: build-images build-dockerfile-images push-images registry-start registry-stop
build-images: build-exe
	python3 hacks/build-images.py --executable $(EXE) --output-dir $(IMAGES_DIR) --registry $(REGISTRY) --tag $(TAG)

# Base images come from the rootfs `make setup` debootstraps, helm from its cache.
build-dockerfile-images: tools
	python3 hacks/build-dockerfile-images.py --output-dir $(DOCKERFILE_IMAGES_DIR) --registry $(REGISTRY) --tag $(TAG)

push-images: $(if $(filter dockerfile,$(IMAGES_FROM)),build-dockerfile-images,build-images)
	python3 hacks/registry.py push $(if $(PUSH_MIRROR),--address $(PUSH_MIRROR) --ensure-running,--no-mirror) \
	  --registry $(REGISTRY) --tag $(TAG) $(PUSH_DIR)/extension.tar $(PUSH_DIR)/installation.tar

registry-start:
	python3 hacks/registry.py start --address $(LOCAL_REGISTRY)

registry-stop:
	python3 hacks/registry.py stop
