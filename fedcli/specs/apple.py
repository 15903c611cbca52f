"""APPLE (Luo and Wu, IJCAI 2022, "Adapt to Adaptation: Learning Personalization for Cross-Silo Federated
Learning", Algorithm 1), as PFLlib implements it (``clientapple.py`` / ``serverapple.py``, the code FedALA's
Table 2 was produced with).

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/apple.py``.
"""

from fedcli.params import opt, register_params
from fedcli.specs import Cost, Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="apple")
class AppleParams:
    """APPLE's directed-relationship vector and core models (Luo and Wu, IJCAI 2022, Algorithm 1)."""

    apple_dr_lr: float = opt(
        0.01,
        "APPLE: learning rate eta_2 of the directed-relationship (DR) vector p_i (FedALA appendix: 0.01).",
        lo=0.0,
        group="personalized",
    )
    apple_mu: float = opt(
        0.1,
        "APPLE: coefficient mu of the proximal term lambda(t) * mu * (p_i - p0) on the DR vector (FedALA "
        "appendix: 0.1).",
        lo=0.0,
        group="personalized",
    )
    apple_l: float = opt(
        0.2,
        "APPLE: the 'cos' loss scheduler lambda(t) decays to 0 over the first L * rounds rounds (FedALA "
        "appendix: 0.2).",
        lo=0.0,
        hi=1.0,
        group="personalized",
    )
    apple_m: int = opt(
        0,
        "APPLE: number M of core models each client downloads per round; 0: all clients, M = N (FedALA "
        "appendix); N - 1: all but its own.",
        lo=0,
        group="personalized",
    )
    apple_upload: str = opt(
        "personal",
        "APPLE: what a client uploads as its core model: personal (its personalized model of the last "
        "batch, PFLlib's code) or core (its trained core model, the paper).",
        choices=["personal", "core"],
        group="personalized",
    )


#: (its cost: no extra passes, the personalized model is a weighted sum of the cores; its bytes, the M - 1 core
#: models each client downloads beside the global one, are its ledger records)
STEP = part(
    "local_step",
    "apple",
    "fedcli.fl.algorithms.apple:AppleStep",
    base=SGD,
    Params=AppleParams,
    full_participation=True,
    cost=Cost(source="APPLE (Luo and Wu, IJCAI 2022), Algorithm 1: M core models down per round (bytes only)"),
)


register_method(
    Method(
        "apple",
        "each client mixes all clients' core models with a learned DR vector per batch (Luo & Wu 2022); "
        "--apple-dr-lr, --apple-mu, --apple-l, --apple-m, --apple-upload",
        local_step="apple",
        personalized=True,
        # cross-silo: "FedAMP and APPLE ... require all clients to join each iteration" (FedALA, Related Work);
        # a longer budget than the general 600 iterations: see "Default budget" in the docstring
        defaults={"active_ratio": 1.0, "iterations": 1200},
        label="APPLE",
        style=("#F7B6D2", "D"),
    )
)
