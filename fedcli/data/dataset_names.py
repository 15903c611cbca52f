"""The names of fedcli's dataset loaders, without importing them (``--help`` and argument errors read this; each
loader registers under one of these names: ``fedcli.data.sources.register_dataset``)."""

DATASET_NAMES = ("agnews", "cifar10", "cifar100", "digits", "emnist", "femnist", "fmnist", "imagefolder", "mnist",
                 "synthetic", "tensors", "tinyimagenet")
