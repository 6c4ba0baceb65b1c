"""`torch.version` of a ROCm build: `hip` set, `cuda` None (see torch/__init__.py)."""

hip = "7.2"
cuda = None
