"""A stand-in for the few parts of PyTorch that Triton's HIP driver asks for, so that real
Triton (triton==3.5.1 from PyPI) starts without PyTorch: `torch.cuda.is_available()` and
`torch.version.hip` (is the HIP backend active), the current device, and the current
stream (`torch._C._cuda_getCurrentRawStream`), which is the null stream here. Test
infrastructure only (tests/triton_real.rs, scripts/triton-root); nothing of PyTorch is
emulated beyond these answers.
"""

from . import cuda, version, _C  # noqa: F401


class device:
    """`torch.device("cuda", index)`: the kind and the index, nothing more."""

    def __init__(self, kind, index=None):
        self.type = kind
        self.index = index

    def __repr__(self):
        return f"device(type={self.type!r}, index={self.index!r})"
