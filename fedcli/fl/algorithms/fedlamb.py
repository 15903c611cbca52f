"""Fed-LAMB (Karimi, Li, Li; Algorithm 1, blue boxes): local AMSGrad with the server's v_hat fixed for the
round and LAMB's layer-wise trust ratio (Eq. 3); the server averages the models and raises
v_hat <- max(v_hat, mean of the cohort's v) every ``--vhat-every`` rounds. See ``fedcli.fl.adaptive``.
"""

import fedcli.fl.adaptive  # noqa: F401  (registers the parts)
from fedcli.fl.methods import Method, register_method

register_method(Method("fedlamb", "local AMSGrad + LAMB trust ratio, server v-hat = max(v-hat, mean v) (Karimi et al.)",
                       local_step="lamb", server="vhat-max"))
