"""Fed-LAMB (Karimi, Li, Li: "Fed-LAMB: Layer-wise and Dimension-wise Locally Adaptive Federated Learning",
Algorithm 1, blue boxes): its local step ``lamb`` is the adaptive local step (``fedcli.fl.adaptive.AdaptiveStep``:
local AMSGrad with the server's v_hat fixed for the round) with LAMB's layer-wise trust ratio on (Eq. 3)::

    p <- p - lr * phi(||p||) / ||u|| * u,    u = m / sqrt(v_hat_{r-1}) + lambda p

Mime-LAMB takes the same step; Fed-LAMB's server is ``vhat-max`` (``fedcli.fl.adaptive.VhatMaxServer``, shared
with Fed-AMS).
"""

from __future__ import annotations

from fedcli.fl.adaptive import AdaptiveStep


class LambStep(AdaptiveStep):
    """Fed-LAMB / Mime-LAMB local step (Algorithm 1, lines 6-13): the adaptive step with the trust ratio."""

    trust_default = True
