"""Process plumbing, below every other layer: the first signal handlers of a fedcli process (``early``), the C heap's
reuse during training (``heap``: glibc's malloc), ``torch.func.grad`` without torch's compiler stack (``gradshim``).
Nothing is imported here."""
