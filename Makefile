# Loadline developer entry points. `make demo` and `make test` do all set-up themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALL_STAMP := $(VENV)/.loadline-installed
PYTEST_ARGS ?=
IMAGE ?=
PUSH ?=

.PHONY: help demo env test lint unit integration components image cluster cluster-down crds bench clean fuzz

help:
	@echo "make demo          local cluster (this machine as a real node + kwok nodes), Loadline installed with helm, a story,"
	@echo "                   and Prometheus on 127.0.0.1 scraping every Loadline component with the chart's rules"
	@echo "make env           the line to eval so kubectl, helm and loadline talk to the demo cluster"
	@echo "make test          lint + unit + integration tests against real Kubernetes components"
	@echo "make cluster       start a local cluster and print its KUBECONFIG; make cluster-down stops it (and make demo's)"
	@echo "make fuzz         hostile-input fuzzing on a real API server, 2,000 examples (LOADLINE_FUZZ_EXAMPLES=n),"
	@echo "                  and 3,000 generated clusters against the real kube-scheduler (LOADLINE_DIFF_CASES=n,"
	@echo "                  LOADLINE_DIFF_SEED=n; a random seed by default, printed)"
	@echo "make components    build kube-apiserver, kube-scheduler, kubelet, kube-controller-manager, kubectl, etcd, helm, kwok into the cache"
	@echo "make image         build Loadline's image from the Dockerfile (buildah, offline) into an OCI archive;"
	@echo "                   IMAGE=registry.example.com/loadline:0.2.0 names it, PUSH=1 pushes it there"
	@echo "make crds          regenerate deploy/crds from common/api/crdgen/"

$(INSTALL_STAMP): pyproject.toml setup.py agent/collectors/_cgread.c
	@echo "==> [setup] virtualenv $(VENV) with Loadline and its dev tools"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --progress-bar off --upgrade pip >/dev/null
	@$(PY) -m pip install --progress-bar off -e '.[dev]' 2>&1 | grep -E '^(Collecting|Successfully|ERROR)' || true
	@$(PY) -c 'import common.api.nodemetric' || { echo "installation failed"; exit 1; }
	@touch $@

components: $(INSTALL_STAMP)
	@echo "==> [setup] Kubernetes components (built from the Go module proxy once, then cached)"
	@$(PY) -m tests.harness.build
	@echo "==> [setup] Koordinator v1.8.0 koord-scheduler, koord-descheduler, koord-manager (the peer; built once, cached)"
	@$(PY) -m tests.harness.koordbuild
	@echo "==> [setup] promtool and prometheus (Debian's prometheus package: checking /metrics, the tests' and the demo's Prometheus)"
	@$(PY) -m tests.harness.promtool >/dev/null

image: $(INSTALL_STAMP)
	@echo "==> [setup] Loadline image from the Dockerfile (buildah; rebuilt only when the package changes)"
	@$(PY) -m tests.harness.image $(if $(IMAGE),--name $(IMAGE)) $(if $(PUSH),--push)

lint: $(INSTALL_STAMP)
	@echo "==> [lint] ruff"
	@$(PY) -m ruff check .
	@echo "==> [lint] mypy (strict) on common, agent, manager, scheduler_plugin and the test harness"
	@$(PY) -m mypy
	@echo "==> [lint] deploy/crds matches its generator"
	@$(PY) -m common.api.crdgen --check

test: lint components image
	@echo "==> [test] pytest: unit tests and integration tests on a real kube-apiserver"
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest ran no tests"; exit 1; fi; exit $$rc

unit: $(INSTALL_STAMP)
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: components image
	@$(PY) -m pytest tests/integration $(PYTEST_ARGS)

fuzz: components
	@LOADLINE_FUZZ_EXAMPLES=$${LOADLINE_FUZZ_EXAMPLES:-2000} \
	  LOADLINE_DIFF_CASES=$${LOADLINE_DIFF_CASES:-3000} LOADLINE_DIFF_SEED=$${LOADLINE_DIFF_SEED:-random} \
	  $(PY) -m pytest tests/integration/test_fuzz_hostile_input.py tests/integration/test_differential_scheduling.py \
	  -s $(PYTEST_ARGS)

cluster: components
	@$(PY) -m tests.harness cluster up

cluster-down: $(INSTALL_STAMP)
	@$(PY) -m tests.harness cluster down

demo: components image
	@$(PY) -m tests.harness cluster up --with-loadline

env: $(INSTALL_STAMP)
	@$(PY) -m tests.harness.demo env

crds: $(INSTALL_STAMP)
	@$(PY) -m common.api.crdgen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
