"""Fed-AMS (Chen, Li, Li, FODS 2020, "Toward communication efficient adaptive gradient method"): its local step
``ams`` is Fed-LAMB's (``fedcli.fl.algorithms.fedlamb.LambStep``) without the trust ratio,
p <- p - lr * (m / sqrt(v_hat) + lambda p): local AMSGrad with a server-shared v_hat. ``--algo fedlamb --trust-ratio
off`` is exactly ``fedams`` (same lr). Its server is ``vhat-max`` (``fedcli.fl.adaptive.VhatMaxServer``).
"""

from __future__ import annotations

from fedcli.fl.algorithms.fedlamb import LambStep


class AMSStep(LambStep):
    """Fed-AMS local step: local AMSGrad with the server's v_hat, no trust ratio (p <- p - lr (r + lambda p))."""

    trust_default = False
