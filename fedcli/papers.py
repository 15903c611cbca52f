"""The papers this repository's recipes reproduce (``recipes/<method>/*.toml``, each stating its ``paper``), for
``fedcli report DIR --paper NAME`` (fedcli/reports/paper.py). A declaration: no imports, no torch."""

#: the papers the recipes reproduce, for ``fedcli report --paper NAME``: NAME -> (the paper as a report section names
#: it, the start of the ``paper`` string its recipes state, or a tuple of such starts)
PAPERS = {
    "fedlama-aaai": ("FedLAMA (AAAI 2023)", "FedLAMA AAAI 2023"),
    "fedlama-arxiv": ("FedLAMA (arXiv / ICLR 2022 submission, full version)", "FedLAMA arXiv/ICLR"),
    "fedlama-iclr": ("FedLAMA (ICLR 2022 submission)", "FedLAMA ICLR 2022"),
    "fedala-aaai": ("FedALA (AAAI 2023)", "FedALA AAAI 2023"),
    "fedlamb": ("Fed-LAMB (Karimi, Li, Li)", "Fed-LAMB"),
    # recipes/system/: the papers' methods on fedcli's system model (simulated time: docs/system-model.md)
    "system": (
        "Simulated time on fedcli's system model (FedLAMA vs FedAvg over uplink bandwidths; FedProx's stragglers)",
        (
            "FedLAMA (Lee et al., AAAI 2023) on fedcli's system model",
            "FedProx (Li et al., MLSys 2020), Section 5.2 and Figure 1, on fedcli's system model",
        ),
    ),
}
