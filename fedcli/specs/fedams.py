"""Fed-AMS (Chen, Li, Li, FODS 2020, "Toward communication efficient adaptive gradient method"): local AMSGrad
with a server-shared v_hat, v_hat <- max(v_hat, mean of the cohort's v). Fed-LAMB without the trust ratio
(``--algo fedlamb --trust-ratio off --lr 0.001`` is this method). Its part is in
``fedcli/fl/algorithms/fedams.py``.

Defaults. beta1 = 0.9, beta2 = 0.999 (Fed-LAMB, Section 5, for all adaptive methods). The step is AMSGrad's,
so lr = 0.001, the customary Adam/AMSGrad step size (Kingma and Ba 2015; Reddi et al. 2018), not the SGD
default 0.1, at which every coordinate moves by about lr per step and the run ends at chance (10%). The
paper's own tuned value is in an appendix our copy lacks; on digits at fedcli's defaults the grid
{0.01, 0.001, 0.0001, 0.00001} gave final accuracies 10%, 97.2%, 93.1%, 73.6%.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.fedlamb import LAMB

AMS = part("local_step", "ams", "fedcli.fl.algorithms.fedams:AMSStep", base=LAMB)


register_method(
    Method(
        "fedams",
        "local AMSGrad with server-shared v-hat (Chen et al. 2020)",
        local_step="ams",
        server="vhat-max",
        defaults={"lr": 0.001},
        label="Fed-AMS",
        style=("#E69F00", "P"),
    )
)
