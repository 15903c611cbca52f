"""FedAvg (McMahan et al., AISTATS 2017): local SGD, periodic full averaging every tau iterations.

Alias ``fedsgd``: FedAvg with local SGD, the Fed-SGD baseline of Fed-LAMB (Karimi et al.).

No per-method defaults: FedAvg's paper tunes its learning rate, batch size and local epochs per task, and fedcli's
general defaults are the setting of FedLAMA, whose baseline this is (it learns on them: tests/test_presets_learn.py).
"""

from fedcli.specs import Method, register_method

register_method(
    Method(
        "fedavg",
        "local SGD + periodic full averaging every tau (McMahan et al. 2017)",
        aliases=("fedsgd",),
        label="FedAvg",
        style=("#4D4D4D", "o"),
        alias_labels={"fedsgd": "Fed-SGD"},
    )
)
