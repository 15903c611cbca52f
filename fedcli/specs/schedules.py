"""The aggregation schedules (``fedcli/fl/schedules.py``): periodic, and FedLAMA's layer-wise intervals with its options."""

from fedcli.params import opt, register_params
from fedcli.specs import part


@register_params(section="fedlama")
class LamaParams:
    """FedLAMA's interval adjustment (Lee et al., AAAI 2023, Algorithm 1)."""

    phi: int = opt(2, "FedLAMA interval increase factor phi (phi=1 is FedAvg); lama-accelerate: the critical layers' interval is tau // phi.", lo=1, group="federated")
    lama_rule: str = opt("reference", "FedLAMA Algorithm 1: 'reference' (the author code, default: walking the layers by increasing d, each gets phi*tau' until the first one with 1 - lambda_l < delta_l, which gets it too) or 'paper' (the text: phi*tau' iff delta_l < 1 - lambda_l). See docs/fidelity-fedlama.md.", choices=["reference", "paper"], group="federated")
    lama_eligible: str = opt("kernels", "FedLAMA: layers that may get the long interval: kernels (the author code, default: conv/dense weights; lambda over their elements, the delta denominator over all tensors) or all (the paper text).", choices=["kernels", "all"], group="federated")
    lama_first_adjust: int = opt(6, "FedLAMA: adjust the intervals only at round ends after more than this many times tau' local iterations (the author code's 'epoch > 5': 6, default; 0: at every round end).", lo=0, group="federated")


#: every schedule's base: one interval tau for every layer
SCHEDULE = part("schedule", "", "fedcli.fl.schedules:Schedule", uses=("tau",))
PERIODIC = part("schedule", "periodic", "fedcli.fl.schedules:Periodic", base=SCHEDULE)
LAMA = part("schedule", "lama", "fedcli.fl.schedules:Lama", base=SCHEDULE, Params=LamaParams)
LAMA_ACCELERATE = part("schedule", "lama-accelerate", "fedcli.fl.schedules:LamaAccelerate", base=LAMA)
