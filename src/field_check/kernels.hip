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

// ---- Buffer resource layouts (issue: Triton's kernels write nothing on an RX 5000) ----
//
// Each thread t < BUF_N stores value(t) to out[t] through a raw buffer store, and loads
// in[t] through a raw buffer load into back[t] (a plain global store), all through buffer
// resource descriptors made here with word 3 a constant, as Triton's AMD backend makes them
// (BufferOpsEmitter.cpp, createResourceDescriptor): base address, stride 0, NUM_RECORDS the
// buffer's bytes. measure.rs counts the elements written (out) and read back (back).
// - rmcp_check_buffer_triton: word 3 = 0x00027000, Triton's layout for RDNA1 (gfx101x);
// - rmcp_check_buffer_rdna:   word 3 = 0x31027000, the RDNA layout (RESOURCE_LEVEL bit 24,
//   OOB_SELECT 3) that rmcp writes in place of the first, and Triton uses on RDNA2/3;
// - rmcp_check_global:        the same with plain global loads and stores: the control.
// The intrinsics are LLVM's (llvm.amdgcn.raw.buffer.load/store with a v4i32 resource);
// the constants reach the code as `s_mov_b32 sN, <literal>`, as in Triton's kernels.

constexpr unsigned BUF_N = 4096;
typedef int rmcp_v4i __attribute__((ext_vector_type(4)));

__attribute__((device)) int rmcp_raw_buffer_load(rmcp_v4i rsrc, int voffset, int soffset, int aux)
    __asm("llvm.amdgcn.raw.buffer.load.i32");
__attribute__((device)) void rmcp_raw_buffer_store(int v, rmcp_v4i rsrc, int voffset, int soffset,
                                                   int aux)
    __asm("llvm.amdgcn.raw.buffer.store.i32");

DEVICE rmcp_v4i descriptor(const void* p, unsigned word3) {
    unsigned long long a = reinterpret_cast<unsigned long long>(p);
    rmcp_v4i r;
    r.x = static_cast<int>(static_cast<unsigned>(a));
    r.y = static_cast<int>(static_cast<unsigned>(a >> 32) & 0xffffu);  // stride 0
    r.z = static_cast<int>(BUF_N * 4u);                                  // NUM_RECORDS (bytes)
    r.w = static_cast<int>(word3);
    return r;
}

// What thread t stores (never 0: the host zeroes `out` first).
DEVICE unsigned buffer_value(unsigned t) {
    return mix(t ^ 0x9e3779b9u) | 1u;
}

#define BUFFER_KERNEL(name, word3)                                                           \
    KERNEL name(const unsigned* in, unsigned* out, unsigned* back) {                         \
        unsigned t = thread_id();                                                            \
        if (t < BUF_N) {                                                                     \
            rmcp_raw_buffer_store(static_cast<int>(buffer_value(t)), descriptor(out, word3), \
                                  static_cast<int>(t * 4u), 0, 0);                           \
            back[t] = static_cast<unsigned>(                                                 \
                rmcp_raw_buffer_load(descriptor(in, word3), static_cast<int>(t * 4u), 0, 0)); \
        }                                                                                    \
    }

BUFFER_KERNEL(rmcp_check_buffer_triton, 0x00027000u)
BUFFER_KERNEL(rmcp_check_buffer_rdna, 0x31027000u)

KERNEL rmcp_check_global(const unsigned* in, unsigned* out, unsigned* back) {
    unsigned t = thread_id();
    if (t < BUF_N) {
        out[t] = buffer_value(t);
        back[t] = in[t];
    }
}
