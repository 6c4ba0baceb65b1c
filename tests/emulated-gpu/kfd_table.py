#!/usr/bin/env python3
"""The KFD allocation table: what the amdgpu driver receives for each hooked HIP call, with
and without rmcp, read from the emulated GPU's ioctl logs (tests/emulated-gpu/emugpu.c).

  kfd_table.py steps [RUNTIME [FIXTURE]]   the probe's steps for the table (emu_probe.c
                            syntax); on the rdna3 fixture before 5.3, init count arch only
  kfd_table.py seq          the representative sequence of item 4 (runtime-internal memory)
  kfd_table.py check --runtime 5.2.3 DIR
      DIR holds one NAME.jsonl log (and NAME.out, the probe's output) per run:
        none     rdna1 fixture, no rmcp          rmcp    rdna1, rmcp preloaded (mode auto)
        exempt   rdna1, rmcp, RMCP_EXEMPT=emu_probe
        off      rdna1, rmcp, RMCP_MODE=off
        r3none   rdna3 fixture, no rmcp          r3rmcp  rdna3, rmcp preloaded
        seqnone  rdna1, no rmcp, the `seq` steps  seqrmcp the same with rmcp
      Prints the table (markdown), the runtime's own coherent allocations, and one line per
      failed expectation; exits 1 when any failed.

The memory type column is the kernel's rule, not the emulator's: linux 6.1.192
drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd_gpuvm.c, get_pte_flags(), lines 449-456, the
branch every GC version but 9.4.1 / 9.4.2 takes (gfx10 included):

	default:
		if (uncached || coherent)
			mapping_flags |= AMDGPU_VM_MTYPE_UC;
		else
			mapping_flags |= AMDGPU_VM_MTYPE_NC;

		if (!(mem->alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM))
			snoop = true;
"""
import json
import os
import sys

# (COHERENT, UNCACHED, VRAM) -> (MTYPE, snooped): the rule above, as a table.
GFX10_MTYPE = {
    (False, False, True): ("NC", False),
    (False, False, False): ("NC", True),
    (True, False, True): ("UC", False),
    (True, False, False): ("UC", True),
    (False, True, True): ("UC", False),
    (False, True, False): ("UC", True),
    (True, True, True): ("UC", False),
    (True, True, False): ("UC", True),
}

HOST_COHERENT, HOST_NONCOHERENT, DEVICE, MANAGED, REGISTERED = (
    "host-coherent", "host-noncoherent", "device", "managed", "registered")

# The rows of docs/design.md's "What the shim changes, call by call": (function, flags, what the runtime makes of it
# without rmcp). hipHostAlloc depends on the runtime (VRAM before 6.3).
ROWS = [
    ("hipHostMalloc", 0x0, HOST_COHERENT),
    ("hipHostMalloc", 0x1, HOST_NONCOHERENT),  # Portable
    ("hipHostMalloc", 0x2, HOST_COHERENT),  # Mapped
    ("hipHostMalloc", 0x4, HOST_NONCOHERENT),  # WriteCombined
    ("hipHostMalloc", 0x40000000, HOST_COHERENT),  # Coherent
    ("hipHostMalloc", 0x80000000, HOST_NONCOHERENT),  # NonCoherent
    ("hipHostMalloc", 0x82000000, HOST_NONCOHERENT),  # NonCoherent | Mapped
    ("hipMemAllocHost", 0x0, HOST_COHERENT),
    ("hipHostAlloc", 0x0, "hostalloc"),
    ("hipHostAlloc", 0x2, "hostalloc"),
    ("hipExtMallocWithFlags", 0, DEVICE),  # Default
    ("hipExtMallocWithFlags", 1, DEVICE),  # Finegrained
    ("hipMalloc", 0, DEVICE),
    ("hipMallocHost", 0, HOST_NONCOHERENT),
    ("hipMallocManaged", 1, MANAGED),
    ("hipMallocAsync", 0, DEVICE),
    ("hipMallocFromPoolAsync", 0, DEVICE),
    ("hipHostRegister", 0, REGISTERED),
]
# rmcp rewrites these on an affected device (docs/design.md, "What the shim changes, call by call").
REWRITTEN = {("hipHostMalloc", 0x0), ("hipHostMalloc", 0x2), ("hipHostMalloc", 0x40000000),
             ("hipMemAllocHost", 0x0), ("hipExtMallocWithFlags", 1)}
