"""Adp-Fed / FedAdam (Reddi et al., ICLR 2021, "Adaptive federated optimization"): local SGD, and the server
applies Adam to the averaged update Delta = average - x: x <- x + eta m / (sqrt(v) + tau), ``--server-lr`` eta,
``--server-eps`` tau, ``--beta1``/``--beta2``. Alias ``adp-fed`` (the name in Fed-LAMB's experiments).
"""

import fedcli.fl.adaptive  # noqa: F401  (registers the parts)
from fedcli.fl.methods import Method, register_method

register_method(Method("fedadam", "local SGD + server Adam on the averaged update (Reddi et al. 2021)", server="adam",
                       aliases=("adp-fed",)))
