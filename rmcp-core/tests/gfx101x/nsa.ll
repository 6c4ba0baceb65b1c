; Image instructions in the NSA encoding (their address VGPRs not contiguous), written as
; IR because clang 15 has no image builtins: NSA samples of 9 and 11 addresses followed at
; once by buffer stores with offset bits 1-2 set (nsa-to-vmem; sched.barrier keeps them
; adjacent), and NSA image loads that the hard-clause pass groups (nsa-clause).
target triple = "amdgcn-amd-amdhsa"

declare <4 x float> @llvm.amdgcn.image.sample.d.3d.v4f32.f32.f32(i32, float, float, float, float, float, float, float, float, float, <8 x i32>, <4 x i32>, i1, i32, i32)
declare <4 x float> @llvm.amdgcn.image.sample.c.d.cl.3d.v4f32.f32.f32(i32, float, float, float, float, float, float, float, float, float, float, float, <8 x i32>, <4 x i32>, i1, i32, i32)
declare <4 x float> @llvm.amdgcn.image.load.3d.v4f32.i32(i32, i32, i32, i32, <8 x i32>, i32, i32)
declare float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32>, i32, i32, i32)
declare void @llvm.amdgcn.raw.buffer.store.f32(float, <4 x i32>, i32, i32, i32)
declare i32 @llvm.amdgcn.workitem.id.x()

define amdgpu_kernel void @nsa_sample_then_buffer(ptr addrspace(4) %res, ptr addrspace(4) %smp, ptr addrspace(4) %bufp, ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %r = load <8 x i32>, ptr addrspace(4) %res
  %s = load <4 x i32>, ptr addrspace(4) %smp
  %b = load <4 x i32>, ptr addrspace(4) %bufp
  %base = mul i32 %t, 12
  %p0 = getelementptr float, ptr addrspace(1) %in, i32 %base
  %v = load <12 x float>, ptr addrspace(1) %p0
  %a0 = extractelement <12 x float> %v, i32 0
  %a1 = extractelement <12 x float> %v, i32 3
  %a2 = extractelement <12 x float> %v, i32 6
  %a3 = extractelement <12 x float> %v, i32 9
  %a4 = extractelement <12 x float> %v, i32 1
  %a5 = extractelement <12 x float> %v, i32 11
  %a6 = extractelement <12 x float> %v, i32 2
  %a7 = extractelement <12 x float> %v, i32 8
  %a8 = extractelement <12 x float> %v, i32 5
  %a9 = extractelement <12 x float> %v, i32 4
  %a10 = extractelement <12 x float> %v, i32 10
  %x = call <4 x float> @llvm.amdgcn.image.sample.d.3d.v4f32.f32.f32(i32 15, float %a0, float %a1, float %a2, float %a3, float %a4, float %a5, float %a6, float %a7, float %a8, <8 x i32> %r, <4 x i32> %s, i1 false, i32 0, i32 0)
  %off = shl i32 %t, 2
  %off4 = add i32 %off, 4
  %y = call float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32> %b, i32 %off4, i32 0, i32 0)
  %off12 = add i32 %off, 12
  %z = call float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32> %b, i32 %off12, i32 0, i32 0)
  %x2 = call <4 x float> @llvm.amdgcn.image.sample.c.d.cl.3d.v4f32.f32.f32(i32 15, float %a9, float %a10, float %a3, float %a0, float %a7, float %a5, float %a1, float %a8, float %a2, float %a4, float %a6, <8 x i32> %r, <4 x i32> %s, i1 false, i32 0, i32 0)
  %off6 = add i32 %off, 6
  %w = call float @llvm.amdgcn.raw.buffer.load.f32(<4 x i32> %b, i32 %off6, i32 0, i32 0)
  %x3 = fadd <4 x float> %x, %x2
  %yz = fadd float %y, %z
  %yzw = fadd float %yz, %w
  %e = insertelement <4 x float> %x3, float %yzw, i32 3
  %po = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %t
  store <4 x float> %e, ptr addrspace(1) %po
  ret void
}

