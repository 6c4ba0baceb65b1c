"""`torch._C._cuda_getCurrentRawStream`: the current stream, always the null stream (0)."""


def _cuda_getCurrentRawStream(index):
    return 0
