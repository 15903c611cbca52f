"""FedPAQ (Reisizadeh et al., AISTATS 2020): periodic averaging of stochastically quantized updates.

Each client uploads Q_s(x_i - u) per layer (QSGD, s = ``--quant-levels``, the AAAI paper's
"compression level 16"); the server averages u + Q_s(x_i - u). ``--quant-levels 0`` is FedAvg
(tested). FedPAQ + FedLAMA is ``--algo fedpaq --schedule lama`` (a layer's update is taken from its
last synchronization). Bits: ``fedcli.fl.codecs``.

No per-method defaults: ``--quant-levels`` 16 (the general default) is the compression level of FedLAMA AAAI
Table 4, where FedPAQ is compared; the rest is fedcli's general (FedLAMA) setting, on which it learns.
"""

from fedcli.specs import Method, register_method

register_method(
    Method(
        "fedpaq",
        "local SGD + periodic averaging of QSGD-quantized updates (Reisizadeh et al. 2020); --quant-levels",
        codec="qsgd",
        label="FedPAQ",
        style=("#7F7F7F", "p"),
    )
)
