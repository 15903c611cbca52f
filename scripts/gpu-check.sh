#!/usr/bin/env bash
# The checks that need a CUDA device (`make gpu-check`, or `PY=python3 scripts/gpu-check.sh` on a GPU machine whose
# python has torch, typer, rich, pandas and pytest): CI has no GPU, so these run by hand where one is lent.
#   1. the GPU tests that skip on a CPU-only machine (device placement, cohort chunks on CUDA, augmentation and the
#      quantizer on the device);
#   2. every preset learns with `fedcli train --algo X --device cuda` and no other flag (tests/test_presets_learn.py
#      with FEDCLI_TEST_DEVICE=cuda, its full-budget cases);
#   3. the default run on cuda against the same run on cpu: the accuracy per evaluation side by side (not bitwise:
#      other kernels, other rounding);
#   4. two MPI ranks on the visible GPUs (`mpiexec -n 2 ... --device cuda`): each rank's device in the manifest;
#   5. the automatic cohort chunk from the device's free memory (`--trainer vmap --cohort-chunk 0` on CUDA);
#   6. several runs on one GPU: a sweep of 4 tiny runs with --jobs 4 --runs-per-gpu 2, each run's GPU and peak memory
#      from its manifest, then --runs-per-gpu auto from that measured memory (the plan line in the log);
#   7. the GPU bench (scripts/bench-gpu.sh, `make bench-gpu`): the table in the log, JSON in results/bench-gpu.json.
# Writes a log per step to ${LOGS:-gpu-check-logs}/ and one line per step to stdout; exit 1 if any step failed.
# SKIP="NAME ..." leaves those steps out (e.g. SKIP=bench-gpu where the bench runs on its own).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PY=$(command -v "$PY")  # an absolute path: mpiexec's ranks may not see this shell's PATH (Open MPI ran /usr/bin/python3)
LOGS=${LOGS:-gpu-check-logs}
mkdir -p "$LOGS"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" FEDCLI_CACHE_DIR="${FEDCLI_CACHE_DIR:-$PWD/$LOGS/cache}"
# Open MPI (what a GPU machine's image often brings) refuses to start as root unless told twice; MPICH ignores these
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
failed=0
step() {  # step NAME COMMAND...: run, log, one line
    local name=$1; shift
    case " ${SKIP:-} " in *" $name "*) echo "skip  $name (SKIP)"; return 0 ;; esac
    local t0=$SECONDS
    if "$@" >"$LOGS/$name.log" 2>&1; then echo "ok    $name ($((SECONDS - t0)) s)"; else
        echo "FAIL  $name ($((SECONDS - t0)) s): $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ')"; failed=1; fi
}

$PY -c "import torch, sys; assert torch.cuda.is_available(), 'no CUDA device'; print('torch', torch.__version__, '|',
torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0), '| python', sys.version.split()[0])" || exit 1
XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n 4" || echo "")

step gpu-tests $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/engine/test_devices.py tests/data/test_augment.py \
    tests/comm/test_quantizer.py tests/comm/test_ordered_sum.py
step presets-learn-cuda env FEDCLI_TEST_DEVICE=cuda $PY -m pytest -q -p no:cacheprovider -o addopts="" $XDIST \
    tests/test_presets_learn.py -k "preset_learns and not quick"

cpu_vs_cuda() {
    for d in cpu cuda; do $PY -m fedcli train --device "$d" --quiet --out "$TMP/default-$d" || return 1; done
    $PY - "$TMP" <<'EOF'
import csv, sys
rows = {d: list(csv.DictReader(open(f"{sys.argv[1]}/default-{d}/metrics.csv"))) for d in ("cpu", "cuda")}
worst = 0.0
for a, b in zip(rows["cpu"], rows["cuda"]):
    print(f"round {a['round']:>4}  test_acc cpu {float(a['test_acc']):.4f}  cuda {float(b['test_acc']):.4f}")
    worst = max(worst, abs(float(a["test_acc"]) - float(b["test_acc"])))
print(f"largest |cpu - cuda| test_acc: {worst:.4f}")
assert len(rows["cpu"]) == len(rows["cuda"]) and worst < 0.05, "cpu and cuda runs part ways"
EOF
}
step default-cpu-vs-cuda cpu_vs_cuda

mpi_cuda() {
    local mpiexec
    mpiexec=$(command -v "$(dirname "$PY")/mpiexec" || command -v mpiexec || true)
    [ -n "$mpiexec" ] || { echo "SKIP: no mpiexec on this machine"; return 0; }
    timeout 300 "$mpiexec" -n 2 $PY -m mpi4py -m fedcli train --device cuda --dataset digits --model mlp --clients 4 \
        --rounds 2 --quiet --out "$TMP/mpi" || return 1
    $PY -c "import json, sys; m = json.load(open(sys.argv[1])); print(m['devices']); n = $($PY -c 'import torch; print(torch.cuda.device_count())');
assert [d['device'] for d in m['devices']] == ['cuda:%d' % (r % n) for r in range(2)], m['devices']" "$TMP/mpi/manifest.json"
}
step mpi-two-ranks-cuda mpi_cuda

auto_chunk() {
    $PY -m fedcli train --device cuda --trainer vmap --cohort-chunk 0 --algo fedavg --dataset digits --model mlp \
        --clients 20 --rounds 2 --quiet --out "$TMP/chunk" || return 1
    $PY -c "import json, sys; m = json.load(open(sys.argv[1])); print({k: m[k] for k in ('device', 'trainer', 'cohort_chunk')})
assert m['device'].startswith('cuda') and m['trainer'] == 'vmap'" "$TMP/chunk/manifest.json"
}
step auto-cohort-chunk-cuda auto_chunk

runs_per_gpu() {
    cat >"$TMP/tiny.toml" <<'EOF2'
title = "tiny"
seeds = 2
[base]
dataset = "digits"
model = "mlp"
clients = 8
iterations = 40
device = "cuda"
trainer = "vmap"
[[runs]]
name = "fedavg"
algo = "fedavg"
[[runs]]
name = "fedlama"
algo = "fedlama"
EOF2
    $PY -m fedcli sweep "$TMP/tiny.toml" --out "$TMP/sweep" --jobs 4 --runs-per-gpu 2 --progress none || return 1
    $PY - "$TMP/sweep" <<'EOF2' || return 1
import glob, json, sys
ms = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*/seed*/manifest.json"))]
for m in ms:
    print(m["devices"], "cuda_peak_bytes", m.get("cuda_peak_bytes"))
assert len(ms) == 4 and all(m["devices"][0]["device"].startswith("cuda") and m.get("cuda_peak_bytes") for m in ms)
EOF2
    $PY -m fedcli sweep "$TMP/tiny.toml" --out "$TMP/sweep" --seeds 4 --jobs 8 --dry-run 2>&1 | grep "devices:"
}
step sweep-runs-per-gpu runs_per_gpu

step bench-gpu env PY="$PY" scripts/bench-gpu.sh

rm -rf "$TMP"
exit $failed
