"""The general parts every method starts from (``fedcli/fl/parts.py``): local SGD, the identity codec, the
overwriting init, the plain average; and the server step size (``fedcli/fl/parts_servers.py``).
"""

from fedcli.specs import part

#: local SGD (heavy-ball momentum, weight decay) on the mini-batch gradient
SGD = part(
    "local_step",
    "sgd",
    "fedcli.fl.parts:SGDStep",
    uses=("algo", "momentum", "weight_decay", "weight_decay_on", "momentum_persist"),
)
IDENTITY = part("codec", "identity", "fedcli.fl.parts:IdentityCodec")
OVERWRITE = part("init", "overwrite", "fedcli.fl.parts:OverwriteInit")
AVERAGE = part("server", "average", "fedcli.fl.parts:AverageServer")
#: the average as an update with a server step size (FedCOM, SCAFFOLD)
SERVER_LR = part("server", "server-lr", "fedcli.fl.parts_servers:ServerLR", base=AVERAGE, uses=("server_lr",))
