"""FedALA (Zhang et al., AAAI 2023): FedAvg whose clients start each round from ALA, the adaptive local
aggregation of the global model and their own old local model (``fedcli.fl.ala``), and are judged by their
local models on their local test splits (``personal_acc``, ``fedcli.fl.personal``).

``--ala-layers`` p, ``--ala-sample-percent`` s, ``--ala-lr`` eta, ``--ala-threshold``, ``--ala-num-pre-loss``,
``--ala-max-passes``. The paper's setting: 20 clients, ``--active-ratio 1``, ``--batch-size 10``,
``--local-epochs 1``, ``--lr 0.005``, ``--client-test-fraction 0.25``, ``--weighting samples``
(recipes/fedala/). ``--init ala`` puts the same ALA on any other method.
"""

import fedcli.fl.ala  # noqa: F401  (registers the "ala" init part)
from fedcli.fl.methods import Method, register_method

register_method(Method("fedala", "FedAvg + adaptive local aggregation (ALA) init, personalized (Zhang et al. 2023); --ala-*",
                       init="ala", personalized=True))
