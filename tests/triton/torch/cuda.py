"""`torch.cuda` as Triton's HIP driver uses it (see torch/__init__.py): one device, 0."""

_current = 0


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return _current


def set_device(index):
    global _current
    _current = int(index)


def get_device_capability(index=None):
    # Asked by Triton's generic driver; the HIP backend takes its target from the
    # runtime's device properties instead.
    return (10, 1)
