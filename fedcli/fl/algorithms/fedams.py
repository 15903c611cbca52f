"""Fed-AMS (Chen, Li, Li, FODS 2020, "Toward communication efficient adaptive gradient method"): its local step
``ams`` is the adaptive local step (``fedcli.fl.adaptive.AdaptiveStep``) without the trust ratio,
p <- p - lr * (m / sqrt(v_hat) + lambda p): local AMSGrad with a server-shared v_hat. ``--algo fedlamb --trust-ratio
off`` is exactly ``fedams`` (same lr). Its server is ``vhat-max`` (``fedcli.fl.adaptive.VhatMaxServer``).
"""

from __future__ import annotations

from fedcli.fl.adaptive import AdaptiveStep


class AMSStep(AdaptiveStep):
    """Fed-AMS local step: local AMSGrad with the server's v_hat, no trust ratio (p <- p - lr (r + lambda p))."""

    trust_default = False
