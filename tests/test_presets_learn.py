"""Every preset of ``fedcli train --list-algos`` runs as ``fedcli train --algo X`` with no other flag (only ``--out``
and ``--quiet``) on the default experiment (scikit-learn digits) and learns: its last evaluation is well above chance,
i.e. it closes at least half of the gap between chance and 100%.

- Traditional methods: ``test_acc``, the global model on the global test set; chance is the share of its most
  frequent class (about 10%: digits has 10 balanced classes).
- Personalized methods: ``personal_acc``, each client's model on its own local test split, pooled over all local test
  samples; chance is what always answering each client's most frequent local test class scores, pooled the same way
  (with non-IID clients far above 10%).

Aliases (``fedsgd``, ``adp-fed``) name the same preset object, so they are folded into their preset (tested) instead
of training the same run twice.

Two budgets. ``make test`` runs each preset at ``QUICK`` (but for the six of :data:`LONG_QUICK`, in ``make
test-long``): the same defaults with a smaller ``--iterations`` (and
APPLE on 8 clients instead of 16: its cost grows with the square of the clients, every client downloading every
core model), the least measured at which it still clears the same bar with room to spare; 4-5 times less than the
full budgets. The full default budgets (``fedcli train --algo X`` and nothing else, the README's claim) are the
``defaults`` cases, marked slow (``make test-all``): a few minutes in all, APPLE (1200 iterations) and pFedMe (K + 1 = 6
gradient evaluations per local step) the slowest. Between them, the golden records (tests/test_golden.py) pin every
preset's arithmetic bit for bit, so a change that would stop a preset learning at its full budget changes its
record.

``FEDCLI_TEST_DEVICE=cuda`` runs the same presets with ``--device cuda`` (``make gpu-check`` on a machine with a GPU).
"""

import json
import os
from collections import Counter

import pytest

from fedcli.cli.main import main
from fedcli.config import TrainConfig
from fedcli.data.setup import load_data_and_partition
from fedcli.recipes import build_config
from fedcli.specs import METHODS

PRESETS = sorted({m.name for m in METHODS.values()})
DEVICE = ["--device", os.environ["FEDCLI_TEST_DEVICE"]] if os.environ.get("FEDCLI_TEST_DEVICE") else []


def majority_rate(label_groups) -> float:
    """Pooled accuracy of answering each group's most frequent label: sum of the majority counts / all labels."""
    hits = sum(max(Counter(g).values()) for g in label_groups if len(g))
    return hits / sum(len(g) for g in label_groups)


def test_aliases_are_the_same_preset_with_the_same_defaults():
    aliases = {n: m.name for n, m in METHODS.items() if n != m.name}
    assert aliases == {"fedsgd": "fedavg", "adp-fed": "fedadam"}
    for alias, name in aliases.items():
        a, b = build_config(None, {"algo": alias}).to_dict(), build_config(None, {"algo": name}).to_dict()
        assert METHODS[alias] is METHODS[name] and {**a, "algo": name} == b


#: make test's budget per preset (flags added to the defaults): 150 local iterations (a quarter of the general 600)
#: unless a preset needs more. Margin above the bar measured at these budgets (torch 2.15.0+cu132, CPU; accuracy - bar):
#: traditional presets +0.29 to +0.42 (bar 0.551); personalized ditto +0.152, fedala +0.116, fedamp +0.099,
#: fedavg-c +0.118, fedphp +0.110, fedprox-c +0.118, fedrep +0.132, partialfed +0.104 (bar 0.735); fedfomo at 300
#: +0.116 (+0.051 at 150); pfedme at 300 +0.127 (below the bar at 150); perfedavg at its default 600 +0.090 (+0.006
#: at 300); apple 600 iterations on 8 clients +0.131 (bar 0.667; 16 clients at 600: +0.011); fedyogi +0.296 (0.847),
#: fedadagrad +0.318 (0.869).
QUICK = {
    **{name: ["--iterations", "150"] for name in PRESETS},
    "fedfomo": ["--iterations", "300"],
    "pfedme": ["--iterations", "300"],
    "perfedavg": [],
    "apple": ["--iterations", "600", "--clients", "8"],
}


#: the QUICK cases ``make test`` leaves to ``make test-long`` (the six dearest, 2-15 s of CPU each, together about
#: 60% of this file's): the method's learning is held in ``make test`` by its own unit test on a tiny task, and its
#: preset's defaults (its method's hyperparameters) by its golden record (test_golden.py, ``preset-NAME``) bit for bit
LONG_QUICK = {
    name: f"the {name} preset at QUICK (dear); {test} holds that {name} learns, test_golden.py's preset-{name} record "
    "pins its defaults' arithmetic bit for bit"
    for name, test in (
        ("pfedme", "tests/algorithms/test_pfedme.py::test_pfedme_learns_and_is_evaluated_on_theta"),
        ("fedfomo", "tests/algorithms/test_fedfomo.py::test_fedfomo_learns_and_splits_off_validation"),
        (
            "perfedavg",
            "tests/algorithms/test_perfedavg.py::test_perfedavg_learns_and_evaluates_one_step_from_the_global_model",
        ),
        ("fedrep", "tests/algorithms/test_personalized.py::test_fedavg_c_and_fedrep_learn"),
        ("mime", "tests/algorithms/test_adaptive.py::test_methods_learn_and_count_their_extra_transfers"),
        ("apple", "tests/algorithms/test_apple.py::test_apple_learns_and_downloads_every_core"),
    )
}


def budgets() -> list:
    """Each preset at QUICK (those of :data:`LONG_QUICK` marked long), and at its full default budget (slow: the golden
    records pin the same arithmetic, QUICK shows it learns)."""
    return [
        case
        for algo in PRESETS
        for case in (
            pytest.param(
                algo,
                QUICK[algo],
                id=f"{algo}-quick",
                marks=[pytest.mark.long(reason=LONG_QUICK[algo])] if algo in LONG_QUICK else [],
            ),
            pytest.param(algo, [], id=f"{algo}-defaults", marks=pytest.mark.slow),
        )
    ]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("algo,extra", budgets())
def test_preset_learns_on_its_defaults(algo, extra, tmp_path, capsys):
    out = tmp_path / "run"
    try:
        code = main(["train", "--algo", algo, *extra, *DEVICE, "--out", str(out), "--quiet"])
    except SystemExit as e:  # fedcli's one-line error and exit code
        code = e.code
    assert code == 0, f"--algo {algo} exited {code}: {capsys.readouterr().err.strip()}"
    man = json.loads((out / "manifest.json").read_text())
    cfg = TrainConfig(**man["config"])
    dataset, partition = load_data_and_partition(cfg)
    if METHODS[algo].personalized:
        acc = man["summary"]["final_personal_acc"]
        chance = majority_rate([dataset.train_y[list(ix)].tolist() for ix in partition.test])
    else:
        acc = man["summary"]["final_acc"]
        chance = majority_rate([dataset.test_y.tolist()])
    assert acc >= chance + (1.0 - chance) / 2, f"--algo {algo}: final accuracy {acc:.4f}, chance {chance:.4f}"
