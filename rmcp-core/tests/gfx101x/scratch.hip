// Private arrays read at negative offsets that are not multiples of 4
// (negative-unaligned-scratch-offset). The bug is in the flat scratch instructions
// (scratch_*), which LLVM 15 uses for gfx1030 only with flat scratch enabled; the line
// below makes every build of this file add it.
// llc-mattr: +enable-flat-scratch
#include <hip/hip_runtime.h>

extern "C" __global__ void scratch_bytes(char* out, const int* idx) {
    char buf[300];
    int t = threadIdx.x;
    for (int i = 0; i < 300; i++) buf[i] = (char)(i * t + idx[i]);
    int k = idx[t];
    char* p = buf + k;
    out[t] = p[0] + p[-3] + p[-7] + p[5] + p[-1] + p[-6];
    short* q = (short*)(buf + (k & ~1));
    out[t + 1] = q[-1] + q[-3];
}

extern "C" __global__ void scratch_words(int* out, const int* idx) {
    int buf[64];
    int t = threadIdx.x;
    for (int i = 0; i < 64; i++) buf[i] = i * t + idx[i];
    int* p = buf + idx[t];
    out[t] = p[-1] + p[-2] + p[3];
}
