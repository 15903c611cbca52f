"""pFedMe (T Dinh, Tran, Nguyen, NeurIPS 2020, Algorithm 1): personalized models theta_i tied to local copies
w_i of the global model by a Moreau envelope, f_i(theta) + (lambda / 2) ||theta - w_i||^2.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/pfedme.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Cost, Method, part, register_method
from fedcli.specs.parts import SERVER_LR, SGD


@register_params(section="pfedme")
class PFedMeParams:
    """pFedMe's inner steps and server mix (T Dinh et al., NeurIPS 2020, Algorithm 1)."""

    pfedme_lambda: float = opt(
        15.0,
        "pFedMe: regularization lambda tying the personalized model theta to the local model w (FedALA appendix: 15).",
        lo=0.0,
        group="personalized",
    )
    pfedme_lr: float = opt(
        0.01,
        "pFedMe: personalized learning rate of the K inner steps on theta (FedALA appendix: 0.01).",
        lo=Open(0.0),
        group="personalized",
    )
    pfedme_k: int = opt(
        5, "pFedMe: inner steps K on theta per local mini-batch (FedALA appendix: 5).", lo=1, group="personalized"
    )
    pfedme_beta: float = opt(
        1.0,
        "pFedMe: server mix beta: global <- (1 - beta) * previous + beta * average (FedALA appendix: 1.0).",
        lo=Open(0.0),
        group="personalized",
    )


# : its cost: each local mini-batch's personalized problem is solved by K gradient steps on theta (Alg. 1, line 7, "find
# a
#: delta-approximate theta_i(w_i,r)": the reference's K = --pfedme-k inner steps), K forward-backward passes of the
#: batch where FedAvg takes one; the w update (line 8) takes none
STEP = part(
    "local_step",
    "pfedme",
    "fedcli.fl.algorithms.pfedme:PFedMeStep",
    base=SGD,
    Params=PFedMeParams,
    uses=("lr",),
    cost=Cost(
        step=lambda g: g.params.pfedme_k - 1,
        source="pFedMe (T Dinh et al., NeurIPS 2020), Algorithm 1, line 7: K inner steps on "
        "theta per mini-batch (--pfedme-k)",
    ),
)
SERVER = part("server", "pfedme", "fedcli.fl.algorithms.pfedme:PFedMeServer", base=SERVER_LR, Params=PFedMeParams)


register_method(
    Method(
        "pfedme",
        "personalized models via Moreau envelopes: K inner steps on theta per batch, w pulled toward theta "
        "(T Dinh et al. 2020); --pfedme-lambda, --pfedme-lr, --pfedme-k, --pfedme-beta",
        local_step="pfedme",
        server="pfedme",
        personalized=True,
        label="pFedMe",
        style=("#D62728", "X"),
    )
)
