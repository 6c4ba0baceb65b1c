/*
 * miopen_conv.c - one small forward convolution through real MIOpen, loaded the way a Python
 * extension loads it (dlopen, RTLD_LOCAL; no MIOpen headers: the prototypes and structs
 * below are include/miopen/miopen.h's), for reading which solver and kernel MIOpen picks on
 * the emulated GPU with and without one of its switches (issue 41, item 4).
 *
 *   miopen_conv [hang] find|immediate [N C H W K R S [PAD]]   default 1 1 8 8 1 3 3 0, fp32, NCHW
 *
 * find: miopenFindConvolutionForwardAlgorithm (what the search does under MIOPEN_FIND_MODE),
 * then miopenConvolutionForward with the first algorithm found. immediate: the solutions
 * miopenConvolutionForwardGetSolution lists, best first, then the first compiled and run
 * (miopenConvolutionForwardCompileSolution, miopenConvolutionForwardImmediate).
 *
 * hang: on the emulated GPU, emugpu_fault("hang", 0) (dlsym(RTLD_DEFAULT), as emu_probe does)
 * just before the convolution call (miopenConvolutionForward or
 * miopenConvolutionForwardImmediate): the convolution's first dispatch never completes. The
 * program prints `armed hang rc=N` first (-1: no emulator).
 *
 * Prints one line per call: `CALL status=N` and what it returned:
 *   find algo=A time=T memory=M      (A: miopenConvFwdAlgorithm_t, 0 GEMM 1 Direct 2 FFT
 *                                     3 Winograd 5 ImplicitGEMM)
 *   solution id=I algorithm=A time=T workspace=W
 * Exit status 0 when every call succeeded, 1 when one failed, 3 when MIOpen or one of its
 * functions cannot be loaded. Which kernels ran: MIOpen's own log (MIOPEN_ENABLE_LOGGING=1
 * MIOPEN_LOG_LEVEL=6: the solvers listed, tried and chosen, "Preparing kernel: NAME") or
 * HIP's (AMD_LOG_LEVEL=4: one "ShaderName : NAME" per dispatch).
 *
 * rmcp-testkit builds it (RMCP_MIOPEN_CONV): cc -O2 -Wall -Wextra -Werror -o miopen_conv
 * miopen_conv.c -ldl. tests/miopen_hang.rs runs it in the sid root (MIOpen 6.4.3) on the
 * emulated GPU (libemugpu.so preloaded, EMUGPU_FIXTURE the rdna1 fixture). MIOpen builds
 * each kernel on first use, and Debian's 6.4.3 build cannot as the root stands: its HIP
 * kernels are compiled with `/usr/bin/clang++-21 ... -isystem /usr/include`, which breaks
 * libstdc++'s `#include_next <math.h>` ("'math.h' file not found"), and its OpenCL ones
 * (im2col) with the build-time path /build/reproducible-path/miopen-6.4.3+dfsg/build/clang-21.
 * In a private overlay of the root (what the test runs it in), a clang++ that drops that
 * -isystem and a link at that path make both build. The exp root (7.2.4) has no clang, and
 * its MIOpen lacks the prebuilt Winograd kernel it would pick ("Failed to load kernel source:
 * Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s"; with MIOPEN_DEBUG_CONV_WINOGRAD=0, GEMM's
 * im2col fails in hiprtc, "unable to transform options"): its solvers are listed and chosen,
 * no kernel of MIOpen's runs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *handle_t;
typedef struct {
	int fwd_algo; /* the union of three int enums */
	float time;
	size_t memory;
} algo_perf_t;
typedef struct {
	float time;
	size_t workspace_size;
	uint64_t solution_id;
	int algorithm;
} solution_t;

static void *lib;

static void *sym(const char *name)
{
	void *f = dlsym(lib, name);
	if (f == NULL) {
		fprintf(stderr, "miopen_conv: %s not found: %s\n", name, dlerror());
		exit(3);
	}
	return f;
}

#define FN(ret, name, ...) ((ret(*)(__VA_ARGS__))sym(#name))

static int failed;
static int hang;

