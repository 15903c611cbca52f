"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

Local direction g - c_i + c; c_i and c updated at the round's end; global step size eta_g =
``--server-lr`` (1: the plain average). The ledger counts c's download and c_i's upload per layer.
Details: ``fedcli.fl.parts_scaffold``.

No per-method defaults: the paper's experiments use the global step size eta_g = 1 (``--server-lr`` 1, the general
default) and tune the local learning rate per task; it learns on fedcli's general defaults (tests/test_presets_learn.py).
"""

import fedcli.fl.parts_scaffold  # noqa: F401  (registers the "scaffold" local step)
import fedcli.fl.parts_servers  # noqa: F401  (registers the "server-lr" server)
from fedcli.fl.methods import Method, register_method

register_method(Method("scaffold", "local SGD corrected by control variates, option II (Karimireddy et al. 2020); --server-lr",
                       local_step="scaffold", server="server-lr", label="SCAFFOLD", style=("#17BECF", ">")))
