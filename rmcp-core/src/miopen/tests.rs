use super::*;

const LIB: &str = "/usr/lib/x86_64-linux-gnu/libMIOpen.so.1";

/// Kernel names as MIOpen's solvers give them (src/solver/, src/ocl/ at rocm-5.7.1 and in
/// 6.x; the naive names in both forms), and the family each belongs to.
#[test]
fn names_from_miopens_solvers_fall_in_their_family() {
    use Direction::*;
    use Family::*;
    let cases: &[(&str, Family, bool)] = &[
        // conv_direct_naive_conv.cpp: 5.x, then 6.x's packed/nonpacked forms.
        (
            "naive_conv_fwd_nchw_float_double_float",
            DirectNaive(Forward),
            true,
        ),
        (
            "naive_conv_bwd_ncdhw_half_double_half",
            DirectNaive(Backward),
            true,
        ),
        // MIOpen 6.4.3's forward kernel for an fp32 NCHW problem, as dispatched on the
        // emulated gfx1010.
        (
            "naive_conv_ab_nonpacked_fwd_nchw_float_double_float",
            DirectNaive(Forward),
            true,
        ),
        (
            "naive_conv_ab_nonpacked_wrw_nhwc_float_double_float",
            DirectNaive(Weights),
            true,
        ),
        (
            "naive_conv_ab_packed_fwd_nchw_float_double_float",
            DirectNaive(Forward),
            true,
        ),
        // Direct, assembly and OpenCL.
        ("miopenGcnAsmConv1x1U", Direct, true),
        ("miopenGcnAsmConv1x1U_stride2", Direct, true),
        ("miopenGcnAsmConv3x3U", Direct, true),
        ("miopenGcnAsmConv3x3WrW", Direct, true),
        ("miopenGcnAsmConv7x7c3h224w224k64u2v2p3q3f1", Direct, true),
        ("miopenConv5x10u2v2f1", Direct, true),
        ("MIOpenConvUni", Direct, true),
        ("MIOpenConvUniBatchNormActiv", Direct, true),
        ("MIOpenConv1x1", Direct, true),
        ("MIOpenConv1x1pquv", Direct, true),
        ("MIOpenCDFGen4", Direct, true),
        ("MIOpenCvFwd11x11_2", Direct, true),
        ("MIOpenCvBwdWrW_rdc", Direct, true),
        ("MIOpenCvBwdWrW_16x16map", Direct, true),
        ("SubSample", Direct, false),
        ("UpSample", Direct, false),
        // Winograd.
        ("miopenSp3AsmConv3x3F", Winograd, true),
        ("miopenSp3AsmConvRxSU", Winograd, true),
        ("miopenSp3AsmConvRxSf3x2", Winograd, true),
        ("miopenSp3AsmConvRxSU_CBA", Winograd, true),
        (
            "miopenSp3AsmConv_v21_1_3_gfx10_fp32_f3x2_stride1",
            Winograd,
            true,
        ),
        (
            "miopenSp3AsmConvFury_v2_4_1_gfx11_fp16_dot2_f2x3",
            Winograd,
            true,
        ),
        // MIOpen 7.2.4's choice for a 1x1x8x8 fp32 3x3 forward convolution on a gfx1010
        // (ConvBinWinogradRxSf2x3g1, MIOpen's log).
        (
            "miopenSp3AsmConv_v30_3_1_gfx10_fp32_f2x3_stride1",
            Winograd,
            true,
        ),
        ("miopenGcnAsmWinogradXformData_3_3_2_2", Winograd, true),
        (
            "miopenGcnAsmMPBidirectWinogradXformOut_4_4_3_3",
            Winograd,
            true,
        ),
        // Implicit GEMM.
        (
            "igemm_fwd_gtcn2_nchwc_cyxkc_fp16x4_bx0_ex0_bt128x128x32_lt8x8_lw2x4_lr2x4_ta1x1x1x16_1x8x1x32_tb1x1x4x4_1x8x1x32",
            ImplicitGemm,
            true,
        ),
        (
            "igemm_bwd_gtc_bt128x128x16_tt8x8_gm2x4x4_gn2x4x4_ta1x1x1x2x4_",
            ImplicitGemm,
            true,
        ),
        (
            "igemm_v4r1_dynamic_wrw_128x128x16_8x8_4x4x4x4x4x4_16x1x16x1_16x16",
            ImplicitGemm,
            true,
        ),
        (
            "gridwise_convolution_implicit_gemm_v4r1_nchw_kcyx_nkhw_lds_double_buffer",
            ImplicitGemm,
            true,
        ),
        (
            "gridwise_convolution_backward_data_implicit_gemm_v1r1_xdlops_nchw_kcyx_nkhw",
            ImplicitGemm,
            true,
        ),
        (
            "convolution_forward_implicit_gemm_v6r1_dlops_nchw_kcyx_nkhw",
            ImplicitGemm,
            true,
        ),
        ("mlir_gen_igemm_conv2d_v4r4_fwd_xdlops0", ImplicitGemm, true),
        ("wrw_reduction_hip", ImplicitGemm, true),
        (
            "_ZN2ck49kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleI",
            ImplicitGemm,
            false,
        ),
        // FFT, GEMM.
        ("MIOpenConvFFT_fwd_in", Fft, true),
        ("MIOpenConvFFT_cgemm", Fft, true),
        ("Im2d2Col", Gemm, false),
        // MIOpen 6.4.3's im2col, as HIP's log names the dispatch on the emulated gfx1010.
        ("Im2d2Col_v2", Gemm, false),
        ("Im3d2Col", Gemm, false),
        ("Col2Im2d", Gemm, false),
        ("transpose_NCHW2CNHW", Gemm, false),
        // Not convolutions.
        (
            "MIOpenBatchNormFwdTrainSpatial",
            Other("batch normalization"),
            true,
        ),
        (
            "MIOpenBatchNormBwdSpatialFinalDScaleDBias",
            Other("batch normalization"),
            true,
        ),
        (
            "miopenGcnAsmBNBwdTrainSpatial",
            Other("batch normalization"),
            true,
        ),
        ("mloPoolingG", Other("pooling"), true),
        ("mloPoolingForwardNaive", Other("pooling"), true),
        ("MIOpenNeuronFwd", Other("activation"), true),
        ("MIOpenActiveBwdLite", Other("activation"), true),
        ("SoftmaxForwardMultiBatch", Other("softmax"), false),
        ("Op4dTensorLite", Other("a tensor operation"), false),
        ("OpTensorFwdBias", Other("a tensor operation"), false),
        (
            "_ZN2ck24kernel_batchnorm_forward",
            Other("a composable_kernel operation"),
            false,
        ),
    ];
    for (name, family, only) in cases {
        assert_eq!(family_of(name), Some((*family, *only)), "{name}");
    }
    for name in [
        "_Z4fillPii",
        "Cijk_Ailk_Bljk_SB_MT64x64x8",
        "naive_conv_",
        "igemm",
        "",
    ] {
        assert_eq!(family_of(name), None, "{name}");
    }
}

