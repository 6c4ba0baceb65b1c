// kernels.hip - the GPU code of `rmcp check`: atomicMin / atomicMax / atomicAdd / atomicCAS
// from many threads into 256 slots. rmcp loads the compiled bundle with hipModuleLoadData
// and launches these by name (src/field_check/measure.rs computes the host's answers with
// the same `mix` and `value_of`, and launches GRID blocks of BLOCK threads).
//
// Built by build.rs with hipcc --genco into one offload bundle, code object v4, for the
// targets build.rs lists. No HIP header and no device library (-nogpuinc -nogpulib): the
// thread index and the atomics are clang builtins, so the same source builds for targets
// the installed device libraries lack (Debian's 5.2.3 has none for gfx11). The atomics are
// those HIP's atomicMin/Max/Add/CAS compile to: relaxed, agent scope.

#define KERNEL extern "C" __attribute__((global)) void
#define DEVICE static __attribute__((device)) inline

constexpr unsigned SLOTS = 256;
constexpr unsigned PER_SLOT = 1024;
constexpr unsigned THREADS = SLOTS * PER_SLOT;
constexpr unsigned BLOCK = 256;

enum Op { OP_MIN, OP_MAX, OP_ADD, OP_CAS };

// A hash, so that every slot sees its threads' values in no particular order.
DEVICE unsigned mix(unsigned x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

DEVICE int value_of(unsigned t, unsigned op) {
    return static_cast<int>(mix(t * 4u + op) & 0x3fffffffu);
}

// The launch is GRID blocks of BLOCK threads, one dimension.
DEVICE unsigned thread_id() {
    return __builtin_amdgcn_workgroup_id_x() * BLOCK + __builtin_amdgcn_workitem_id_x();
}

// Thread t works on slot t % SLOTS.
KERNEL rmcp_check_min(int* acc) {
    unsigned t = thread_id();
    if (t < THREADS)
        __hip_atomic_fetch_min(&acc[t % SLOTS], value_of(t, OP_MIN), __ATOMIC_RELAXED,
                               __HIP_MEMORY_SCOPE_AGENT);
}

KERNEL rmcp_check_max(int* acc) {
    unsigned t = thread_id();
    if (t < THREADS)
        __hip_atomic_fetch_max(&acc[t % SLOTS], value_of(t, OP_MAX), __ATOMIC_RELAXED,
                               __HIP_MEMORY_SCOPE_AGENT);
}

KERNEL rmcp_check_add(unsigned* acc) {
    unsigned t = thread_id();
    if (t < THREADS)
        __hip_atomic_fetch_add(&acc[t % SLOTS], static_cast<unsigned>(value_of(t, OP_ADD)) & 0xffffu,
                               __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

// Every thread tries once to swap 0 for its own id + 1. Exactly one per slot may see 0
// come back; `wins` (always VRAM) counts them.
KERNEL rmcp_check_cas(unsigned* acc, unsigned* wins) {
    unsigned t = thread_id();
    if (t < THREADS) {
        unsigned expected = 0u;
        __hip_atomic_compare_exchange_strong(&acc[t % SLOTS], &expected, t + 1u, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
        if (expected == 0u)
            __hip_atomic_fetch_add(&wins[t % SLOTS], 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    }
}
