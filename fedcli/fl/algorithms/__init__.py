"""The torch classes of the parts that one method adds, a module per method (``feddyn.py``: FedDyn's local step and
server). Each method's spec (its options, its parts' specs, its preset) is ``fedcli/specs/<method>.py``; a part's
module is imported when a run builds the part (``fedcli.specs.PartSpec.load``)."""