#[test]
fn miopens_files_are_its_library_its_build_folder_and_its_databases() {
    for path in [
        LIB,
        "/usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0",
        "/opt/rocm-6.4.3/lib/libMIOpen.so.1.0.60403",
        "/home/u/venv/lib/python3.12/site-packages/torch/lib/libMIOpen.so",
        "libMIOpen.so",
        // hipModuleLoad's files after a build, as MIOpen 6.4.3 loaded them (HIP's log).
        "/tmp/miopen-MIOpenIm2d2Col.cl-b354-0c16-9f14-35ad/MIOpenIm2d2Col.cl.o",
        "/tmp/miopen-naive_conv.cpp-7a32-2670-77be-71f2/naive_conv.cpp.o",
        "/tmp/miopen-0f1e-2d3c-4b5a-6978/naive_conv.cpp.o",
        "/home/u/.cache/miopen/3.4.0.0b54/gfx1010_20.ukdb",
        "/usr/share/miopen/db/gfx1030_36.kdb",
    ] {
        assert!(is_miopen_file(path), "{path}");
    }
    for path in [
        "/usr/lib/x86_64-linux-gnu/librocblas.so.4",
        "/opt/app/libmiopen_helpers_not.so",
        "/tmp/miopen-notes/k.o",
        "/tmp/miopen-1a2b-3c4d-5e6f/k.o",
        "/tmp/miopen-zzzz-3c4d-5e6f-7a8b/k.o",
        "/home/u/.cache/other/x.ukdb",
        "",
    ] {
        assert!(!is_miopen_file(path), "{path}");
    }
}

