# gdb (batch) script for tests/compat/run, checks (d) and (i): what the HIP runtime itself
# receives.
#
# The shim exports the same names as the runtime, so a breakpoint by name would be
# ambiguous. This script stops the inferior at main (the runtime is mapped by then, it is a
# DT_NEEDED of the probe), finds the runtime's load address in /proc/PID/maps (the mapping
# of a libamdhip64* file at file offset 0) and sets `break *ADDR` on the runtime's own entry
# points: ADDR = load address + st_value from `objdump -T` of that file (passed in
# RMCP_BREAKS as "name=0xoffset,..."). At each hit it prints, without stopping:
#   entry NAME size=N flags=0xF from=OBJECT
# where size is the 2nd argument ($rsi), flags the 3rd ($rdx; hipMemAllocHost has none)
# and OBJECT the file holding the return address (who called the runtime's function).
#
# Two copies (check i): an item "FILE:name=0xoffset" breaks in the mapped runtime whose file
# name is FILE (its resolved name, e.g. libamdhip64.so.7.2.53211), and the line ends
# " copy=FILE". RMCP_STOP (set with -ex like RMCP_BREAKS) names the function to stop at
# before reading the maps, when that is not main (a program that dlopens its runtimes).
import os

import gdb

RESULTS = []


def caller_object():
    ret = int(gdb.parse_and_eval("*(unsigned long *)$rsp"))
    text = gdb.execute("info symbol 0x%x" % ret, to_string=True).strip()
    # "sym + 12 in section .text of /path/obj" (no "of" for the main program)
    if " of " in text:
        return os.path.basename(text.rsplit(" of ", 1)[1])
    if text.startswith("No symbol"):
        return "?"
    return "main-program"


class Entry(gdb.Breakpoint):
    def __init__(self, name, addr, has_flags, copy=None):
        super().__init__("*0x%x" % addr, internal=True)
        self.name = name
        self.has_flags = has_flags
        self.copy = copy

    def stop(self):
        size = int(gdb.parse_and_eval("$rsi")) & 0xFFFFFFFFFFFFFFFF
        line = "entry %s size=%d" % (self.name, size)
        if self.has_flags:
            flags = int(gdb.parse_and_eval("$rdx")) & 0xFFFFFFFF
            line += " flags=0x%x" % flags
        line += " from=%s" % caller_object()
        if self.copy is not None:
            line += " copy=%s" % self.copy
        print(line, flush=True)
        return False


def runtime_bases(pid):
    """{file name: (load address, path)} of every libamdhip64 mapped, in map order."""
    found = {}
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[2] == "00000000":
                path = parts[5]
                name = os.path.basename(path)
                if name.startswith("libamdhip64") and name not in found:
                    found[name] = (int(parts[0].split("-")[0], 16), path)
    if not found:
        raise gdb.GdbError("no libamdhip64 mapped")
    return found


gdb.execute("set startup-with-shell off")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("break %s" % globals().get("RMCP_STOP", "main"))
gdb.execute("run")
pid = gdb.selected_inferior().pid
bases = runtime_bases(pid)
for name, (base, path) in bases.items():
    print("runtime %s base=0x%x" % (path, base), flush=True)
first = next(iter(bases.values()))[0]
for item in RMCP_BREAKS.split(","):  # noqa: F821 (set with -ex before this file)
    copy = None
    if ":" in item:
        copy, item = item.split(":", 1)
    name, off = item.split("=")
    base = bases[copy][0] if copy is not None else first
    Entry(name, base + int(off, 16), name != "hipMemAllocHost", copy)
gdb.execute("continue")