REWRITTEN_63 = {("hipHostAlloc", 0x0), ("hipHostAlloc", 0x2)}

SEQ = ["init", "count", "arch", "hipMalloc:4096:0", "hipHostMalloc:4096:0", "h2d:4096", "d2h:4096", "h2d:16777216",
       "d2h:16777216", "memset:4096", "sync"]


def row_size(i):
    """Each row's size is its own, so that its allocation is found by size."""
    return (256 + i) * 4096


def steps():
    return ["init", "count", "arch"] + [
        f"{f}:{row_size(i)}:{hex(fl)}" for i, (f, fl, _) in enumerate(ROWS)]


def version_tuple(v):
    return tuple(int(x) for x in v.split(".")[:2])


def load(path):
    """[(step or None, record)] in log order; a step spans its begin/end marks. A record
    between the probe's "call FUNC" and "free FUNC" marks gets "_in_call": True."""
    out, step, in_call = [], None, False
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "mark" in d:
                m = d["mark"]
                if m.startswith("begin ") or m.startswith("end "):
                    step = m[len("begin "):] if m.startswith("begin ") else None
                    in_call = False
                else:
                    in_call = m.startswith("call ")
                continue
            d["_in_call"] = in_call
            out.append((step, d))
    return out


def kinds(d):
    names = d.get("flag_names", [])
    kind = next((k for k in ("VRAM", "GTT", "USERPTR", "DOORBELL", "MMIO_REMAP") if k in names), "?")
    coh = [n for n in ("COHERENT", "UNCACHED", "EXT_COHERENT") if n in names]
    return kind, coh


def mtype(d):
    names = d.get("flag_names", [])
    if any(k in names for k in ("DOORBELL", "MMIO_REMAP")):
        return "-"
    mt, snoop = GFX10_MTYPE[("COHERENT" in names, "UNCACHED" in names, "VRAM" in names)]
    return mt + (" snooped" if snoop else "")


def svm_coherent(d):
    """SVM ranges are mapped by the SVM flags set on them: linux 6.1.192
    drivers/gpu/drm/amd/amdkfd/kfd_svm.c, svm_range_get_pte_flags(), lines 1199-1201,
    the branch gfx10 takes:

	default:
		mapping_flags |= coherent ?
			AMDGPU_VM_MTYPE_UC : AMDGPU_VM_MTYPE_NC;

    with coherent = flags & KFD_IOCTL_SVM_FLAG_COHERENT (0x2)."""
    return any(a["type"] == "SET_FLAGS" and int(a["value"], 16) & 0x2 for a in d.get("attrs", []))


def describe(d):
    if d["ioctl"] == "AMDKFD_IOC_SVM":
        attrs = [a for a in d.get("attrs", []) if a["type"] != "SET_FLAGS"]
        coh = ["COHERENT"] if svm_coherent(d) else []
        what = "SVM " + ",".join(f"{a['type']}={a['value']}" for a in attrs) if attrs else "SVM"
        return what, coh, ("UC snooped" if coh else "-")
    kind, coh = kinds(d)
    return kind, coh, mtype(d)


# The entry point a call's own allocation is made under, when it is not the call itself:
# rmcp makes hipMemAllocHost a hipHostMalloc call, and hipHostAlloc one on runtimes >= 6.3.
ALIASES = {"hipMemAllocHost": {"hipHostMalloc"}, "hipHostAlloc": {"hipHostMalloc"}}


def is_own(d, step):
    """Whether D is the allocation (ALLOC or SVM) the hooked call of STEP made: made while
    the call ran (the probe's call/free marks), at least the row's size (what the runtime
    allocates for itself meanwhile is smaller), and not under another entry point. From
    6.2 on the runtime's exported functions leave no frame of their own (a dispatch table
    in front), so the entry point may be unnamed ("?")."""
    fn, size = step.split(":")[0], int(step.split(":")[1])
    return (d.get("_in_call") and d.get("ioctl") in ("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", "AMDKFD_IOC_SVM")
            and d.get("ret") == 0 and d.get("op", "SET_ATTR") == "SET_ATTR"
            and d.get("api", "?") in {fn, "?"} | ALIASES.get(fn, set())
            and int(d.get("size", 0)) >= size)


def made_by_row(log, step, size):
    return [d for s, d in log if s == step and is_own(d, step)]


