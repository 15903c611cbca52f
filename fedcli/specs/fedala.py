"""FedALA (Zhang et al., AAAI 2023): FedAvg whose clients start each round from ALA, the adaptive local
aggregation of the global model and their own old local model (``fedcli.fl.ala``), and are judged by their
local models on their local test splits (``personal_acc``, ``fedcli.fl.personal``).

``--ala-layers`` p, ``--ala-sample-percent`` s, ``--ala-lr`` eta, ``--ala-threshold``, ``--ala-num-pre-loss``,
``--ala-max-passes``; their defaults are the appendix's (eta 1.0, s 80, p = 1 layer = 2 tensors) and the reference
code's (threshold 0.1). The preset's defaults are FedALA's setup (``fedcli.specs.PERSONALIZED_SETUP``: every
client every round, ``--batch-size 10``, ``--local-epochs 1`` with the reference loader's ``--drop-last``,
``--weighting samples``, 25% local test splits, ``--lr 0.1``, the paper's MNIST value; 0.005 for its 4-layer CNN
elsewhere); the paper's 20 clients and datasets are in recipes/fedala/. ``--init ala`` puts the same ALA on any other
method. Paper, reference code and fedcli side by side: docs/fidelity-fedala.md.
"""

from fedcli.specs import Method, register_method


register_method(Method("fedala", "FedAvg + adaptive local aggregation (ALA) init, personalized (Zhang et al. 2023); --ala-*",
                       init="ala", personalized=True, label="FedALA", style=("#009E73", "^")))
