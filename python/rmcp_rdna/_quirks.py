"""The quirks :func:`rmcp_rdna.enable` applies to this interpreter's environment.

The same decision as ``rmcp run`` (rmcp-core's ``quirks.rs``, whose table tests are the
rule; tests/cli_quirks.rs runs this module against the same cases): on a machine whose
KFD topology (``RMCP_SYSFS_ROOT``, else /sys/class/kfd/kfd/topology) shows an RX 5000
(gfx1010-gfx1013, RDNA1), Triton's buffer loads and stores read 0 and drop writes, so
``AMDGCN_USE_BUFFER_OPS=0`` is set unless the variable is set already (then it is kept
and the message says what it does); when it is set here and ``TORCHINDUCTOR_CACHE_DIR``
is unset or Inductor's default, Inductor gets a cache of its own
(``<default>_rmcp_nobufferops``), because its FX graph cache does not key on the knob.
``RMCP_QUIRKS=off`` (or ``0``) does neither. Triton and Inductor read these variables
when they compile, so setting them before ``import torch`` is in time.
"""

import getpass
import glob
import os
import re
import tempfile

BUFFER_OPS = "AMDGCN_USE_BUFFER_OPS"
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
INDUCTOR_CACHE_SUFFIX = "_rmcp_nobufferops"
DEFAULT_SYSFS_ROOT = "/sys/class/kfd/kfd/topology"
# gfx_target_version of gfx1010-gfx1013 (major*10000 + minor*100 + stepping).
RDNA1 = {100100: "gfx1010", 100101: "gfx1011", 100102: "gfx1012", 100103: "gfx1013"}


def rdna1_gpus(root=None):
    """The RDNA1 GPUs the KFD topology shows (gfx names, sorted, once each)."""
    root = root or os.environ.get("RMCP_SYSFS_ROOT") or DEFAULT_SYSFS_ROOT
    found = set()
    for props in glob.glob(os.path.join(root, "nodes", "*", "properties")):
        # Regular files only: never wait on a FIFO.
        if not os.path.isfile(props):
            continue
        try:
            with open(props) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == "gfx_target_version":
                        name = RDNA1.get(int(parts[1])) if parts[1].isdigit() else None
                        if name:
                            found.add(name)
        except OSError:
            continue
    return sorted(found)


def inductor_default_dir():
    """Inductor's default cache directory (torch._inductor.runtime.cache_dir_utils)."""
    try:
        user = getpass.getuser()
    except Exception:  # no name for this user id
        user = str(os.getuid())
    user = re.sub(r'[\\/:*?"<>|]', "_", user)
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + user)


def decide(environ=None, root=None):
    """Return (variables to set, notes) for a process with ``environ``."""
    environ = os.environ if environ is None else environ
    if environ.get("RMCP_QUIRKS", "").strip().lower() in ("off", "0"):
        return {}, []
    gpus = rdna1_gpus(root)
    if not gpus:
        return {}, []
    which = ", ".join(gpus)
    current = environ.get(BUFFER_OPS, "")
    if current:
        return {}, [f"{BUFFER_OPS}={current} kept: on {which} (RDNA1) Triton's buffer loads "
                    "and stores read 0 and drop writes: unset it to let rmcp set it to 0"
                    if current.strip().lower() not in ("0", "false", "off") else
                    f"{BUFFER_OPS}={current} kept: Triton compiles global loads and stores, "
                    f"which work on {which}"]
    to_set = {BUFFER_OPS: "0"}
    note = (f"{which} (RDNA1): {BUFFER_OPS}=0, because Triton's buffer loads and stores read 0 "
            "and drop writes there")
    default = inductor_default_dir()
    cache = environ.get(INDUCTOR_CACHE, "")
    if cache and cache.rstrip("/") != default:
        note += (f"; {INDUCTOR_CACHE}={cache} kept: kernels Inductor compiled there with buffer "
                 "ops are reused (`rmcp doctor` names them)")
    else:
        to_set[INDUCTOR_CACHE] = default + INDUCTOR_CACHE_SUFFIX
        note += (f"; {INDUCTOR_CACHE}={to_set[INDUCTOR_CACHE]}, so that Inductor does not reuse "
                 "kernels it compiled with buffer ops")
    note += "; RMCP_QUIRKS=off leaves both as they were"
    return to_set, [note]


def apply(environ=None, say=None):
    """Set the variables :func:`decide` names in ``environ`` (os.environ); return them.
    Each note goes to ``say`` (default: stderr, unless RMCP_LOG=off)."""
    environ = os.environ if environ is None else environ
    to_set, notes = decide(environ)
    environ.update(to_set)
    if say is None and environ.get("RMCP_LOG", "").strip().lower() not in ("off", "none"):
        import sys

        def say(n):
            sys.stderr.write(f"rmcp_rdna: {n}\n")
    for n in notes:
        if say is not None:
            say(n)
    return to_set