define amdgpu_kernel void @nsa_clause(ptr addrspace(4) %res, ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %r = load <8 x i32>, ptr addrspace(4) %res
  %base = mul i32 %t, 8
  %p0 = getelementptr i32, ptr addrspace(1) %in, i32 %base
  %v = load <8 x i32>, ptr addrspace(1) %p0
  %c0 = extractelement <8 x i32> %v, i32 0
  %c1 = extractelement <8 x i32> %v, i32 3
  %c2 = extractelement <8 x i32> %v, i32 6
  %c3 = extractelement <8 x i32> %v, i32 1
  %c4 = extractelement <8 x i32> %v, i32 5
  %c5 = extractelement <8 x i32> %v, i32 7
  %l0 = call <4 x float> @llvm.amdgcn.image.load.3d.v4f32.i32(i32 15, i32 %c0, i32 %c2, i32 %c4, <8 x i32> %r, i32 0, i32 0)
  %l1 = call <4 x float> @llvm.amdgcn.image.load.3d.v4f32.i32(i32 15, i32 %c1, i32 %c5, i32 %c0, <8 x i32> %r, i32 0, i32 0)
  %l2 = call <4 x float> @llvm.amdgcn.image.load.3d.v4f32.i32(i32 15, i32 %c3, i32 %c1, i32 %c2, <8 x i32> %r, i32 0, i32 0)
  %l3 = call <4 x float> @llvm.amdgcn.image.load.3d.v4f32.i32(i32 15, i32 %c5, i32 %c3, i32 %c1, <8 x i32> %r, i32 0, i32 0)
  %s0 = fadd <4 x float> %l0, %l1
  %s1 = fadd <4 x float> %l2, %l3
  %s2 = fadd <4 x float> %s0, %s1
  %po = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %t
  store <4 x float> %s2, ptr addrspace(1) %po
  ret void
}

define amdgpu_kernel void @nsa_sample_then_store(ptr addrspace(4) %res, ptr addrspace(4) %smp, ptr addrspace(4) %bufp, ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %r = load <8 x i32>, ptr addrspace(4) %res
  %s = load <4 x i32>, ptr addrspace(4) %smp
  %b = load <4 x i32>, ptr addrspace(4) %bufp
  %base = mul i32 %t, 12
  %p0 = getelementptr float, ptr addrspace(1) %in, i32 %base
  %v = load <12 x float>, ptr addrspace(1) %p0
  %a0 = extractelement <12 x float> %v, i32 0
  %a1 = extractelement <12 x float> %v, i32 3
  %a2 = extractelement <12 x float> %v, i32 6
  %a3 = extractelement <12 x float> %v, i32 9
  %a4 = extractelement <12 x float> %v, i32 1
  %a5 = extractelement <12 x float> %v, i32 11
  %a6 = extractelement <12 x float> %v, i32 2
  %a7 = extractelement <12 x float> %v, i32 8
  %a8 = extractelement <12 x float> %v, i32 5
  %a9 = extractelement <12 x float> %v, i32 4
  %a10 = extractelement <12 x float> %v, i32 10
  %off = shl i32 %t, 2
  %off4 = add i32 %off, 4
  %off12 = add i32 %off, 12
  call void @llvm.amdgcn.sched.barrier(i32 0)
  %x = call <4 x float> @llvm.amdgcn.image.sample.d.3d.v4f32.f32.f32(i32 15, float %a0, float %a1, float %a2, float %a3, float %a4, float %a5, float %a6, float %a7, float %a8, <8 x i32> %r, <4 x i32> %s, i1 false, i32 0, i32 0)
  call void @llvm.amdgcn.sched.barrier(i32 0)
  call void @llvm.amdgcn.raw.buffer.store.f32(float %a9, <4 x i32> %b, i32 %off4, i32 0, i32 0)
  %x2 = call <4 x float> @llvm.amdgcn.image.sample.c.d.cl.3d.v4f32.f32.f32(i32 15, float %a9, float %a10, float %a3, float %a0, float %a7, float %a5, float %a1, float %a8, float %a2, float %a4, float %a6, <8 x i32> %r, <4 x i32> %s, i1 false, i32 0, i32 0)
  call void @llvm.amdgcn.sched.barrier(i32 0)
  call void @llvm.amdgcn.raw.buffer.store.f32(float %a10, <4 x i32> %b, i32 %off12, i32 0, i32 0)
  %x3 = fadd <4 x float> %x, %x2
  %po = getelementptr <4 x float>, ptr addrspace(1) %out, i32 %t
  store <4 x float> %x3, ptr addrspace(1) %po
  ret void
}
declare void @llvm.amdgcn.sched.barrier(i32)
