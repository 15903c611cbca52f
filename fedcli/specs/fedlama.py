"""FedLAMA (Lee et al., AAAI 2023): FedAvg with the layer-wise adaptive schedule (Algorithms 1, 2).

Only the schedule differs from FedAvg: ``--tau`` is the base interval tau', ``--phi`` the interval
increase factor; with ``--phi 1`` it is FedAvg. ``lama-accelerate`` is its "accelerate" variant (arXiv version's
remark), a schedule any method may take (``--schedule lama-accelerate``).

Its options, its parts (the two layer-wise schedules) and the preset (no torch); the parts are in
``fedcli/fl/algorithms/fedlama.py`` (Algorithm 1 and its accelerate variant, pure functions), on the layer-wise
schedules' base (``fedcli.fl.schedules.LayerwiseSchedule``: Eq. 2) and the shares of Eqs. 3-4
(``fedcli/fl/layerwise.py``).
"""

from fedcli.params import opt, register_params
from fedcli.specs import Method, part, register_method
from fedcli.specs.schedules import SCHEDULE, one_interval


@register_params(section="fedlama")
class LamaParams:
    """FedLAMA's interval adjustment (Lee et al., AAAI 2023, Algorithm 1)."""

    phi: int = opt(
        2,
        "FedLAMA interval increase factor phi (phi=1 is FedAvg); lama-accelerate: the critical layers' "
        "interval is tau // phi.",
        lo=1,
        group="federated",
        search={"choices": [1, 2, 4, 8]},
    )
    lama_rule: str = opt(
        "reference",
        "FedLAMA Algorithm 1: 'reference' (the author code, default: walking the layers by increasing d, "
        "each gets phi*tau' until the first one with 1 - lambda_l < delta_l, which gets it too) or 'paper' "
        "(the text: phi*tau' iff delta_l < 1 - lambda_l). See docs/fidelity-fedlama.md.",
        choices=["reference", "paper"],
        group="federated",
    )
    lama_eligible: str = opt(
        "kernels",
        "FedLAMA: layers that may get the long interval: kernels (the author code, default: conv/dense "
        "weights; lambda over their elements, the delta denominator over all tensors) or all (the paper "
        "text).",
        choices=["kernels", "all"],
        group="federated",
    )
    lama_first_adjust: int = opt(
        6,
        "FedLAMA: adjust the intervals only at round ends after more than this many times tau' local "
        "iterations (the author code's 'epoch > 5': 6, default; 0: at every round end).",
        lo=0,
        group="federated",
    )


def lama_round(params) -> int:
    """A round of phi * tau' local iterations (Algorithm 1: the cohort resampled, the intervals re-adjusted)."""
    return params.phi * params.tau


#: the layer-wise schedules' base (``fedcli.fl.schedules.LayerwiseSchedule``: Eq. 2, the adjustment and its state)
LAYERWISE = part(
    "schedule", "", "fedcli.fl.schedules:LayerwiseSchedule", base=SCHEDULE, Params=LamaParams, layerwise=True
)
LAMA = part(
    "schedule", "lama", "fedcli.fl.algorithms.fedlama:Lama", base=LAYERWISE, round_length=lama_round, label="FedLAMA"
)
LAMA_ACCELERATE = part(
    "schedule", "lama-accelerate", "fedcli.fl.algorithms.fedlama:LamaAccelerate", base=LAMA, round_length=one_interval
)


register_method(
    Method(
        "fedlama",
        "local SGD + layer-wise adaptive aggregation intervals (Lee et al. AAAI 2023)",
        schedule="lama",
        label="FedLAMA",
        style=("#0072B2", "s"),
        search=("lr", "tau", "phi"),
    )
)  # FedLAMA tuned lr per setting; tau' x phi its design space
