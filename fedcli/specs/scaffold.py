"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/scaffold.py``.
"""

from fedcli.specs import Cost, Method, part, register_method

#: its cost: no extra passes (the correction c - c_i is added to the gradient); c down and c_i+ - c_i up, one copy of
#: the model's size each, per client and round
STEP = part(
    "local_step",
    "scaffold",
    "fedcli.fl.algorithms.scaffold:ScaffoldStep",
    base="sgd",
    cost=Cost(
        down=1,
        up=1,
        source="SCAFFOLD (Karimireddy et al., ICML 2020), Algorithm 1: (x, c) down, (Delta y_i, "
        "Delta c_i) up; option II's c_i+ needs no gradient (bytes only)",
    ),
)


register_method(
    Method(
        "scaffold",
        "local SGD corrected by control variates, option II (Karimireddy et al. 2020); --server-lr",
        local_step="scaffold",
        server="server-lr",
        label="SCAFFOLD",
        style=("#17BECF", ">"),
    )
)
