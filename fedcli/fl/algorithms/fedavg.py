"""FedAvg (McMahan et al., AISTATS 2017): local SGD, periodic full averaging every tau iterations.

Alias ``fedsgd``: FedAvg with local SGD, the Fed-SGD baseline of Fed-LAMB (Karimi et al.).
"""

from fedcli.fl.methods import Method, register_method

register_method(Method("fedavg", "local SGD + periodic full averaging every tau (McMahan et al. 2017)", aliases=("fedsgd",)))
