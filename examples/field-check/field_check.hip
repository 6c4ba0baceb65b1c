// field_check.hip - are device atomics on coherent host memory right on this machine?
//
// The failure rmcp exists for (ROCm/clr issue 285, reproduced on gfx1010 and gfx1031):
// on a platform without PCIe AtomicOps, atomics such as atomicMin into fine-grained
// (coherent) host memory give wrong results with no error, while the same atomics on
// non-coherent host memory and on VRAM are right.
//
// This program runs atomicMin / atomicMax / atomicAdd / atomicCAS kernels from many
// threads into an accumulator placed in
//   vram              hipMalloc
//   host-default      hipHostMalloc(flags 0)           coherent: what PyTorch, rocBLAS... ask for
//   host-mapped       hipHostMalloc(Mapped)            coherent
//   host-coherent     hipHostMalloc(Coherent)          coherent
//   host-noncoherent  hipHostMalloc(NonCoherent)       non-coherent: the control
// and compares every slot with the answer the host computes. Under librmcp_shim.so the
// three coherent host placements reach the runtime as NonCoherent; `hipHostGetFlags` shows
// the flags the runtime really received.
//
// Output (stdout), one `key: value` header per fact, then one line per placement and
// operation, `PLACEMENT OP BAD/TOTAL` (or `PLACEMENT OP error: ...`), then the verdict:
//
//   field-check: 1
//   hip-runtime: 50221153
//   device: 0 gfx1031 "AMD Radeon RX 6750 XT" pci 0000:03:00.0
//   kfd: node 1 gfx1031 pcie-atomics unsupported (io_links flags [13])
//   shim: not loaded
//   flags: host-default asked 0x0 runtime 0x0
//   ...
//   host-default atomicMin 256/256
//   ...
//   verdict: wrong: host-default host-mapped host-coherent
//
// Exit status:
//   0  every placement gave the host's answer for every operation
//   1  at least one placement gave a wrong answer
//   2  no usable device: hipGetDeviceCount failed or found none (nothing was run)
//   3  no wrong answer, but some placement could not be measured (a HIP call failed,
//      e.g. no code object for this GPU's gfx: rebuild with FIELD_CHECK_ARCHS)
//   64 bad arguments (the only ones: `--kfd PCI_BUS_ID`, which prints the kfd line for that
//      address and exits 0; it tests the topology reading without a GPU)
//
// Build: ./build.sh (hipcc, one code object per default rmcp target). See README.md.

#include <hip/hip_runtime.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define FIELD_CHECK_FORMAT 1

enum ExitStatus { EXIT_RIGHT = 0, EXIT_WRONG = 1, EXIT_NO_DEVICE = 2, EXIT_INCOMPLETE = 3 };

// 256 slots, each hit by 1024 threads: 262144 threads per operation.
constexpr unsigned SLOTS = 256;
constexpr unsigned PER_SLOT = 1024;
constexpr unsigned THREADS = SLOTS * PER_SLOT;
constexpr unsigned BLOCK = 256;
constexpr unsigned GRID = THREADS / BLOCK;

enum Op { OP_MIN, OP_MAX, OP_ADD, OP_CAS, OP_COUNT };
static const char* const OP_NAMES[OP_COUNT] = {"atomicMin", "atomicMax", "atomicAdd",
                                               "atomicCAS"};

// A hash, so that every slot sees its threads' values in no particular order.
__host__ __device__ inline unsigned mix(unsigned x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

__host__ __device__ inline int value_of(unsigned t, unsigned op) {
    return static_cast<int>(mix(t * 4u + op) & 0x3fffffffu);
}

// Thread t works on slot t % SLOTS.
__global__ void k_min(int* acc) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < THREADS) atomicMin(&acc[t % SLOTS], value_of(t, OP_MIN));
}

__global__ void k_max(int* acc) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < THREADS) atomicMax(&acc[t % SLOTS], value_of(t, OP_MAX));
}

__global__ void k_add(unsigned* acc) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < THREADS) atomicAdd(&acc[t % SLOTS], static_cast<unsigned>(value_of(t, OP_ADD)) & 0xffffu);
}

// Every thread tries once to swap 0 for its own id + 1. Exactly one per slot may see 0
// come back; `wins` (always VRAM) counts them.
__global__ void k_cas(unsigned* acc, unsigned* wins) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < THREADS) {
        unsigned old = atomicCAS(&acc[t % SLOTS], 0u, t + 1u);
        if (old == 0u) atomicAdd(&wins[t % SLOTS], 1u);
    }
}

static void init_slots(Op op, unsigned* s) {
    for (unsigned i = 0; i < SLOTS; i++) {
        switch (op) {
            case OP_MIN: s[i] = 0x7fffffffu; break;
            case OP_MAX: s[i] = 0u; break;
            default: s[i] = 0u; break;
        }
    }
}

