// The one table of HIP entry points rmcp interposes, included by rmcp-sys (src/lib.rs) and
// by the preloaded front (rmcp-shim/front/front.rs), which is `no_std` and built outside
// cargo's crate graph: so nothing here may name anything but `core`.

/// The one table of HIP entry points rmcp interposes: name, `Hook` variant, the C
/// signature (hip_runtime_api.h), and which arguments carry the out-pointer, the size and
/// the flags. `resolves SYMBOL into PFN` marks a function that hands out function pointers
/// by name; `host location in PROP` one whose `hipMemAllocationProp` argument may ask for host
/// memory (counted, never changed); `names FUNCTION from NAME` one that makes a
/// `hipFunction_t` for a kernel name (kept for the fault report); `loads image from IMAGE` one
/// that loads a code object from memory (the shim may hand the runtime a fixed copy of
/// `IMAGE`: `rmcp-shim/src/module_load.rs`); `loads file FNAME` one that loads a code object
/// from a file (named in the log, never changed); `unloads module MODULE` one that unloads a
/// module (the shim releases a fixed copy it handed the runtime for it, once no module uses
/// it); `waits KIND` a call that waits for the GPU (device, stream, event, copy: the
/// watchdog, `rmcp-shim/src/watchdog.rs`, sees it waiting). Everything that lists hooks is
/// generated from this table: `HipApi` here,
/// `rmcp_core::registry::Hook`, the shim's exports and its linker version script.
///
/// Invoke with the name of a local macro, which receives the rows.
#[macro_export]
macro_rules! hooked_functions {
    ($callback:ident) => {
        $callback! {
            hipMalloc = HipMalloc (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipExtMallocWithFlags = HipExtMallocWithFlags
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostMalloc = HipHostMalloc
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostAlloc = HipHostAlloc
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipMallocHost = HipMallocHost (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipMemAllocHost = HipMemAllocHost (ptr: *mut *mut ::core::ffi::c_void, size: usize)
                => out: ptr, size: size, flags: 0;
            hipMallocManaged = HipMallocManaged
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ptr, size: size, flags: flags;
            hipHostRegister = HipHostRegister
                (host_ptr: *mut ::core::ffi::c_void, size: usize, flags: ::core::ffi::c_uint)
                => out: ::core::ptr::null_mut(), size: size, flags: flags;
            /// Since hip_5.1.
            hipMallocAsync = HipMallocAsync
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, stream: *mut ::core::ffi::c_void)
                => out: ptr, size: size, flags: 0;
            /// Since hip_5.1.
            hipMallocFromPoolAsync = HipMallocFromPoolAsync
                (ptr: *mut *mut ::core::ffi::c_void, size: usize, pool: *mut ::core::ffi::c_void,
                 stream: *mut ::core::ffi::c_void)
                => out: ptr, size: size, flags: 0;
            /// Since hip_6.1. `status` is a `hipDriverProcAddressQueryResult*`.
            hipGetProcAddress = HipGetProcAddress
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 hip_version: ::core::ffi::c_int, flags: u64, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
            /// Since hip_7.1. Resolves names as hipGetProcAddress does (dlsym on the runtime's
            /// own handle, trying `NAME_spt` first for hipEnablePerThreadDefaultStream).
            /// `status` is a `hipDriverEntryPointQueryResult*`.
            hipGetDriverEntryPoint = HipGetDriverEntryPoint
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
            /// Since hip_5.1. `handle` is a `hipMemGenericAllocationHandle_t*`, `prop` a
            /// `const hipMemAllocationProp*` (see `mem_alloc_prop`).
            hipMemCreate = HipMemCreate
                (handle: *mut u64, size: usize, prop: *const ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong)
                => out: ::core::ptr::null_mut(), size: size, flags: 0, host location in prop;
            /// `hipModuleGetFunction(hipFunction_t *function, hipModule_t, const char *name)`:
            /// unchanged; the name is kept for the function it made, to name its launches in
            /// the GPU fault report.
            hipModuleGetFunction = HipModuleGetFunction
                (function: *mut *mut ::core::ffi::c_void, module: *mut ::core::ffi::c_void,
                 kname: *const ::core::ffi::c_char)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, names function from kname;
            /// `hipModuleLoadData(hipModule_t *module, const void *image)`: a code object (an
            /// ELF or an offload bundle) in memory. The runtime keeps the pointer for the
            /// module's life.
            hipModuleLoadData = HipModuleLoadData
                (module: *mut *mut ::core::ffi::c_void, image: *const ::core::ffi::c_void)
                => out: module, size: 0, flags: 0, loads image from image;
            /// `hipModuleLoadDataEx(hipModule_t *module, const void *image, unsigned int
            /// numOptions, hipJitOption *options, void **optionValues)`: what Triton's HIP
            /// driver calls (through hipGetProcAddress); the options are not used by the runtime.
            hipModuleLoadDataEx = HipModuleLoadDataEx
                (module: *mut *mut ::core::ffi::c_void, image: *const ::core::ffi::c_void,
                 num_options: ::core::ffi::c_uint, options: *mut ::core::ffi::c_int,
                 option_values: *mut *mut ::core::ffi::c_void)
                => out: module, size: 0, flags: 0, loads image from image;
            /// `hipModuleLoad(hipModule_t *module, const char *fname)`: a code object file,
            /// forwarded unchanged (the file is named in the log when it is a broken one).
            hipModuleLoad = HipModuleLoad
                (module: *mut *mut ::core::ffi::c_void, fname: *const ::core::ffi::c_char)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, loads file fname;
            /// `hipModuleUnload(hipModule_t module)`: forwarded unchanged; afterwards a fixed
            /// copy of the module's image that no other module uses is freed.
            hipModuleUnload = HipModuleUnload (module: *mut ::core::ffi::c_void)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, unloads module module;
            /// `hipDeviceSynchronize(void)`: forwarded unchanged; while it waits, the
            /// watchdog (RMCP_HANG_AFTER) may say what the GPU is running.
            hipDeviceSynchronize = HipDeviceSynchronize ()
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits device;
            /// `hipStreamSynchronize(hipStream_t)`: as hipDeviceSynchronize.
            hipStreamSynchronize = HipStreamSynchronize (stream: *mut ::core::ffi::c_void)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits stream;
            /// The per-thread-default-stream form (hip_5.2).
            hipStreamSynchronize_spt = HipStreamSynchronizeSpt (stream: *mut ::core::ffi::c_void)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits stream;
            /// `hipEventSynchronize(hipEvent_t)`: as hipDeviceSynchronize.
            hipEventSynchronize = HipEventSynchronize (event: *mut ::core::ffi::c_void)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits event;
            /// `hipMemcpy(void *dst, const void *src, size_t, hipMemcpyKind)`: a blocking copy,
            /// which waits for the work before it on the null stream; as hipDeviceSynchronize.
            hipMemcpy = HipMemcpy
                (dst: *mut ::core::ffi::c_void, src: *const ::core::ffi::c_void, bytes: usize,
                 kind: ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits copy;
            /// `hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t)`: as hipMemcpy.
            hipMemcpyDtoH = HipMemcpyDtoH
                (dst: *mut ::core::ffi::c_void, src: *mut ::core::ffi::c_void, bytes: usize)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, waits copy;
            /// Since hip_7.1: what hipGetDriverEntryPoint becomes in code built with
            /// per-thread default streams (`amd_hip_runtime_pt_api.h`).
            hipGetDriverEntryPoint_spt = HipGetDriverEntryPointSpt
                (symbol: *const ::core::ffi::c_char, pfn: *mut *mut ::core::ffi::c_void,
                 flags: ::core::ffi::c_ulonglong, status: *mut ::core::ffi::c_int)
                => out: ::core::ptr::null_mut(), size: 0, flags: 0, resolves symbol into pfn;
        }
    };
}

/// The second part of the table: entry points rmcp observes. Each goes on, with every
/// argument register and the stack as the caller left them (but the one argument a row
/// says it may replace: a queue's error callback, a fat binary's wrapper), to the function
/// the caller would have reached, whose answer returns straight to the caller; on the way
/// the shim records one fact (a launch, a kernel's name, a queue's error callback, a fat
/// binary under an override). So a row needs no C signature: only its name,
/// its `Observed` variant, and what it records, which the body's `observe` matches
/// exhaustively. Rows take no floating-point argument (the body may use the vector registers
/// while recording). `passive`: the front maps the body for this row's call only when the
/// caller is a HIP runtime, so that a process using ROCr without HIP (OpenCL, rocminfo)
/// loads nothing.
///
/// Invoke with the name of a local macro and any tokens to pass before the rows.
#[macro_export]
macro_rules! observed_functions {
    ($callback:ident $($extra:tt)*) => {
        $callback! { $($extra)*
            /// `hipLaunchKernel(const void *stub, dim3, dim3, void **, size_t, hipStream_t)`:
            /// what `<<<>>>` and hipLaunchKernelGGL lower to. Records the stub (rdi).
            hipLaunchKernel = HipLaunchKernel, launch stub;
            /// The per-thread-default-stream form (hip_5.2).
            hipLaunchKernel_spt = HipLaunchKernelSpt, launch stub;
            /// `hipLaunchCooperativeKernel(const void *stub, dim3, dim3, void **, unsigned,
            /// hipStream_t)`.
            hipLaunchCooperativeKernel = HipLaunchCooperativeKernel, launch stub;
            hipLaunchCooperativeKernel_spt = HipLaunchCooperativeKernelSpt, launch stub;
            /// `hipExtLaunchKernel(const void *stub, dim3, dim3, void **, size_t, hipStream_t,
            /// hipEvent_t, hipEvent_t, int)`: hipExtLaunchKernelGGL.
            hipExtLaunchKernel = HipExtLaunchKernel, launch stub;
            /// `hipModuleLaunchKernel(hipFunction_t, ...)`: a function from
            /// hipModuleGetFunction (rdi).
            hipModuleLaunchKernel = HipModuleLaunchKernel, launch function;
            /// `hipExtModuleLaunchKernel(hipFunction_t, ...)`.
            hipExtModuleLaunchKernel = HipExtModuleLaunchKernel, launch function;
            /// `hipHccModuleLaunchKernel(hipFunction_t, ...)`.
            hipHccModuleLaunchKernel = HipHccModuleLaunchKernel, launch function;
            /// `hipModuleLaunchCooperativeKernel(hipFunction_t, ...)` (hip_6.x).
            hipModuleLaunchCooperativeKernel = HipModuleLaunchCooperativeKernel, launch function;
            /// `hipLaunchKernelExC(const hipLaunchConfig_t *, const void *stub, void **)`
            /// (hip_6.2): the stub is the second argument (rsi).
            hipLaunchKernelExC = HipLaunchKernelExC, launch stub_second;
            /// `hipDrvLaunchKernelEx(const HIP_LAUNCH_CONFIG *, hipFunction_t, void **,
            /// void **)` (hip_6.2): the function is the second argument (rsi).
            hipDrvLaunchKernelEx = HipDrvLaunchKernelEx, launch function_second;
            /// `hipGraphLaunch(hipGraphExec_t, hipStream_t)`: a graph's kernels run without a
            /// launch call of their own. Records the executable graph (rdi).
            hipGraphLaunch = HipGraphLaunch, launch graph;
            /// The per-thread-default-stream form.
            hipGraphLaunch_spt = HipGraphLaunchSpt, launch graph;
            /// `hipStreamBeginCapture(hipStream_t, hipStreamCaptureMode)`: launches on the
            /// stream go into a graph until hipStreamEndCapture. Records the stream (rdi).
            hipStreamBeginCapture = HipStreamBeginCapture, capture begin;
            hipStreamBeginCapture_spt = HipStreamBeginCaptureSpt, capture begin;
            /// `hipStreamEndCapture(hipStream_t, hipGraph_t *)`. Records the stream (rdi).
            hipStreamEndCapture = HipStreamEndCapture, capture end;
            hipStreamEndCapture_spt = HipStreamEndCaptureSpt, capture end;
            /// `hipGraphAddKernelNode(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *,
            /// size_t, const hipKernelNodeParams *)`: records the parameters' `func` (r8), a
            /// host stub.
            hipGraphAddKernelNode = HipGraphAddKernelNode, graph kernel;
            /// `hipGraphKernelNodeSetParams(hipGraphNode_t, const hipKernelNodeParams *)` (rsi).
            hipGraphKernelNodeSetParams = HipGraphKernelNodeSetParams, graph kernel_second;
            /// `hipGraphExecKernelNodeSetParams(hipGraphExec_t, hipGraphNode_t, const
            /// hipKernelNodeParams *)` (rdx).
            hipGraphExecKernelNodeSetParams = HipGraphExecKernelNodeSetParams, graph kernel_third;
            /// `void __hipRegisterFunction(void **modules, const void *stub, char *, const char
            /// *name, ...)`: every fat binary registers each kernel's host stub with its
            /// device name when it loads. Records (rsi, rcx).
            __hipRegisterFunction = HipRegisterFunction, names stub;
            /// `void **__hipRegisterFatBinary(const void *data)`: a program's or library's
            /// constructor hands the runtime its fat binary (`data`, a
            /// `__CudaFatBinaryWrapper`). Under an override that makes a gfx1010-gfx1013 card
            /// run gfx103x code, `data` (rdi) may become a private wrapper of a bundle holding
            /// only the entry the runtime loads, with words fixed in place
            /// (`rmcp-shim/src/fatbin.rs`); otherwise it goes on as the caller passed it.
            __hipRegisterFatBinary = HipRegisterFatBinary, registers fatbin;
            /// `hsa_status_t hsa_queue_create(hsa_agent_t, uint32_t, hsa_queue_type32_t,
            /// callback, void *data, uint32_t, uint32_t, hsa_queue_t **)` (ROCR_1): HIP's
            /// queues, whose error callback (rcx) the shim wraps.
            hsa_queue_create = HsaQueueCreate, queue passive;
            /// `hsa_status_t hsa_executable_freeze(hsa_executable_t, const char *)` (ROCR_1):
            /// every code object HIP loads (a registered fat binary's, a module's) is frozen
            /// into its executable before its kernels run; their kernel objects and names are
            /// read then, so that the dispatch a queue is running can be named at fault time
            /// without asking ROCr. Records the executable (rdi).
            hsa_executable_freeze = HsaExecutableFreeze, executable passive;
        }
    };
}
