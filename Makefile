# fedcli: `make install` creates or updates .venv with everything; `make test` runs the test suite.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Ignore machine-local wheel folders and pip config: the supported torch is the PyPI build that
# torchvision is built against (a CPU-only local torch wheel cannot import torchvision).
PIPENV := PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null
CERT   := $(firstword $(wildcard /etc/ssl/certs/ca-certificates.crt))
PIPFLAGS := $(if $(CERT),--cert $(CERT),)

.PHONY: install install-bench install-mutation mutation test style test-long test-slow test-all docs paper-check bench bench-scale bench-trackers bench-help bench-gpu gpu-check gpu-paper precision-check clean smoke-table3 reproduce reproduce-fedlama reproduce-fedlamb reproduce-fedala

install:
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIPENV) $(PY) -m pip install $(PIPFLAGS) --disable-pip-version-check -q -e ".[mpi,test,trackers,postgres]"
	@$(PY) -c "import torch, torchvision, mpi4py; print('fedcli install ok: torch', torch.__version__, '| torchvision', torchvision.__version__, '| mpi4py', mpi4py.__version__)"
	@$(PY) -c "import importlib.metadata as m; print('trackers:', ', '.join(p + ' ' + m.version(p) for p in ('tensorboard', 'mlflow-skinny', 'wandb')))"
	@$(PY) -c "import psycopg; print('postgres driver: psycopg', psycopg.__version__)"
	@test -x $(VENV)/bin/mpiexec && echo "mpiexec: $(VENV)/bin/mpiexec"
	@$(PY) -m compileall -q fedcli >/dev/null  # fedcli's bytecode, also where PYTHONDONTWRITEBYTECODE is set (0.2 s a command)
	@$(PY) -m pytest --collect-only -q -p no:cacheprovider >/dev/null  # the tests' rewritten asserts, kept (tests/conftest.py)

# `make test` runs on TEST_WORKERS pytest-xdist workers (the `test` extra; without xdist, in one process): the tests
# spend much of their time waiting for subprocesses, Slurm and signals, which the other worker fills. --dist loadfile:
# a file's tests run on one worker, one after another (the Slurm tests share one queue; a README command reads what
# an earlier one wrote). (--dist loadgroup would group finer, but pytest-xdist 3.8 cannot tag pytest 9's test ids.)
# --no-loadscope-reorder: the files go out in the order tests/conftest.py gives them (the longest first), not
# pytest-xdist's default of the most tests first
TEST_WORKERS ?= 2
XDIST = $(shell $(PY) -c "import xdist" 2>/dev/null && echo "-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder")

test:
	$(PY) -m pytest -q -m "not slow and not long" $(XDIST)

# the style gate alone (tests/test_style.py runs it, with the function-length and parameter checks, in `make test`);
# `ruff format` and `ruff check --fix` fix most of what it finds (docs/development.md, "The style gate")
style:
	$(VENV)/bin/ruff check fedcli tests scripts
	$(VENV)/bin/ruff format --check fedcli tests scripts

# the tests marked long: each says why beside it (most: a second real Slurm job, tracker or signal path whose point
# `make test` holds in another test); CI (.ci/run) runs them after `make test`
test-long:
	$(PY) -m pytest -q -m "long and not slow" $(XDIST)

test-slow:
	$(PY) -m pytest -q -m slow

test-all:
	$(PY) -m pytest -q

# the documentation site (mkdocs.yml: the pages of docs/) into site/; --strict: a broken link or anchor fails
docs:
	$(PY) -m mkdocs build --strict --site-dir site

# every recipe entry at --scale paper, budget cut to one round, on generated data in each loader's real format
# (tests/paperkit.py): the table (entry, outcome, seconds) on stdout and in results/paper-check.md; PAPER_CHECK_ARGS=
# "--only aaai-table2 --limit 20" narrows it, "--skip-ok results/paper-check.md" leaves out what passed. All 637
# entries: 7,228 s of entry time on the 2-core VM, about 2 hours in one process, 1 hour as --shard 0/2 and 1/2 side by
# side (docs/paper-check.md).
paper-check:
	$(PY) tests/paperkit.py $(PAPER_CHECK_ARGS)

# Flower's simulation (flwr[simulation], with Ray) for `make bench`; without it the bench skips Flower with a note.
# flwr pins older rich/typer releases (fedcli works with them).
install-bench: install
	$(PIPENV) $(PY) -m pip install $(PIPFLAGS) --disable-pip-version-check -q -e ".[mpi,test,bench]"
	@$(PY) -c "import flwr, ray; print('bench extra ok: flwr', flwr.__version__, '| ray', ray.__version__)"