// The host's answer for min/max/add.
static std::vector<unsigned> expected(Op op) {
    std::vector<unsigned> e(SLOTS);
    init_slots(op, e.data());
    for (unsigned t = 0; t < THREADS; t++) {
        unsigned s = t % SLOTS;
        int v = value_of(t, op);
        switch (op) {
            case OP_MIN: if (v < static_cast<int>(e[s])) e[s] = static_cast<unsigned>(v); break;
            case OP_MAX: if (v > static_cast<int>(e[s])) e[s] = static_cast<unsigned>(v); break;
            case OP_ADD: e[s] += static_cast<unsigned>(v) & 0xffffu; break;
            default: break;
        }
    }
    return e;
}

static unsigned count_bad(Op op, const unsigned* got, const unsigned* wins) {
    unsigned bad = 0;
    if (op == OP_CAS) {
        for (unsigned s = 0; s < SLOTS; s++) {
            unsigned v = got[s];
            bool ok = v != 0u && v <= THREADS && (v - 1u) % SLOTS == s && wins[s] == 1u;
            if (!ok) bad++;
        }
        return bad;
    }
    std::vector<unsigned> e = expected(op);
    for (unsigned s = 0; s < SLOTS; s++)
        if (got[s] != e[s]) bad++;
    return bad;
}

struct Placement {
    const char* name;
    bool host;
    unsigned flags;  // hipHostMalloc flags
};

static const Placement PLACEMENTS[] = {
    {"vram", false, 0},
    {"host-default", true, 0},
    {"host-mapped", true, hipHostMallocMapped},
    {"host-coherent", true, hipHostMallocCoherent},
    {"host-noncoherent", true, hipHostMallocNonCoherent},
};

enum Outcome { RIGHT, WRONG, FAILED };

static std::string err_str(hipError_t e) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s (%d)", hipGetErrorName(e), static_cast<int>(e));
    return buf;
}

// Runs one operation on one placement; prints its line.
static Outcome run_op(const Placement& p, Op op) {
    const size_t bytes = SLOTS * sizeof(unsigned);
    unsigned* host = nullptr;  // host view (host placements)
    unsigned* dev = nullptr;   // what the kernel gets
    unsigned* wins = nullptr;  // VRAM, atomicCAS only
    std::vector<unsigned> got(SLOTS), won(SLOTS, 0);
    std::string failure;
    hipError_t e = hipSuccess;

#define TRY(call, what)                                      \
    do {                                                     \
        e = (call);                                          \
        if (e != hipSuccess) {                               \
            failure = std::string(what) + ": " + err_str(e); \
            goto done;                                       \
        }                                                    \
    } while (0)

    if (p.host) {
        TRY(hipHostMalloc(reinterpret_cast<void**>(&host), bytes, p.flags), "hipHostMalloc");
        if (hipHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0) != hipSuccess ||
            dev == nullptr) {
            (void)hipGetLastError();
            dev = host;  // ROCm maps pinned host memory at the same address on the device
        }
        init_slots(op, host);
    } else {
        std::vector<unsigned> init(SLOTS);
        init_slots(op, init.data());
        TRY(hipMalloc(reinterpret_cast<void**>(&dev), bytes), "hipMalloc");
        TRY(hipMemcpy(dev, init.data(), bytes, hipMemcpyHostToDevice), "hipMemcpy");
    }
    if (op == OP_CAS) {
        TRY(hipMalloc(reinterpret_cast<void**>(&wins), bytes), "hipMalloc");
        TRY(hipMemset(wins, 0, bytes), "hipMemset");
    }
    TRY(hipDeviceSynchronize(), "hipDeviceSynchronize");
    switch (op) {
        case OP_MIN: hipLaunchKernelGGL(k_min, dim3(GRID), dim3(BLOCK), 0, 0, reinterpret_cast<int*>(dev)); break;
        case OP_MAX: hipLaunchKernelGGL(k_max, dim3(GRID), dim3(BLOCK), 0, 0, reinterpret_cast<int*>(dev)); break;
        case OP_ADD: hipLaunchKernelGGL(k_add, dim3(GRID), dim3(BLOCK), 0, 0, dev); break;
        default: hipLaunchKernelGGL(k_cas, dim3(GRID), dim3(BLOCK), 0, 0, dev, wins); break;
    }
    TRY(hipGetLastError(), "kernel launch");
    TRY(hipDeviceSynchronize(), "kernel");
    if (p.host) {
        memcpy(got.data(), host, bytes);
    } else {
        TRY(hipMemcpy(got.data(), dev, bytes, hipMemcpyDeviceToHost), "hipMemcpy");
    }
    if (wins) TRY(hipMemcpy(won.data(), wins, bytes, hipMemcpyDeviceToHost), "hipMemcpy");
