"""FedALA (Zhang et al., AAAI 2023): FedAvg whose clients start each round from ALA, the adaptive local
aggregation of the global model and their own old local model (``fedcli.fl.algorithms.fedala``), and are judged by their
local models on their local test splits (``personal_acc``, ``fedcli.fl.personal``).

``--ala-layers`` p, ``--ala-sample-percent`` s, ``--ala-lr`` eta, ``--ala-threshold``, ``--ala-num-pre-loss``,
``--ala-max-passes``; their defaults are the appendix's (eta 1.0, s 80, p = 1 layer = 2 tensors) and the reference
code's (threshold 0.1). The preset's defaults are FedALA's setup (``fedcli.specs.PERSONALIZED_SETUP``: every
client every round, ``--batch-size 10``, ``--local-epochs 1`` with the reference loader's ``--drop-last``,
``--weighting samples``, 25% local test splits, ``--lr 0.1``, the paper's MNIST value; 0.005 for its 4-layer CNN
elsewhere); the paper's 20 clients and datasets are in recipes/fedala/. ``--init ala`` puts the same ALA on any other
method. Paper, reference code and fedcli side by side: docs/fidelity-fedala.md.

Its options, its part (the init ALA, which any method may take: ``--init ala``) and the preset (no torch); the
part is in ``fedcli/fl/algorithms/fedala.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Cost, Method, part, register_method
from fedcli.specs.parts import OVERWRITE


@register_params(section="ala")
class ALAParams:
    """Adaptive local aggregation (FedALA, Zhang et al., AAAI 2023, Eqs. 3-5, Algorithm 1)."""

    ala_layers: int = opt(
        2,
        "ALA range p: the last p parameter tensors get element-wise weights, lower ones are overwritten "
        "with the global model (2: the final Linear weight and bias; 0: no ALA, the plain overwrite).",
        lo=0,
        group="personalized",
        search={"choices": [2, 4, 6]},
    )
    ala_sample_percent: float = opt(
        80.0,
        "ALA: percent s of the client's training data the weights are learned on (a contiguous slice at a "
        "random offset).",
        lo=Open(0.0),
        hi=100.0,
        group="personalized",
        search={"choices": [5.0, 10.0, 20.0, 40.0, 80.0, 100.0]},
    )
    ala_lr: float = opt(
        1.0, "ALA weight learning rate eta.", lo=Open(0.0), group="personalized", search={"log": [0.1, 10.0]}
    )
    ala_threshold: float = opt(
        0.1,
        "ALA initial stage: passes repeat until the std of the last --ala-num-pre-loss pass losses is "
        "below this (reference code 0.1; the paper used 0.01).",
        lo=0.0,
        group="personalized",
    )
    ala_num_pre_loss: int = opt(
        10,
        "ALA initial stage: number of recorded pass losses the std is taken over (more than this many are needed).",
        lo=1,
        group="personalized",
    )
    ala_max_passes: int = opt(
        50, "ALA initial stage: at most this many passes (the reference code has no cap).", lo=1, group="personalized"
    )
    ala_trace: bool = opt(
        False,
        "Record FedALA's Figures 3 and 5 data: ala.csv (the loss of every weight-learning pass of every "
        "client) and local_loss.csv (per round and client, the training-split loss of the initialized and "
        "of the trained model); fedcli report draws them.",
        group="personalized",
    )


#: ALA wraps the method's own init (the engine builds it with ``base=``)
def ala_passes(g) -> int:
    """One pass of the weight learning over the client's s% slice (int(s/100 n_i) samples) a round: the rule of every
    round after a client's initial stage ("we train only one epoch for W_i^p when t > 2"); none with --ala-layers 0."""
    return int(g.params.ala_sample_percent / 100 * g.samples) if g.params.ala_layers > 0 else 0


def ala_weights(params, numels: list[int]) -> int:
    """W of the last ``--ala-layers`` p parameter tensors: their numel (FedALA Tables 1 and 6); 0 with p = 0."""
    return sum(numels[-params.ala_layers :]) if params.ala_layers > 0 else 0


#: its cost: ALA learns the element-wise weights W by gradient steps on s% of the local data before training (Eq. 5)
ALA = part(
    "init",
    "ala",
    "fedcli.fl.algorithms.fedala:ALAInit",
    base=OVERWRITE,
    Params=ALAParams,
    wraps_base=True,
    label="ALA",
    learned_weights=ala_weights,
    cost=Cost(
        round=ala_passes,
        source="FedALA (Zhang et al., AAAI 2023), Algorithm 1 and Eq. 5: W trained on s% of the local "
        "data, one epoch a round for t > 2 (the initial stage's repeated passes are not charged)",
    ),
)


register_method(
    Method(
        "fedala",
        "FedAvg + adaptive local aggregation (ALA) init, personalized (Zhang et al. 2023); --ala-*",
        init="ala",
        personalized=True,
        label="FedALA",
        style=("#009E73", "^"),
        search=("lr", "ala_lr", "ala_sample_percent", "ala_layers"),
    )
)  # the appendix's grid: eta, s, p
