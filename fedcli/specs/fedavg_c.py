"""FedAvg-C (FedALA's baseline, Zhang et al. AAAI 2023, Table 2): FedAvg whose clients fine-tune the global
model locally each round and are judged by those fine-tuned models: each client's model after the round's
local training, on its local test split (``personal_acc``; ``fedcli.fl.personal``). The global model and the
communication are FedAvg's (``--algo fedavg --init ala --ala-layers 0`` is the same run, tested).
"""

from fedcli.specs import Method, register_method

register_method(
    Method(
        "fedavg-c",
        "FedAvg, each client's locally fine-tuned model evaluated on its local test split (FedALA's baseline)",
        personalized=True,
        label="FedAvg-C",
        style=("#A6A6A6", "o"),
    )
)
