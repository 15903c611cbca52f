#!/usr/bin/env bash
# The GPU bench (`make bench-gpu`, or `PY=python3 scripts/bench-gpu.sh` on a GPU machine; docs/gpu-speed.md): for the
# FEMNIST CNN (FedAvg) and ResNet20 (FedLAMA AAAI Table 1's flags), 32 clients of batch 32, ms per iteration of fedcli's
# vmap and loop trainers in fp32 and bf16 against a bare torch.func vmap step and a plain per-client loop, top-level
# torch ops and GPU kernels per iteration, 1/2/4 runs at once on the GPU and the projected FedLAMA Table 1 wall time.
# Data: FEMNIST from $FEMNIST_DIR, else data/femnist-leaf-sample (a copy of the LEAF sample), else generated in LEAF's
# format; CIFAR-10 python pickles generated (the timings do not depend on the pixels). Table on stdout, JSON in
# ${JSON:-results/bench-gpu.json}. DEVICE=cpu runs the code paths on a CPU. Extra arguments go to `fedcli bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
FEMNIST=${FEMNIST_DIR:-}
if [ -z "$FEMNIST" ] && [ -d data/femnist-leaf-sample ]; then FEMNIST=data/femnist-leaf-sample; fi
if [ -z "$FEMNIST" ]; then  # 64 writers of 64 samples: 32 clients of 2 writers, each above a batch
    FEMNIST="$DATA/femnist"
    $PY -c "import sys; from tests.paperdata import write_femnist; write_femnist(sys.argv[1], writers=64, per_writer=64)" "$FEMNIST"
fi
$PY -c "import sys; from tests.paperdata import write_cifar10; write_cifar10(sys.argv[1], n_train=4000, n_test=200)" "$DATA/cifar10"
$PY -m fedcli bench --device "${DEVICE:-cuda}" --data-dir "$FEMNIST" --cifar-dir "$DATA/cifar10" --steps 10 \
    --json "${JSON:-results/bench-gpu.json}" "$@"