# Mutation testing (cosmic-ray) of the modules with the papers' arithmetic: the schedules and FedLAMA's, the lr schedule,
# the ledger, FedALA's, the adaptive family's (shared steps, Fed-LAMB, Fed-AMS, Mime-LAMB, Mime, FedAdam), FedProx's, the
# server updates, the per-client state; each mutant against its tests, in a copy of the repository (checked to pass
# unmutated first); kill rate per module and survivors in results/mutation/. Not run by CI; about 5 minutes per module
# on 2 cores.
# MUTATION_ARGS="--only schedules lr_schedule --max 40 --before REV" narrows it or adds the kill rate of REV's tests.
install-mutation: install
	$(PIPENV) $(PY) -m pip install $(PIPFLAGS) --disable-pip-version-check -q -e ".[mpi,test,mutation]"

mutation:
	$(PY) scripts/mutation.py $(MUTATION_ARGS)

# fedcli vs the per-client loop, Flower's simulation and the bound (a few minutes on 2 cores); table on stdout,
# progress on stderr, JSON in results/bench-cpu.json. FLOWER_PYTHON=path: an interpreter with flwr[simulation].
bench:
	$(PY) -m fedcli bench --json results/bench-cpu.json $(if $(FLOWER_PYTHON),--flower-python $(FLOWER_PYTHON),)

# client count and process count: peak memory of the process tree, client-state disk, s/round (Ditto, 1,000 and
# 10,000 synthetic clients, 1 process and mpiexec -n 2) and the start-up of `fedcli train`; JSON in results/
bench-scale:
	$(PY) -m fedcli bench --scale --json results/bench-scale.json

# the whole `fedcli train` command with and without --tracker tensorboard --tracker mlflow, alternately, 5 times each
# (about 2 minutes on 2 cores): one line per run, the medians and their ratio; JSON in results/bench-trackers.json
bench-trackers:
	$(PY) scripts/bench_trackers.py --json results/bench-trackers.json $(BENCH_TRACKERS_ARGS)

# `fedcli train --help` drawn by fedcli's panel renderer against Typer's rich renderer (FEDCLI_RICH_HELP=1), alternately,
# 7 times each, and the import alone (about half a minute on 2 cores): one line per run, the medians and their ratio
bench-help:
	$(PY) scripts/bench_help.py --json results/bench-help.json $(BENCH_HELP_ARGS)

# the checks that need a CUDA device (CI has none): GPU tests, every preset on cuda, cpu vs cuda, MPI ranks on the GPUs,
# the automatic cohort chunk; a few minutes; logs in gpu-check-logs/ (scripts/gpu-check.sh)
gpu-check:
	PY=$(PY) scripts/gpu-check.sh

# The GPU bench (docs/gpu-speed.md): fedcli's cohort step against the bare torch.func vmap step and a plain loop, fp32
# and bf16, ops and kernels per iteration, 1/2/4 runs per GPU; a few minutes on one GPU; JSON in results/bench-gpu.json
bench-gpu:
	PY=$(PY) scripts/bench-gpu.sh

# CUDA at paper scale (docs/gpu-speed.md): one recipe entry per dataset x model family and per method family at
# --scale paper, fp32 and bf16, 3 rounds each, on data in the real on-disk formats (tests/paperdata.py); a table of
# s/round, peak GPU memory and the first evaluation in results/gpu-paper.md; at most 8 minutes on one H100.
# DEVICE=cpu: the quick cut, one round (its harness's test in make test: tests/sweep/test_gpu_paper.py)
DEVICE ?= cuda
gpu-paper:
	$(PY) scripts/gpu_paper.py --device $(DEVICE) $(if $(filter cpu,$(DEVICE)),--quick --rounds 1,) $(GPU_PAPER_ARGS)

# bf16 against fp32 (docs/gpu-speed.md): the FEMNIST CNN on the LEAF sample and ResNet20 on CIFAR-10-format data, a
# fixed budget each, same seed, curves side by side with the tolerance and a verdict in results/precision-check.md;
# DEVICE=cpu: the short budget (make test-long runs it: tests/engine/test_precision_check.py)
precision-check:
	$(PY) scripts/precision_check.py --device $(DEVICE) $(if $(filter cpu,$(DEVICE)),--short,) $(PRECISION_CHECK_ARGS)