/* The emulator's hang, armed for the next dispatch (see the usage above). */
static void arm_hang(void)
{
	if (!hang)
		return;
	int (*fault)(const char *, unsigned long long) =
		(int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
	printf("armed hang rc=%d\n", fault ? fault("hang", 0) : -1);
	fflush(stdout);
}

static int check(const char *call, int status)
{
	printf("%s status=%d\n", call, status);
	fflush(stdout);
	if (status != 0)
		failed = 1;
	return status;
}

static void *device_alloc(size_t bytes)
{
	void *p = NULL;
	int rc = FN(int, hipMalloc, void **, size_t)(&p, bytes ? bytes : 4);
	if (rc != 0) {
		printf("hipMalloc(%zu) rc=%d\n", bytes, rc);
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	int dims[8] = {1, 1, 8, 8, 1, 3, 3, 0};
	if (argc > 1 && strcmp(argv[1], "hang") == 0) {
		hang = 1;
		argc--;
		argv++;
	}
	const int immediate = argc > 1 && strcmp(argv[1], "immediate") == 0;
	if (argc < 2 || (!immediate && strcmp(argv[1], "find") != 0)) {
		fprintf(stderr, "usage: miopen_conv [hang] find|immediate [N C H W K R S [PAD]]\n");
		return 2;
	}
	for (int i = 2; i < argc && i < 10; i++)
		dims[i - 2] = atoi(argv[i]);
	const int n = dims[0], c = dims[1], h = dims[2], w = dims[3], k = dims[4], r = dims[5],
		  s = dims[6], pad = dims[7];

	lib = dlopen("libMIOpen.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "miopen_conv: %s\n", dlerror());
		return 3;
	}
	handle_t handle = NULL, xd = NULL, wd = NULL, yd = NULL, cd = NULL;
	if (check("miopenCreate", FN(int, miopenCreate, handle_t *)(&handle)) != 0)
		return 1;
	FN(int, miopenCreateTensorDescriptor, handle_t *)(&xd);
	FN(int, miopenCreateTensorDescriptor, handle_t *)(&wd);
	FN(int, miopenCreateTensorDescriptor, handle_t *)(&yd);
	FN(int, miopenCreateConvolutionDescriptor, handle_t *)(&cd);
	int (*set4d)(handle_t, int, int, int, int, int) =
		FN(int, miopenSet4dTensorDescriptor, handle_t, int, int, int, int, int);
	const int FLOAT = 1; /* miopenFloat */
	check("miopenSet4dTensorDescriptor x", set4d(xd, FLOAT, n, c, h, w));
	check("miopenSet4dTensorDescriptor w", set4d(wd, FLOAT, k, c, r, s));
	/* miopenConvolution (0), pad, stride 1, dilation 1. */
	check("miopenInitConvolutionDescriptor",
	      FN(int, miopenInitConvolutionDescriptor, handle_t, int, int, int, int, int, int,
		 int)(cd, 0, pad, pad, 1, 1, 1, 1));
	int on, oc, oh, ow;
	check("miopenGetConvolutionForwardOutputDim",
	      FN(int, miopenGetConvolutionForwardOutputDim, handle_t, handle_t, handle_t, int *,
		 int *, int *, int *)(cd, xd, wd, &on, &oc, &oh, &ow));
	check("miopenSet4dTensorDescriptor y", set4d(yd, FLOAT, on, oc, oh, ow));
	printf("problem x=%dx%dx%dx%d w=%dx%dx%dx%d y=%dx%dx%dx%d pad=%d\n", n, c, h, w, k, c, r,
	       s, on, oc, oh, ow, pad);

	void *x = device_alloc(sizeof(float) * n * c * h * w);
	void *wt = device_alloc(sizeof(float) * k * c * r * s);
	void *y = device_alloc(sizeof(float) * on * oc * oh * ow);

	if (!immediate) {
		size_t ws_size = 0;
		check("miopenConvolutionForwardGetWorkSpaceSize",
		      FN(int, miopenConvolutionForwardGetWorkSpaceSize, handle_t, handle_t, handle_t,
			 handle_t, handle_t, size_t *)(handle, wd, xd, cd, yd, &ws_size));
		void *ws = device_alloc(ws_size);
		algo_perf_t perf[8];
		int returned = 0;
		memset(perf, 0, sizeof perf);
		check("miopenFindConvolutionForwardAlgorithm",
		      FN(int, miopenFindConvolutionForwardAlgorithm, handle_t, handle_t, const void *,
			 handle_t, const void *, handle_t, handle_t, void *, int, int *,
			 algo_perf_t *, void *, size_t, _Bool)(handle, xd, x, wd, wt, cd, yd, y, 8,
							       &returned, perf, ws, ws_size, 0));
		for (int i = 0; i < returned; i++)
			printf("find algo=%d time=%g memory=%zu\n", perf[i].fwd_algo, perf[i].time,
			       perf[i].memory);
		if (returned > 0) {
			float alpha = 1, beta = 0;
			arm_hang();
			check("miopenConvolutionForward",
			      FN(int, miopenConvolutionForward, handle_t, const void *, handle_t,
				 const void *, handle_t, const void *, handle_t, int, const void *,
				 handle_t, void *, void *, size_t)(handle, &alpha, xd, x, wd, wt, cd,
								   perf[0].fwd_algo, &beta, yd, y,
								   ws, ws_size));
		}
	} else {
		size_t count = 0;
		check("miopenConvolutionForwardGetSolutionCount",
		      FN(int, miopenConvolutionForwardGetSolutionCount, handle_t, handle_t, handle_t,
			 handle_t, handle_t, size_t *)(handle, wd, xd, cd, yd, &count));
		solution_t sol[16];
		memset(sol, 0, sizeof sol);
		if (count > 16)
			count = 16;
		check("miopenConvolutionForwardGetSolution",
		      FN(int, miopenConvolutionForwardGetSolution, handle_t, handle_t, handle_t,
			 handle_t, handle_t, size_t, size_t *, solution_t *)(handle, wd, xd, cd, yd,
									     count, &count, sol));
		for (size_t i = 0; i < count; i++)
			printf("solution id=%llu algorithm=%d time=%g workspace=%zu\n",
			       (unsigned long long)sol[i].solution_id, sol[i].algorithm, sol[i].time,
			       sol[i].workspace_size);
		if (count > 0) {
			void *ws = device_alloc(sol[0].workspace_size);
			check("miopenConvolutionForwardCompileSolution",
			      FN(int, miopenConvolutionForwardCompileSolution, handle_t, handle_t,
				 handle_t, handle_t, handle_t, uint64_t)(handle, wd, xd, cd, yd,
									 sol[0].solution_id));
			arm_hang();
			check("miopenConvolutionForwardImmediate",
			      FN(int, miopenConvolutionForwardImmediate, handle_t, handle_t,
				 const void *, handle_t, const void *, handle_t, handle_t, void *,
				 void *, size_t, uint64_t)(handle, wd, wt, xd, x, cd, yd, y, ws,
							   sol[0].workspace_size,
							   sol[0].solution_id));
		}
	}
	check("hipDeviceSynchronize", FN(int, hipDeviceSynchronize, void)());
	check("miopenDestroy", FN(int, miopenDestroy, handle_t)(handle));
	return failed;
}
