"""rmcp_rdna: librmcp_shim.so, the RDNA Memory Coherency Patch, for pip installs.

The shim makes the coherent (fine-grained) HIP host allocations of a process
non-coherent on AMD RDNA1/RDNA2 GPUs, where coherent host memory is served badly.
It works by being loaded before the HIP runtime. This package carries it, and the
``rmcp`` command (``rmcp run -- CMD``, ``rmcp doctor``, ``rmcp kernel install``).

- :func:`shim_path`: the installed library, for ``LD_PRELOAD`` in kernel specs,
  Ray ``runtime_env``, Slurm and pod specs.
- :func:`enable`: load the shim into this interpreter before any HIP library (and, on
  an RX 5000, turn Triton's buffer loads and stores off: ``rmcp_rdna._quirks``).
- :func:`stats`: the shim's counters for this process.

``python -m rmcp_rdna ARGS`` runs ``rmcp ARGS``.
"""

import ctypes
import json
import os

__all__ = ["SHIM_NAME", "shim_path", "enable", "stats"]
__version__ = "0.1.0"

#: The file to preload.
SHIM_NAME = "librmcp_shim.so"

# The handle enable() loaded, kept so the library is never unloaded.
_handle = None
# Whether enable() has applied the quirks (once per process).
_quirks_applied = False


def shim_path():
    """Return the absolute path of the installed ``librmcp_shim.so`` (a str).

    Use it wherever a process is started with the shim preloaded::

        env["LD_PRELOAD"] = rmcp_rdna.shim_path()

    Raises FileNotFoundError, naming the path it expected, when the library is
    missing from the install.
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), SHIM_NAME)
    if not os.path.isfile(path):
        # rmcp-rdna is not on PyPI yet: name the two ways to a wheel that exist.
        raise FileNotFoundError(
            f"rmcp_rdna: {SHIM_NAME} is missing from the installed package: expected "
            f"{path}. Reinstall the wheel: the one attached to rmcp's GitHub release "
            f"(pip install --force-reinstall "
            f"rmcp_rdna-{__version__}-py3-none-manylinux_2_28_x86_64.whl), or one built "
            f"from a checkout of rmcp (pip install --force-reinstall . there; that needs "
            f"Rust and a C compiler)"
        )
    return path


def _mapped_files():
    """The files mapped into this process (/proc/self/maps)."""
    files = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                files.add(fields[5].rstrip("\n"))
    return files


def _mapped(prefix):
    return sorted(f for f in _mapped_files() if os.path.basename(f).startswith(prefix))


def enable():
    """Load the shim into this interpreter (RTLD_GLOBAL); return its path.

    Call it before anything loads a HIP runtime::

        import rmcp_rdna
        rmcp_rdna.enable()
        import torch

    What it reaches: libraries loaded after it that call HIP through their
    dynamic links (PyTorch, extension modules loaded RTLD_LOCAL by Python,
    ctypes), including the runtime they link privately: the shim finds each
    caller's own runtime. What it cannot reach: code that looks HIP functions up
    with ``dlsym`` on a library handle (``dlsym(handle, "hipHostMalloc")``, as
    some JIT frameworks do): glibc binds those lookups to its own ``dlsym``, not to
    the shim's, when the shim was loaded after the program started. For those,
    start the process with the shim preloaded: ``rmcp run -- python ...``,
    ``LD_PRELOAD``, or a kernel spec from ``rmcp kernel install``.

    On a machine with an RX 5000 (gfx1010-gfx1013) it also sets, as ``rmcp run``
    does, ``AMDGCN_USE_BUFFER_OPS=0`` in ``os.environ`` unless it is set (Triton's
    buffer loads and stores read 0 and drop writes there) and then points
    ``TORCHINDUCTOR_CACHE_DIR`` at a cache of its own unless it names a directory
    other than Inductor's default, saying so on stderr; ``RMCP_QUIRKS=off`` leaves
    both alone (``rmcp_rdna._quirks``). Triton and Inductor read them when they
    compile, so this works in a process that already has the shim too.

    A second call, or a call in a process that already has the shim (from
    ``LD_PRELOAD``), loads nothing. Raises RuntimeError and loads nothing when a
    libamdhip64 is already mapped: the libraries that loaded it have already
    bound their HIP calls to it.
    """
    global _handle, _quirks_applied
    path = shim_path()
    if not _quirks_applied:
        from . import _quirks

        _quirks.apply()
        _quirks_applied = True
    if _handle is not None or _mapped(SHIM_NAME):
        return path
    runtimes = _mapped("libamdhip64")
    if runtimes:
        raise RuntimeError(
            "rmcp_rdna.enable(): a HIP runtime is already loaded in this process "
            f"({', '.join(runtimes)}); the libraries that loaded it have bound their HIP "
            "calls to it, and the shim cannot change those bindings now. Restart the "
            "interpreter and call enable() before importing torch (or anything using "
            "HIP), or start it with the shim preloaded: `rmcp run -- python ...`, or a "
            "Jupyter kernel from `rmcp kernel install`."
        )
    _handle = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    return path


def _stats_function():
    """rmcp_shim_stats of the shim this process has loaded."""
    try:
        # The global scope: a preloaded shim, or one enable() loaded.
        fn = ctypes.CDLL(None).rmcp_shim_stats
    except AttributeError:
        try:
            fn = ctypes.CDLL(shim_path(), mode=os.RTLD_NOLOAD).rmcp_shim_stats
        except (OSError, AttributeError):
            loaded = _mapped(SHIM_NAME)
            raise RuntimeError(
                "rmcp_rdna.stats(): "
                + (
                    f"the loaded shim ({', '.join(loaded)}) has no rmcp_shim_stats "
                    "(an older build?)"
                    if loaded
                    else "the shim is not loaded in this process; start it with "
                    "`rmcp run -- python ...` or LD_PRELOAD, or call rmcp_rdna.enable() "
                    "first"
                )
            ) from None
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return fn


def stats():
    """Return the shim's counters for this process as a dict.

    The same report RMCP_STATS_FILE writes at exit: ``pid``, ``mode``, the
    ``runtime`` copies reached, the ``devices``, and per hooked function the
    ``calls``, ``rewritten``, ``fallbacks``, ``errors``, ``bytes``, ``coherent``
    and ``host_location`` counts, and ``buffer_descriptors``, what the load-time
    fix of Triton's kernels on an RX 5000 saw and did (docs/cli.md)::

        rmcp_rdna.stats()["calls"]["hipHostMalloc"]["rewritten"]

    Raises RuntimeError when the shim is not loaded in this process.
    """
    fn = _stats_function()
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        need = fn(buf, size)
        if need == 0:
            raise RuntimeError("rmcp_rdna.stats(): the shim could not make its report")
        if need <= size:
            return json.loads(buf.raw[:need].decode("utf-8"))
        size = need
