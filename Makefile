# fedcli: `make install` creates or updates .venv with everything; `make test` runs the test suite.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Ignore machine-local wheel folders and pip config: the supported torch is the PyPI build that
# torchvision is built against (a CPU-only local torch wheel cannot import torchvision).
PIPENV := PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null
CERT   := $(firstword $(wildcard /etc/ssl/certs/ca-certificates.crt))
PIPFLAGS := $(if $(CERT),--cert $(CERT),)

.PHONY: install test test-slow test-all bench clean smoke-table3 reproduce-fedala

install:
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIPENV) $(PY) -m pip install $(PIPFLAGS) --disable-pip-version-check -q -e ".[mpi,test]"
	@$(PY) -c "import torch, torchvision, mpi4py; print('fedcli install ok: torch', torch.__version__, '| torchvision', torchvision.__version__, '| mpi4py', mpi4py.__version__)"
	@test -x $(VENV)/bin/mpiexec && echo "mpiexec: $(VENV)/bin/mpiexec"

test:
	$(PY) -m pytest -q -m "not slow"

test-slow:
	$(PY) -m pytest -q -m slow

test-all:
	$(PY) -m pytest -q

bench:
	$(VENV)/bin/fedcli bench --json results/bench-cpu.json

# FedLAMA AAAI Table 3 at smoke scale (LEAF sample beside the repo, 3 seeds, a few minutes on 2 cores),
# then the table and its figures; a second run skips the completed runs
smoke-table3:
	$(PY) -m fedcli sweep recipes/fedlama/aaai-table3.toml --scale smoke --seeds 3 --jobs 2
	$(PY) -m fedcli report results/aaai-table3-smoke --table aaai-table3 --figures results/aaai-table3-smoke/figures

# FedALA's claim (b) on real data: MNIST (the test split beside the repo), pathological, FedALA vs FedAvg-C vs FedAvg
# (cpu scale, 2 seeds; 1,707 CPU-seconds, so about 15 minutes on 2 idle cores): runs, tables, claim check and figures in
# results/reproduce/fedala/
REPRO_FEDALA := results/reproduce/fedala
reproduce-fedala:
	$(PY) -m fedcli sweep recipes/fedala/reproduce-mnist-path.toml --scale cpu --seeds 2 --jobs 2 --out $(REPRO_FEDALA)/runs
	$(PY) -m fedcli report $(REPRO_FEDALA)/runs --table reproduce-mnist-path --output $(REPRO_FEDALA)/table-best.md
	$(PY) -m fedcli report $(REPRO_FEDALA)/runs --table reproduce-mnist-path-final --output $(REPRO_FEDALA)/table-final.md
	$(PY) scripts/fedala_claim.py $(REPRO_FEDALA)/runs $(REPRO_FEDALA)/claim.md
	$(PY) -m fedcli report $(REPRO_FEDALA)/runs --figures $(REPRO_FEDALA)/figures

clean:
	rm -rf .pytest_cache build *.egg-info
