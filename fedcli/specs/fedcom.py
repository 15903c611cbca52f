"""FedCOM (Haddadpour et al., AISTATS 2021): quantized uplink with a server learning rate.

Clients upload Q_s(x_i - u) (QSGD, ``--quant-levels``); the server steps u <- u + eta * mean_i Q_s(x_i - u)
with eta = ``--server-lr`` (1: FedPAQ, bit for bit).

No per-method defaults: neither FedCOM's paper as we have it nor FedLAMA's comparison (AAAI Figure 3, whose
settings are in an appendix we do not have) gives a server learning rate to use, so ``--server-lr`` stays the
general default 1, where this preset equals FedPAQ; give ``--server-lr`` (e.g. 2, as recipes/fedlama's Figure 3
recipes) for FedCOM proper.
"""

from fedcli.specs import Method, register_method

register_method(
    Method(
        "fedcom",
        "local SGD + quantized updates + server learning rate (Haddadpour et al. 2021); --quant-levels, --server-lr",
        codec="qsgd",
        server="server-lr",
        label="FedCOM",
        style=("#E377C2", "d"),
    )
)
