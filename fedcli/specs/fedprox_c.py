"""FedProx-C (FedALA's baseline, Zhang et al. AAAI 2023, Table 2): FedProx (``--mu``, default 0.001: FedALA's
appendix) whose clients are judged by their locally trained models on their local test splits (``personal_acc``),
as FedAvg-C is for FedAvg. Its other defaults are FedALA's setup (``fedcli.specs.PERSONALIZED_SETUP``).
"""

from fedcli.specs import Method, register_method

register_method(
    Method(
        "fedprox-c",
        "FedProx, each client's locally trained model evaluated on its local test split (FedALA's baseline); --mu",
        local_step="prox",
        personalized=True,
        defaults={"mu": 0.001},
        label="FedProx-C",
        style=("#C5B0D5", "<"),
    )
)  # FedALA appendix
