"""``python -m rmcp_rdna ARGS``: runs the ``rmcp`` command this package installed."""

import os
import shutil
import sys
import sysconfig


def rmcp_executable():
    """The ``rmcp`` script installed with this package (scripts directory of the
    install scheme, the user scheme's, else ``rmcp`` on PATH)."""
    places = [sysconfig.get_path("scripts")]
    try:
        places.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:
        pass
    for d in places:
        p = os.path.join(d, "rmcp")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    found = shutil.which("rmcp")
    if found is None:
        sys.exit(f"rmcp_rdna: the rmcp executable is not installed (looked in {', '.join(places)} and PATH)")
    return found


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    # The kernel spec is for this interpreter.
    if args[:2] == ["kernel", "install"] and "--python" not in args:
        args[2:2] = ["--python", sys.executable]
    exe = rmcp_executable()
    os.execv(exe, [exe, *args])


if __name__ == "__main__":
    main()