def cell(allocs):
    if not allocs:
        return "no new allocation", False
    parts, coherent = [], False
    for d in allocs:
        kind, coh, mt = describe(d)
        coherent |= "COHERENT" in coh
        parts.append(f"{kind}{' ' + '|'.join(coh) if coh else ''} ({mt})" if mt != "-" else kind)
    return "; ".join(parts), coherent


def probe_lines(path):
    try:
        with open(path) as f:
            return {l.split(" rc=")[0]: l.strip() for l in f if " rc=" in l}
    except FileNotFoundError:
        return {}


def frame_of(d):
    """The thunk's entry point (hsaKmt*) the allocation was made through, as the emulator
    named it: the outermost libhsakmt frame, inside an exported function. (ROCr's own
    frames are internal functions; its exported hsa_* functions jump into a table and
    leave no frame.)"""
    return d.get("kmt", "?")


def check(runtime, d):
    fails = []
    v = version_tuple(runtime)
    logs = {n: load(os.path.join(d, n + ".jsonl")) for n in
            ("none", "rmcp", "exempt", "off", "r3none", "r3rmcp")}
    outs = {n: probe_lines(os.path.join(d, n + ".out")) for n in logs}
    # ROCr before 5.3 does not know gfx1100: on the rdna3 fixture it finds no device
    # ("The GPU node has an unrecognized id"), and 5.2.3's hipHostMalloc then crashes;
    # those runs make only init, count and arch (the callers pass `steps` without rows).
    no_gfx11 = v < (5, 3)
    # Where the emulation is not enough for a runtime on the rdna3 fixture, the runtime
    # aborts the same way with and without rmcp: reported as STOP, and the rdna3
    # comparison then covers what ran before it.
    stops = {}
    for n in ("r3none", "r3rmcp"):
        try:
            err = open(os.path.join(d, n + ".err")).read()
        except FileNotFoundError:
            err = ""
        stops[n] = next((l.strip() for l in err.splitlines() if "Assertion" in l), None)
    r3_stopped = stops["r3none"] is not None
    if r3_stopped:
        print(f"STOP rdna3 fixture: {stops['r3none']}")
        if stops["r3rmcp"] != stops["r3none"]:
            fails.append(f"rdna3: with rmcp the run ends differently: {stops['r3rmcp']!r}")
    for n, lines in outs.items():
        r3 = n.startswith("r3")
        if r3 and r3_stopped:
            continue
        count = "count rc=100 count=0" if r3 and no_gfx11 else "count rc=0 count=1"
        for want in ("init rc=0", count):
            if not any(l.startswith(want) for l in lines.values()):
                fails.append(f"{n}: no '{want}' line")
        arch = lines.get("arch", "")
        exp = "none" if r3 and no_gfx11 else "gfx1100" if r3 else "gfx1010"
        if f"arch={exp}" not in arch:
            fails.append(f"{n}: arch line {arch!r}, expected {exp}")

    print(f"\n#### ROCm {runtime}: KFD allocation per hooked call (emulated RX 5700 XT, gfx1010)\n")
    print("| call | flags | without rmcp | with rmcp | rc without / with |")
    print("|---|---|---|---|---|")
    for i, (fn, fl, what) in enumerate(ROWS):
        step, size = f"{fn}:{row_size(i)}:{hex(fl)}", row_size(i)
        if what == "hostalloc":
            what = HOST_COHERENT if (v >= (6, 3) and fl in (0, 2)) else (
                DEVICE if v < (6, 3) else HOST_NONCOHERENT)
        rewritten = (fn, fl) in REWRITTEN or (v >= (6, 3) and (fn, fl) in REWRITTEN_63)
        cells = {}
        for n in logs:
            cells[n] = cell(made_by_row(logs[n], step, size))
        rc = {n: outs[n].get(step, "missing") for n in logs}
        rcs = " / ".join(rc[n].split(" ")[1] if " " in rc[n] else rc[n] for n in ("none", "rmcp"))
        print(f"| `{fn}` | `{hex(fl)}` | {cells['none'][0]} | {cells['rmcp'][0]} | {rcs} |")
        ok_none = rc["none"].split(" ")[1:2] == ["rc=0"]
        # Expectations
        if what in (HOST_COHERENT, REGISTERED) and ok_none and not cells["none"][1]:
            fails.append(f"{step}: coherent without rmcp expected, driver got {cells['none'][0]}")
        if what in (HOST_NONCOHERENT, DEVICE) and cells["none"][1]:
            fails.append(f"{step}: non-coherent without rmcp expected, driver got {cells['none'][0]}")
        if rewritten and cells["rmcp"][1]:
            fails.append(f"{step}: rewritten by rmcp, yet the driver got {cells['rmcp'][0]}")
        if what == REGISTERED and not cells["rmcp"][1]:
            fails.append(f"{step}: hipHostRegister should stay coherent with rmcp, got {cells['rmcp'][0]}")
        for same in ("exempt", "off"):
            if cells[same] != cells["none"]:
                fails.append(f"{step}: {same} differs from no rmcp: {cells[same][0]} vs {cells['none'][0]}")
        if cells["r3rmcp"] != cells["r3none"]:
            fails.append(f"{step}: rdna3 with rmcp differs: {cells['r3rmcp'][0]} vs {cells['r3none'][0]}")
        for n, ref in (("rmcp", "none"), ("exempt", "none"), ("off", "none"), ("r3rmcp", "r3none")):
            if rc[n].split(" ")[1:2] != rc[ref].split(" ")[1:2] and not (n == "rmcp" and rewritten):
                fails.append(f"{step}: {n} answered {rc[n]}, {ref} {rc[ref]}")
        for n in logs:
            if "free=0" not in rc[n] and rc[n].split(" ")[1:2] == ["rc=0"]:
                fails.append(f"{step}: {n}: not freed ({rc[n]})")
        for n in ("none", "rmcp", "exempt", "off") + (() if no_gfx11 or r3_stopped else ("r3none", "r3rmcp")):
            if rc[n] == "missing":
                fails.append(f"{step}: {n}: the probe never reached it")
    if no_gfx11 and [r for _, r in logs["r3none"]] != [] and (
            [r.get("ioctl") for _, r in logs["r3none"]] != [r.get("ioctl") for _, r in logs["r3rmcp"]]):
        fails.append("rdna3: the ioctls differ with rmcp")
    for n in ("none", "rmcp", "exempt", "off"):
        frees = sum(1 for _, r in logs[n] if r.get("ioctl") == "AMDKFD_IOC_FREE_MEMORY_OF_GPU")
        if not frees:
            fails.append(f"{n}: no FREE_MEMORY_OF_GPU at all")
    return fails


