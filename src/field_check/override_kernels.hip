// override_kernels.hip - the GPU code of `rmcp check`'s override experiments: what an
// RX 5000 (gfx101x) does with gfx1030 code, as it runs it under
// HSA_OVERRIDE_GFX_VERSION=10.3.0. Built by build.rs for gfx1030 only, into a bundle of its
// own (the runtime loads it only in the check's child run with the override); measure.rs
// launches each kernel as one thread and override_bugs.rs reads what they wrote.
//
// Two of LLVM's gfx101x differences that give a fixed, harmless answer on the card:
// - FlatSegmentOffsetBug: a FLAT-segment load (flat_*, not global_*) of a global address
//   with an instruction offset reads at offset 0 on gfx101x. rmcp_override_flat_offset
//   loads in[4] as `flat_load_dword v, v[a:b] offset:16` from `in`; the control,
//   rmcp_override_flat_control, loads the same element with the address computed in
//   registers (offset 0). The ignored offset reads in[0], inside the same buffer.
// - v_fmac_legacy_f32 (gfx1030, VOP2 opcode 6, fused) is v_mac_legacy_f32 on gfx101x
//   (multiply, round, add: unfused). rmcp_override_fma_legacy computes in[2] + in[0] * in[1]
//   with it; the control, rmcp_override_fma_control, computes both answers with v_fma_f32
//   and v_mul_f32 + v_add_f32, which both cards run alike.
//
// The instructions under test are inline asm, so that the compiler can neither choose
// global_load for the flat load nor contract or split the arithmetic; each asm waits for
// its own load. No loop, no LDS, no scratch: the tests in override_bugs.rs scan these
// kernels as gfx1010 runs them and find no gfx101x site but the flat offset under test.
// Headers and device libraries are not used (-nogpuinc -nogpulib, as for kernels.hip).

#define KERNEL extern "C" __attribute__((global)) void

KERNEL rmcp_override_flat_offset(const unsigned* in, unsigned* out) {
    unsigned v;
    asm volatile("flat_load_dword %0, %1 offset:16\n\ts_waitcnt vmcnt(0) lgkmcnt(0)"
                 : "=v"(v)
                 : "v"(in)
                 : "memory");
    out[0] = v;
}

KERNEL rmcp_override_flat_control(const unsigned* in, unsigned* out) {
    unsigned v;
    const unsigned* p = in + 4;
    asm volatile("flat_load_dword %0, %1\n\ts_waitcnt vmcnt(0) lgkmcnt(0)"
                 : "=v"(v)
                 : "v"(p)
                 : "memory");
    out[0] = v;
}

KERNEL rmcp_override_fma_legacy(const float* in, float* out) {
    float a = in[0], b = in[1], d = in[2];
    asm volatile("v_fmac_legacy_f32 %0, %1, %2" : "+v"(d) : "v"(a), "v"(b));
    out[0] = d;
}

KERNEL rmcp_override_fma_control(const float* in, float* out) {
    float a = in[0], b = in[1], c = in[2];
    float fused, product, unfused;
    asm volatile("v_fma_f32 %0, %1, %2, %3" : "=v"(fused) : "v"(a), "v"(b), "v"(c));
    asm volatile("v_mul_f32 %0, %1, %2" : "=v"(product) : "v"(a), "v"(b));
    asm volatile("v_add_f32 %0, %1, %2" : "=v"(unfused) : "v"(product), "v"(c));
    out[0] = fused;
    out[1] = unfused;
}