#undef TRY

done:
    if (wins) (void)hipFree(wins);
    if (p.host && host) (void)hipHostFree(host);
    if (!p.host && dev) (void)hipFree(dev);
    if (!failure.empty()) {
        printf("%s %s error: %s\n", p.name, OP_NAMES[op], failure.c_str());
        return FAILED;
    }
    unsigned bad = count_bad(op, got.data(), won.data());
    printf("%s %s %u/%u\n", p.name, OP_NAMES[op], bad, SLOTS);
    return bad ? WRONG : RIGHT;
}

// The flags the runtime received for hipHostMalloc(flags): under the shim the coherent
// requests show up as NonCoherent here.
static void print_flags(const Placement& p) {
    void* h = nullptr;
    hipError_t e = hipHostMalloc(&h, 4096, p.flags);
    if (e != hipSuccess) {
        printf("flags: %s asked 0x%x error: %s\n", p.name, p.flags, err_str(e).c_str());
        return;
    }
    unsigned got = 0;
    e = hipHostGetFlags(&got, h);
    if (e == hipSuccess)
        printf("flags: %s asked 0x%x runtime 0x%x\n", p.name, p.flags, got);
    else
        printf("flags: %s asked 0x%x runtime unknown (hipHostGetFlags: %s)\n", p.name, p.flags,
               err_str(e).c_str());
    (void)hipHostFree(h);
}

// ---- KFD topology, read the way `rmcp doctor` reads it ----

// The value of `key` in a KFD properties file (`name value` lines, unsigned decimal).
// Lines that are not `name number` are skipped, as rmcp doctor skips them.
static bool read_props(const std::string& path, const char* key, unsigned long long* out) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return false;
    char line[512], name[128], rest[8];
    unsigned long long v;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        errno = 0;
        int n = sscanf(line, "%127s %llu %7s", name, &v, rest);
        if (n != 2 || strcmp(name, key) != 0) continue;
        // "-1" and out-of-range values are not unsigned numbers.
        const char* num = line + strlen(name);
        while (*num == ' ' || *num == '\t') num++;
        if (*num == '-' || errno == ERANGE) continue;
        *out = v;
        found = true;
    }
    fclose(f);
    return found;
}

static std::vector<std::string> numbered(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    std::vector<long> nums;
    while (dirent* ent = readdir(d)) {
        char* end = nullptr;
        long n = strtol(ent->d_name, &end, 10);
        if (end != ent->d_name && *end == '\0' && n >= 0) nums.push_back(n);
    }
    closedir(d);
    std::sort(nums.begin(), nums.end());
    for (long n : nums) out.push_back(dir + "/" + std::to_string(n));
    return out;
}

static std::string gfx_name(unsigned long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "gfx%llu%llx%llx", v / 10000, (v / 100) % 100, v % 100);
    return buf;
}

static std::string topology_root() {
    const char* r = getenv("RMCP_SYSFS_ROOT");
    return (r && *r) ? r : "/sys/class/kfd/kfd/topology";
}

static int kfd_gpu_count() {
    int n = 0;
    for (const std::string& node : numbered(topology_root() + "/nodes")) {
        unsigned long long simd = 0;
        if (read_props(node + "/properties", "simd_count", &simd) && simd > 0) n++;
    }
    return n;
}

// "kfd: node N gfxXXXX pcie-atomics supported|unsupported|unknown (io_links flags [..])"
static void print_kfd(const char* pci_bus_id) {
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) {
        printf("kfd: unknown (PCI bus id \"%s\" not understood)\n", pci_bus_id);
        return;
    }
    unsigned long long loc = (bus << 8) | (dev << 3) | fn;
    std::string root = topology_root();
    for (const std::string& node : numbered(root + "/nodes")) {
        std::string props = node + "/properties";
        unsigned long long simd = 0, d = 0, l = 0, gfx = 0;
        if (!read_props(props, "simd_count", &simd) || simd == 0) continue;
        if (!read_props(props, "domain", &d) || !read_props(props, "location_id", &l)) continue;
        if (d != dom || l != loc) continue;
        read_props(props, "gfx_target_version", &gfx);
        std::string flags;
        bool any = false, no_atomics = false;
        for (const std::string& link : numbered(node + "/io_links")) {
            unsigned long long f = 0;
            if (!read_props(link + "/properties", "flags", &f)) continue;
            flags += (any ? ", " : "") + std::to_string(f);
            any = true;
            if (f & (0x4 | 0x8)) no_atomics = true;
        }
        const char* atomics = !any ? "unknown" : no_atomics ? "unsupported" : "supported";
        printf("kfd: node %s %s pcie-atomics %s (io_links flags [%s])\n",
               node.substr(node.rfind('/') + 1).c_str(), gfx ? gfx_name(gfx).c_str() : "unknown",
               atomics, flags.c_str());
        return;
    }
    printf("kfd: unknown (no GPU node at %s under %s)\n", pci_bus_id, root.c_str());
}