# FedLAMA AAAI Table 3 at smoke scale (LEAF sample beside the repo, 3 seeds, a few minutes on 2 cores),
# then the table and its figures; a second run skips the completed runs
smoke-table3:
	$(PY) -m fedcli sweep recipes/fedlama/aaai-table3.toml --scale smoke --seeds 3 --jobs 2
	$(PY) -m fedcli report results/aaai-table3-smoke --table aaai-table3 --figures results/aaai-table3-smoke/figures

# FedLAMA's AAAI Table 3 claim (phi = 2) on the FEMNIST LEAF sample beside the repo with the real CNN, 2 seeds
# (about 20 minutes on 2 idle cores): runs, table, claim check and figures in results/reproduce/fedlama/
REPRO_FEDLAMA := results/reproduce/fedlama
reproduce-fedlama:
	$(PY) -m fedcli sweep recipes/fedlama/reproduce-femnist.toml --scale cpu --seeds 2 --jobs 2 --out $(REPRO_FEDLAMA)/runs
	$(PY) -m fedcli report $(REPRO_FEDLAMA)/runs --table reproduce-femnist --format md > $(REPRO_FEDLAMA)/table.md
	$(PY) scripts/fedlama_claim.py $(REPRO_FEDLAMA)/runs $(REPRO_FEDLAMA)/claim.md
	$(PY) -m fedcli report $(REPRO_FEDLAMA)/runs --figures $(REPRO_FEDLAMA)/figures

# Fed-LAMB claim (c), "Fed-LAMB reaches a target accuracy in fewer rounds than Fed-AMS", on the MNIST test split
# beside the repo (cpu scale, about 10 min on 2 cores): tables, figure and the command in results/reproduce/fedlamb/
FEDLAMB_OUT   := results/reproduce/fedlamb
FEDLAMB_SWEEP := $(FEDLAMB_OUT)/runs
reproduce-fedlamb:
	@mkdir -p $(FEDLAMB_OUT)
	$(PY) -m fedcli sweep recipes/fedlamb/claim-rounds-to-target.toml --scale cpu --jobs 2 --out $(FEDLAMB_SWEEP) || test $$? -eq 4  # 4: diverged runs, a result the report counts
	$(PY) -m fedcli report $(FEDLAMB_SWEEP) --table claim-c-rounds-to-90 > $(FEDLAMB_OUT)/rounds-to-90.md
	$(PY) -m fedcli report $(FEDLAMB_SWEEP) --table claim-c-accuracy > $(FEDLAMB_OUT)/accuracy.md
	$(PY) -m fedcli report $(FEDLAMB_SWEEP) --figures $(FEDLAMB_OUT)/figures

# FedALA's claim (b) on real data, the paper's way: MNIST (the test split beside the repo), pathological, PFLlib's
# pipeline, FedALA vs FedAvg-C (whose global model gives FedAvg's accuracy), 5 seeds x 10 rounds, paired t-test
# (recipes/fedala/reproduce-mnist-pfllib.toml; about 2,700 CPU-seconds, so about 25 minutes on 2 idle cores): runs,
# tables, claim check and figures in results/reproduce/fedala/pfllib/ (the earlier 2-seed evidence of
# recipes/fedala/reproduce-mnist-path.toml stays at the top of results/reproduce/fedala/)
REPRO_FEDALA := results/reproduce/fedala
reproduce-fedala:
	$(PY) -m fedcli sweep recipes/fedala/reproduce-mnist-pfllib.toml --scale cpu --jobs 2 --out $(REPRO_FEDALA)/pfllib/runs
	$(PY) -m fedcli report $(REPRO_FEDALA)/pfllib/runs --table reproduce-mnist-pfllib --output $(REPRO_FEDALA)/pfllib/table-best.md
	$(PY) -m fedcli report $(REPRO_FEDALA)/pfllib/runs --table reproduce-mnist-pfllib-final --output $(REPRO_FEDALA)/pfllib/table-final.md
	$(PY) scripts/fedala_claim.py $(REPRO_FEDALA)/pfllib/runs $(REPRO_FEDALA)/pfllib/claim.md
	$(PY) -m fedcli report $(REPRO_FEDALA)/pfllib/runs --figures $(REPRO_FEDALA)/pfllib/figures

# All three claims on the real data beside the repo, one after another (about 45 minutes on 2 idle cores)
reproduce: reproduce-fedlama reproduce-fedala reproduce-fedlamb

clean:
	rm -rf .pytest_cache build *.egg-info