/// By library and name: a MIOpen file decides; another file decides against; no file leaves
/// only the names no other library uses.
#[test]
fn identify_by_library_and_name() {
    let ident = |name: &str, files: &[&str]| identify(name, files);
    assert_eq!(
        ident("miopenSp3AsmConvRxSU", &[LIB]),
        Some(Identified {
            family: Family::Winograd,
            by: By::LibraryAndName
        })
    );
    // A name MIOpen shares with others: its library says whose it is.
    assert_eq!(
        ident("SubSample", &["/opt/app/libother.so", LIB]).map(|k| k.family),
        Some(Family::Direct)
    );
    assert_eq!(ident("SubSample", &[]), None);
    assert_eq!(ident("SubSample", &["/opt/app/libother.so"]), None);
    // Another library's kernel that happens to carry a MIOpen-like name.
    assert_eq!(
        ident("naive_conv_fwd_nchw_float", &["/opt/app/libmine.so"]),
        None
    );
    // No file known: the distinctive name alone.
    assert_eq!(
        ident("igemm_fwd_gtcx_nchw_fp32_bx0_ex1_bt256x128x16", &[]),
        Some(Identified {
            family: Family::ImplicitGemm,
            by: By::Name
        })
    );
    // MIOpen's library, a name rmcp does not know.
    assert_eq!(
        ident("SomeNewKernel", &[LIB]),
        Some(Identified {
            family: Family::Unknown,
            by: By::Library
        })
    );
    assert_eq!(ident("_Z4fillPii", &[]), None);
}

#[test]
fn each_family_gets_its_own_switch_and_the_search_switch() {
    let names = |f: Family| -> Vec<String> { switches(f).iter().map(|s| s.assignment()).collect() };
    assert_eq!(
        names(Family::DirectNaive(Direction::Forward)),
        [
            "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD=0",
            "MIOPEN_DEBUG_CONV_DIRECT=0",
            "MIOPEN_FIND_MODE=FAST"
        ]
    );
    assert_eq!(
        names(Family::DirectNaive(Direction::Weights))[0],
        "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_WRW=0"
    );
    assert_eq!(
        names(Family::DirectNaive(Direction::Backward))[0],
        "MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_BWD=0"
    );
    for (f, var) in [
        (Family::Direct, "MIOPEN_DEBUG_CONV_DIRECT=0"),
        (Family::Winograd, "MIOPEN_DEBUG_CONV_WINOGRAD=0"),
        (Family::ImplicitGemm, "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM=0"),
        (Family::Gemm, "MIOPEN_DEBUG_CONV_GEMM=0"),
        (Family::Fft, "MIOPEN_DEBUG_CONV_FFT=0"),
    ] {
        assert_eq!(names(f), [var, "MIOPEN_FIND_MODE=FAST"], "{f:?}");
    }
    assert!(switches(Family::Other("pooling")).is_empty());
    assert!(switches(Family::Unknown).is_empty());
    for f in [
        Family::Direct,
        Family::DirectNaive(Direction::Forward),
        Family::Fft,
    ] {
        for s in switches(f) {
            assert!(s.source.starts_with("MIOpen "), "{s:?}");
            assert!(!s.does.is_empty());
        }
    }
}

#[test]
fn the_advice_names_the_kernel_the_switches_and_their_source() {
    let lines = advice("naive_conv_fwd_nchw_float_double_float", &[LIB]);
    assert_eq!(
        lines[0],
        "  MIOpen's kernel (by its library): naive_conv_fwd_nchw_float_double_float, from \
         the naive Direct convolution solver (forward)"
    );
    assert_eq!(
        lines[1],
        "  MIOpen's own switches that avoid it (set one and rerun):"
    );
    assert!(lines[2].starts_with(
        "    MIOPEN_DEBUG_CONV_DIRECT_NAIVE_CONV_FWD=0: turns off the naive forward solver alone"
    ));
    assert!(lines[2].ends_with(
        "(MIOpen src/solver/conv/conv_direct_naive_conv_fwd.cpp (before 6.3: src/solver/))"
    ));
    assert!(lines[3].starts_with("    MIOPEN_DEBUG_CONV_DIRECT=0: "));
    assert!(lines[4].starts_with("    MIOPEN_FIND_MODE=FAST: no search"));
    assert!(lines[4].contains("find-and-immediate.rst"));
    assert_eq!(lines.len(), 5);

    assert_eq!(
        advice("mloPoolingG", &[LIB]),
        [
            "  MIOpen's kernel (by its library): mloPoolingG, from MIOpen's pooling, not a convolution",
            "  MIOpen documents no switch that avoids this kernel"
        ]
    );
    assert!(advice("SomeNewKernel", &[LIB])[1].contains("MIOPEN_LOG_LEVEL=6"));
    assert!(advice("miopenSp3AsmConvRxSU", &[])[0].contains("(by its name only)"));
    assert!(advice("_Z4fillPii", &["/opt/app/app"]).is_empty());
    for name in ["MIOpenConvFFT_fwd_in", "Im2d2Col", "SubSample"] {
        for l in advice(name, &[LIB]) {
            assert!(!l.contains('\n') && l.starts_with("  "), "{l}");
        }
    }
}
