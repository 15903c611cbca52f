"""FedNova (Wang et al., NeurIPS 2020): normalized averaging of unequal local work.

u <- u - tau_eff * sum_i p_i (u - x_i) / a_i, a_i = tau_i for SGD (with momentum: FedNova's ||a_i||_1).
Local steps differ with ``--local-epochs``; with equal steps FedNova is FedAvg (tested). Details and
the MPI-friendly form: ``fedcli.fl.parts_servers.NovaServer``.

No per-method defaults: the paper's experiments tune the learning rate per model, and its distinguishing setting
(clients running different numbers of local steps) comes from the data with ``--local-epochs``; with fedcli's
general defaults (equal tau steps) it learns as FedAvg does (tests/test_presets_learn.py).
"""

import fedcli.fl.parts_servers  # noqa: F401  (registers the "nova" server)
from fedcli.fl.methods import Method, register_method

register_method(Method("fednova", "local SGD + normalized averaging over unequal local steps (Wang et al. 2020); --local-epochs",
                       server="nova", label="FedNova", style=("#BCBD22", "h")))
