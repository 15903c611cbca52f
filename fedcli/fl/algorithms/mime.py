"""Mime with AMSGrad (Karimireddy et al. 2020, "Mime: Mimicking centralized stochastic algorithms in FL"):
clients apply the server's AMSGrad state (m, v_hat), frozen during the round, to SVRG-corrected gradients
g_i(y) - g_i(x) + c; the server updates its state with c, the cohort's mean full-batch gradient at x.
The full Mime variant (not MimeLite); see ``fedcli.fl.adaptive``.
"""

import fedcli.fl.adaptive  # noqa: F401  (registers the parts)
from fedcli.fl.methods import Method, register_method

register_method(Method("mime", "frozen server AMSGrad state + SVRG-corrected local steps (Karimireddy et al. 2020)",
                       local_step="mime", server="mime"))
