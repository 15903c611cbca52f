"""The adaptive optimizers' shared options (Fed-LAMB, Mime-LAMB, Fed-AMS, Mime, Adp-Fed/FedAdam, FedYogi,
FedAdagrad) the adaptive local step they build on, the v_hat servers' base and Fed-LAMB's and Fed-AMS's server
``vhat-max``
(``fedcli/fl/adaptive.py``); each method's own parts are in its own spec."""

import math

from fedcli.errors import ConfigError
from fedcli.params import Open, opt, register_params
from fedcli.specs import Cost, part
from fedcli.specs.parts import AVERAGE


@register_params(section="adaptive")
class AdaptiveParams:
    """The adaptive optimizers' settings (Fed-LAMB Algorithm 1; Mime; Reddi et al. 2021's server Adam)."""

    beta1: float = opt(
        0.9,
        "First-moment decay: local AMSGrad/LAMB m, Mime's server m, the server m of Adp-Fed, FedYogi, "
        "FedAdagrad (its preset: 0).",
        lo=0.0,
        hi=Open(1.0),
        group="adaptive",
    )
    beta2: float = opt(
        0.999,
        "Second-moment decay of the same optimizers (FedYogi's preset: 0.99; FedAdagrad has none).",
        lo=0.0,
        hi=Open(1.0),
        group="adaptive",
    )
    eps: float = opt(
        1e-8,
        "Adaptive methods' epsilon: with --vhat-eps floor, Algorithm 1's v_hat_0 = eps (the step divides "
        "by sqrt(v_hat) >= sqrt(eps)); with outside, m / (sqrt(v_hat) + eps).",
        lo=0.0,
        group="adaptive",
    )
    vhat_eps: str = opt(
        "floor",
        "Where eps enters the adaptive step: floor (Fed-LAMB Algorithm 1: v_hat starts at eps and only "
        "grows, psi = m / sqrt(v_hat)) or outside (the authors' prototype code and fedcli before: v_hat "
        "starts at 0, m / (sqrt(v_hat) + eps)).",
        choices=["floor", "outside"],
        group="adaptive",
    )
    vhat_every: int = opt(
        1,
        "Skip synchronization Z: the server updates and sends v_hat (Mime: its optimizer state) every Z rounds only.",
        lo=1,
        group="adaptive",
    )
    vhat_start: str = opt(
        "eps",
        "fedlamb, mimelamb, fedams: until v_hat is first synchronized, clients divide by the server's "
        "v_hat_0 (eps: Algorithm 1's v_hat_0 = eps) or by their own running v (local: a departure).",
        choices=["eps", "local"],
        group="adaptive",
    )
    local_v: str = opt(
        "server",
        "fedlamb, mimelamb, fedams: a client's v at a round's start: the server's v_hat (server: Algorithm "
        "1, line 6) or its own v from its last round (keep: the authors' prototype code).",
        choices=["server", "keep"],
        group="adaptive",
    )
    trust_ratio: str = opt(
        "auto",
        "LAMB layer-wise trust ratio phi(||p||) / ||r + lambda p||: the method's default (on for fedlamb, "
        "mimelamb), on, or off (fedlamb with it off is fedams).",
        choices=["auto", "on", "off"],
        group="adaptive",
    )
    scaling_bounds: str = opt(
        "",
        "Bounded LAMB scaling function (Fed-LAMB Assumption 4) as 'ZETA,MAX': phi(a) = min(a + ZETA, MAX); "
        "empty: identity phi(a) = a. Its old name --phi-bounds still works.",
        group="adaptive",
        was=("phi_bounds",),
    )
    server_eps: float = opt(
        1e-3,
        "Adaptivity tau of the servers of Adp-Fed, FedYogi, FedAdagrad: m / (sqrt(v) + tau) (Reddi et al. 2021).",
        lo=Open(0.0),
        group="adaptive",
    )

    def scaling_values(self) -> tuple[float, float] | None:
        """(zeta, phi_max) of the bounded scaling function phi (Fed-LAMB Assumption 4), or None for the identity."""
        bounds = str(self.scaling_bounds)
        if not bounds.strip():
            return None
        try:
            zeta, top = (float(s) for s in bounds.split(","))
        except ValueError:
            raise ConfigError(
                f"--scaling-bounds must be 'ZETA,MAX' (two numbers), got '{bounds}'", key="scaling_bounds"
            ) from None
        if not (0.0 < zeta < top < math.inf):
            raise ConfigError(f"--scaling-bounds needs 0 < ZETA < MAX, got '{bounds}'", key="scaling_bounds")
        return zeta, top

    def check(self) -> None:
        self.scaling_values()


#: the v_hat servers' base (Fed-LAMB's, Mime-LAMB's): model averaging plus a second moment shared with the clients
VHAT = part(
    "server", "", "fedcli.fl.adaptive:VhatServer", base=AVERAGE, Params=AdaptiveParams, provides=frozenset({"vhat"})
)
#: Fed-LAMB's and Fed-AMS's server: v_hat <- max(v_hat, mean of the cohort's v)
# : (its cost: no extra passes; its bytes, each client's v up and v_hat down at a synchronization, are its ledger
# records)
VHAT_MAX = part(
    "server",
    "vhat-max",
    "fedcli.fl.adaptive:VhatMaxServer",
    base=VHAT,
    requires={"local_step": "v"},
    cost=Cost(
        source="Fed-LAMB (Karimi, Li, Li), Algorithm 1, line 20: v up, v_hat down every "
        "--vhat-every rounds (bytes only)"
    ),
)