// "shim: loaded /path/librmcp_shim.so" or "shim: not loaded"
static void print_shim() {
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) {
        printf("shim: unknown (/proc/self/maps: %s)\n", strerror(errno));
        return;
    }
    char line[4096];
    std::string found;
    while (fgets(line, sizeof line, f)) {
        const char* path = strchr(line, '/');
        if (!path) continue;
        std::string p(path);
        while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
        const std::string name = "librmcp_shim.so";
        if (p.size() >= name.size() && p.compare(p.size() - name.size(), name.size(), name) == 0 &&
            (p.size() == name.size() || p[p.size() - name.size() - 1] == '/')) {
            found = p;
            break;
        }
    }
    fclose(f);
    if (found.empty())
        printf("shim: not loaded\n");
    else
        printf("shim: loaded %s\n", found.c_str());
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    // `--kfd PCI_BUS_ID`: print only the kfd line for that address (tests the topology
    // reading against fixtures, no GPU needed; RMCP_SYSFS_ROOT picks the root).
    if (argc == 3 && strcmp(argv[1], "--kfd") == 0) {
        print_kfd(argv[2]);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--kfd PCI_BUS_ID]\n", argv[0]);
        return 64;
    }
    printf("field-check: %d\n", FIELD_CHECK_FORMAT);
    int rt = 0;
    if (hipRuntimeGetVersion(&rt) == hipSuccess)
        printf("hip-runtime: %d\n", rt);
    else
        printf("hip-runtime: unknown\n");
    print_shim();

    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if (e != hipSuccess || count <= 0) {
        int kfd = kfd_gpu_count();
        printf("device: none (hipGetDeviceCount: %s, %d devices)\n",
               e == hipSuccess ? "hipSuccess (0)" : err_str(e).c_str(), e == hipSuccess ? count : 0);
        if (kfd > 0)
            printf("kfd: %d GPU node(s) in %s, but HIP can use none: check access to /dev/kfd "
                   "and /dev/dri/renderD* (rmcp doctor)\n",
                   kfd, topology_root().c_str());
        else
            printf("kfd: no GPU node in %s\n", topology_root().c_str());
        printf("verdict: no usable device: nothing was run\n");
        return EXIT_NO_DEVICE;
    }

    // Device 0 only: HIP_VISIBLE_DEVICES picks another.
    hipDeviceProp_t prop;
    memset(&prop, 0, sizeof prop);
    char pci[64] = "unknown";
    if (hipGetDeviceProperties(&prop, 0) != hipSuccess) strcpy(prop.gcnArchName, "unknown");
    if (hipDeviceGetPCIBusId(pci, sizeof pci, 0) != hipSuccess) strcpy(pci, "unknown");
    prop.name[sizeof prop.name - 1] = '\0';
    prop.gcnArchName[sizeof prop.gcnArchName - 1] = '\0';
    printf("device: 0 %s \"%s\" pci %s (%d visible)\n", prop.gcnArchName, prop.name, pci, count);
    const char* ov = getenv("HSA_OVERRIDE_GFX_VERSION");
    if (ov && *ov) printf("hsa-override-gfx-version: %s\n", ov);
    if (strcmp(pci, "unknown") == 0)
        printf("kfd: unknown (hipDeviceGetPCIBusId failed)\n");
    else
        print_kfd(pci);
    for (const Placement& p : PLACEMENTS)
        if (p.host) print_flags(p);

    std::string wrong, failed;
    for (const Placement& p : PLACEMENTS) {
        bool w = false, f = false;
        for (int op = 0; op < OP_COUNT; op++) {
            Outcome o = run_op(p, static_cast<Op>(op));
            w |= o == WRONG;
            f |= o == FAILED;
        }
        if (w) wrong += std::string(" ") + p.name;
        if (f) failed += std::string(" ") + p.name;
    }
    if (!wrong.empty()) {
        if (failed.empty())
            printf("verdict: wrong:%s\n", wrong.c_str());
        else
            printf("verdict: wrong:%s; could not measure:%s\n", wrong.c_str(), failed.c_str());
        return EXIT_WRONG;
    }
    if (!failed.empty()) {
        printf("verdict: incomplete: could not measure%s\n", failed.c_str());
        return EXIT_INCOMPLETE;
    }
    printf("verdict: right: every placement gave the host's answer\n");
    return EXIT_RIGHT;
}