def internal(runtime, d):
    """Item 4: every COHERENT allocation no hooked call made, in the `seq` runs."""
    fails = []
    for n in ("seqnone", "seqrmcp"):
        path = os.path.join(d, n + ".jsonl")
        if not os.path.exists(path):
            fails.append(f"{n}.jsonl missing")
            continue
        groups = {}
        for step, r in load(path):
            if r.get("ioctl") != "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU" or r.get("ret") != 0:
                continue
            kind, coh = kinds(r)
            if "COHERENT" not in coh or (step and ":" in step and is_own(r, step)):
                continue
            key = (step or "(other thread)", r.get("api", "-"), kind, "|".join(coh), frame_of(r))
            g = groups.setdefault(key, [0, 0])
            g[0] += 1
            g[1] += int(r["size"])
        print(f"\n#### ROCm {runtime}: COHERENT allocations no hooked call made ({'with' if n == 'seqrmcp' else 'without'} rmcp)\n")
        print("| step | HIP entry point | kind | flags | count | bytes | thunk entry point |")
        print("|---|---|---|---|---|---|---|")
        for (step, api, kind, coh, frame), (c, b) in groups.items():
            print(f"| {step} | {api} | {kind} | {coh} | {c} | {b} | {frame} |")
        if n == "seqrmcp" and not groups:
            fails.append("seqrmcp: no runtime-internal COHERENT allocation at all (the list is empty)")
    return fails


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "steps":
        if len(sys.argv) == 4 and sys.argv[3] == "rdna3" and version_tuple(sys.argv[2]) < (5, 3):
            print("init count arch")
        else:
            print(" ".join(steps()))
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == "seq":
        print(" ".join(SEQ))
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "check" and sys.argv[2] == "--runtime":
        runtime, d = sys.argv[3], sys.argv[4]
        fails = check(runtime, d) + internal(runtime, d)
        print()
        for f in fails:
            print(f"FAIL {f}")
        print(f"verdict: {'pass' if not fails else 'FAIL'} ({len(fails)} failed expectations)")
        return 1 if fails else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
