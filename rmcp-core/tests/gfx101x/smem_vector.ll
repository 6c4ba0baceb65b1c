; A VALU write of an SGPR that a scalar load still in flight reads (smem-to-vector):
; v_readfirstlane_b32 takes s4, the kernel argument pointer that the first s_load reads,
; before any s_waitcnt lgkmcnt(0) or SALU instruction. hipcc's code of the same source
; (a readfirstlane next to loads of __restrict__ pointers) came out otherwise.
target triple = "amdgcn-amd-amdhsa"

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.readfirstlane(i32)

define amdgpu_kernel void @smem_readfirstlane(ptr addrspace(1) %out, ptr addrspace(4) %tab) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %l = load i32, ptr addrspace(4) %tab
  %r = call i32 @llvm.amdgcn.readfirstlane(i32 %t)
  %q = getelementptr i32, ptr addrspace(4) %tab, i32 %r
  %l2 = load i32, ptr addrspace(4) %q
  %s = add i32 %l, %l2
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %s, ptr addrspace(1) %p
  ret void
}
