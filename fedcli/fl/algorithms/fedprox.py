"""FedProx (Li et al., MLSys 2020): FedAvg whose local step adds the proximal term mu * (x - u).

``--mu`` is mu (AAAI FedLAMA Table 4: 0.001); ``--mu 0`` is FedAvg (tested). FedProx + FedLAMA is
``--algo fedprox --schedule lama`` (each layer anchored at its last synchronized value:
``fedcli.fl.parts_prox``).
"""

import fedcli.fl.parts_prox  # noqa: F401  (registers the "prox" local step)
from fedcli.fl.methods import Method, register_method

register_method(Method("fedprox", "local SGD + proximal term mu (Li et al. 2020); --mu", local_step="prox"))
