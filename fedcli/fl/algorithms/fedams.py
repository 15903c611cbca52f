"""Fed-AMS (Chen, Li, Li, FODS 2020, "Toward communication efficient adaptive gradient method"): local AMSGrad
with a server-shared v_hat, v_hat <- max(v_hat, mean of the cohort's v). Fed-LAMB without the trust ratio
(``--algo fedlamb --trust-ratio off`` is this method). See ``fedcli.fl.adaptive``.
"""

import fedcli.fl.adaptive  # noqa: F401  (registers the parts)
from fedcli.fl.methods import Method, register_method

register_method(Method("fedams", "local AMSGrad with server-shared v-hat (Chen et al. 2020)", local_step="ams", server="vhat-max"))
