"""Fed-LAMB (Karimi, Li, Li; Algorithm 1, blue boxes): local AMSGrad with the server's v_hat fixed for the
round and LAMB's layer-wise trust ratio (Eq. 3); the server averages the models and raises
v_hat <- max(v_hat, mean of the cohort's v) every ``--vhat-every`` rounds. Its local step ``lamb`` (Mime-LAMB
takes it too) is in ``fedcli/fl/algorithms/fedlamb.py``; its server ``vhat-max`` (Fed-AMS's too) in
``fedcli/fl/adaptive.py``.

Defaults. beta1 = 0.9, beta2 = 0.999 (Section 5: "for all the adaptive gradient methods"), lambda = 0 (in the
paper's tuning set {0, 0.01, 0.1}) and phi the identity (Section 5) are fedcli's general defaults. The
learning rate is "tuned over a fine grid" in the paper, whose values are in an appendix our copy lacks;
lr = 0.01 is ours: on digits at fedcli's defaults (600 local iterations, MLP 200-200, 16 clients) the grid
{0.1, 0.03, 0.01, 0.003, 0.001} gave final accuracies 10% (collapses after reaching 92%), 97.8%, 97.8%,
90.6%, 77.8%, and 0.01 is the smaller of the two best. eps = 1e-8 (Algorithm 1's v_hat_0; the paper does
not give it) is fedcli's general default.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.adaptive import AdaptiveParams

#: Fed-LAMB's local step (Algorithm 1, lines 6-13; Fed-AMS's and Mime-LAMB's too): local AMSGrad with LAMB's trust
#: ratio; it needs the server's v_hat and offers each client's v
LAMB = part(
    "local_step",
    "lamb",
    "fedcli.fl.algorithms.fedlamb:LambStep",
    Params=AdaptiveParams,
    uses=("weight_decay",),
    requires={"server": "vhat"},
    provides=frozenset({"v"}),
)


register_method(
    Method(
        "fedlamb",
        "local AMSGrad + LAMB trust ratio, server v-hat = max(v-hat, mean v) (Karimi et al.)",
        local_step="lamb",
        server="vhat-max",
        defaults={"lr": 0.01},
        label="Fed-LAMB",
        style=("#D55E00", "D"),
        search=("lr", "weight_decay"),
        search_ranges={"lr": {"log": [0.0001, 0.1]}},
    )
)  # Section 5: lr fine grid, lambda {0, 0.01, 0.1}
