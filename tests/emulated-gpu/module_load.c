/*
 * module_load.c: loads a code object from memory the three ways a HIP program does, for the
 * load-time fix's tests (tests/module_load.rs) on the emulated GPU (scripts/emulated-gpu).
 *
 *   module_load MODE FILE [KERNEL]
 *
 * MODE:
 *   data    hipModuleLoadData(&module, image) by name (a PLT call; the reference is weak, so
 *           the program links against the fake runtime, which lacks it)
 *   dataex  hipModuleLoadDataEx(&module, image, 0, NULL, NULL) by name
 *   file    hipModuleLoad(&module, FILE) by name
 *   reload  FILE N: N times, the image copied into a new heap buffer, hipModuleLoadData,
 *           hipModuleUnload, the buffer freed (an autotuner, a notebook cell run again);
 *           prints "reload loads=N failed=F hwm_kb=K" (K: the process's peak resident
 *           memory, VmHWM)
 *   twice   FILE KERNEL: loads the image twice by name (hipModuleLoadData, two heap
 *           buffers), unloads the first module, then hipModuleGetFunction(KERNEL) on the
 *           second and unloads it; prints "twice load=N load=N unload=N function=N unload=N"
 *   proc    as Triton's HIP driver (third_party/amd/backend/driver.c): dlopen(LIB,
 *           RTLD_LAZY | RTLD_LOCAL) with LIB from RMCP_TEST_HIP_LIB (default
 *           "libamdhip64.so"), dlsym "hipDriverGetVersion" and "hipGetProcAddress" (with
 *           dlerror() checked), then hipGetProcAddress("hipModuleLoadDataEx", ...,
 *           version, 0, &status) and that pointer called
 * In the modes by name, RMCP_TEST_DEVICE=N makes device N current first (hipSetDevice).
 * The image is FILE read into a heap buffer; after the call the buffer is compared with a
 * second copy. With KERNEL, hipModuleGetFunction(&f, module, KERNEL) follows (looked up the
 * same way as the load). Prints
 *   load rc=N identical=0|1
 *   function rc=N            (with KERNEL)
 * After the load it has the emulated GPU, when loaded, append what the GPU can see to
 * EMUGPU_CODE_DUMP (emugpu_dump_code). Exits 0 when every call returned hipSuccess and the buffer is unchanged, 1 otherwise,
 * 2 on a bad argument or a lookup that failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

hipError_t hipModuleLoadData(void **module, const void *image) __attribute__((weak));
hipError_t hipModuleLoadDataEx(void **module, const void *image, unsigned n, int *options,
			       void **values) __attribute__((weak));
hipError_t hipModuleLoad(void **module, const char *fname) __attribute__((weak));

typedef hipError_t (*load_ex_fn)(void **, const void *, unsigned, int *, void **);
typedef hipError_t (*get_function_fn)(void **, void *, const char *);
typedef hipError_t (*proc_fn)(const char *, void **, int, uint64_t, int *);
typedef hipError_t (*version_fn)(int *);

static unsigned char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void mark(const char *text)
{
	void (*m)(const char *) = (void (*)(const char *))dlsym(RTLD_DEFAULT, "emugpu_mark");
	if (m)
		m(text);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: module_load data|dataex|file|proc FILE [KERNEL]\n");
		return 2;
	}
	const char *mode = argv[1], *path = argv[2], *kernel = argc > 3 ? argv[3] : NULL;
	size_t len = 0;
	unsigned char *image = read_file(path, &len), *copy = image ? malloc(len) : NULL;
	if (!image || !copy) {
		fprintf(stderr, "module_load: cannot read %s\n", path);
		return 2;
	}
	memcpy(copy, image, len);

	if (!strcmp(mode, "twice")) {
		hipError_t (*unload)(void *) = (hipError_t(*)(void *))dlsym(RTLD_DEFAULT, "hipModuleUnload");
		get_function_fn get = (get_function_fn)dlsym(RTLD_DEFAULT, "hipModuleGetFunction");
		unsigned char *b1 = malloc(len), *b2 = malloc(len);
		void *m1 = NULL, *m2 = NULL, *f = NULL;
		if (!hipModuleLoadData || !unload || !get || !b1 || !b2 || argc < 4) {
			fprintf(stderr, "module_load: twice needs hipModuleLoadData, hipModuleUnload, "
					"hipModuleGetFunction and KERNEL\n");
			return 2;
		}
		memcpy(b1, image, len);
		memcpy(b2, image, len);
		hipError_t l1 = hipModuleLoadData(&m1, b1), l2 = hipModuleLoadData(&m2, b2);
		hipError_t u1 = l1 ? -1 : unload(m1);
		hipError_t g = l2 ? -1 : get(&f, m2, argv[3]);
		void (*dump)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "emugpu_dump_code");
		if (dump)
			dump();
		hipError_t u2 = l2 ? -1 : unload(m2);
		printf("twice load=%d load=%d unload=%d function=%d unload=%d\n", l1, l2, u1, g, u2);
		fflush(stdout);
		return l1 || l2 || u1 || g || u2;
	}

	if (!strcmp(mode, "reload")) {
		long n = argc > 3 ? atol(argv[3]) : 0, failed = 0;
		hipError_t (*unload)(void *) = (hipError_t(*)(void *))dlsym(RTLD_DEFAULT, "hipModuleUnload");
		if (!hipModuleLoadData || !unload || n <= 0) {
			fprintf(stderr, "module_load: reload needs hipModuleLoadData, hipModuleUnload and N\n");
			return 2;
		}
		for (long i = 0; i < n; i++) {
			unsigned char *b = malloc(len);
			void *m = NULL;
			if (!b)
				return 2;
			memcpy(b, image, len);
			if (hipModuleLoadData(&m, b) || unload(m))
				failed++;
			free(b);
		}
		long hwm = -1;
		FILE *st = fopen("/proc/self/status", "r");
		char line[256];
		while (st && fgets(line, sizeof line, st))
			if (!strncmp(line, "VmHWM:", 6))
				hwm = atol(line + 6);
		if (st)
			fclose(st);
		printf("reload loads=%ld failed=%ld hwm_kb=%ld\n", n, failed, hwm);
		fflush(stdout);
		return failed ? 1 : 0;
	}

	void *module = NULL, *function = NULL;
	hipError_t rc;
	get_function_fn get_function = NULL;
	mark("begin load");
	if (!strcmp(mode, "proc")) {
		const char *name = getenv("RMCP_TEST_HIP_LIB");
		void *lib = dlopen(name && *name ? name : "libamdhip64.so", RTLD_LAZY | RTLD_LOCAL);
		if (!lib) {
			fprintf(stderr, "module_load: dlopen: %s\n", dlerror());
			return 2;
		}
		version_fn version = (version_fn)dlsym(lib, "hipDriverGetVersion");
		int v = 0;
		if (!version || version(&v)) {
			fprintf(stderr, "module_load: hipDriverGetVersion failed\n");
			return 2;
		}
		dlerror();
		proc_fn proc = (proc_fn)dlsym(lib, "hipGetProcAddress");
		const char *err = dlerror();
		if (err || !proc) {
			fprintf(stderr, "module_load: cannot query 'hipGetProcAddress': %s\n",
				err ? err : "null");
			return 2;
		}
		load_ex_fn load_ex = NULL;
		int status = -1;
		rc = proc("hipModuleLoadDataEx", (void **)&load_ex, v, 0, &status);
		if (rc || !load_ex) {
			fprintf(stderr, "module_load: hipGetProcAddress(hipModuleLoadDataEx) rc=%d status=%d\n",
				rc, status);
			return 2;
		}
		if (kernel && proc("hipModuleGetFunction", (void **)&get_function, v, 0, &status)) {
			fprintf(stderr, "module_load: hipGetProcAddress(hipModuleGetFunction) failed\n");
			return 2;
		}
		rc = load_ex(&module, image, 0, NULL, NULL);
	} else {
		const char *device = getenv("RMCP_TEST_DEVICE");
		hipError_t (*set_device)(int) = (hipError_t(*)(int))dlsym(RTLD_DEFAULT, "hipSetDevice");
		if (device && *device && (!set_device || set_device(atoi(device)))) {
			fprintf(stderr, "module_load: hipSetDevice(%s) failed\n", device);
			return 2;
		}
		if (kernel)
			get_function = (get_function_fn)dlsym(RTLD_DEFAULT, "hipModuleGetFunction");
		if (!strcmp(mode, "data") && hipModuleLoadData) {
			rc = hipModuleLoadData(&module, image);
		} else if (!strcmp(mode, "dataex") && hipModuleLoadDataEx) {
			rc = hipModuleLoadDataEx(&module, image, 0, NULL, NULL);
		} else if (!strcmp(mode, "file") && hipModuleLoad) {
			rc = hipModuleLoad(&module, path);
		} else {
			fprintf(stderr, "module_load: %s: no such mode, or no runtime defines it\n", mode);
			return 2;
		}
	}
	int identical = memcmp(image, copy, len) == 0;
	printf("load rc=%d identical=%d\n", rc, identical);
	mark("end load");
	/* The emulated GPU's code read-back (tests/emulated-gpu/emugpu.c), when it is loaded. */
	void (*dump)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "emugpu_dump_code");
	if (dump)
		dump();
	int ok = rc == 0 && identical;
	if (kernel) {
		if (!get_function) {
			fprintf(stderr, "module_load: no hipModuleGetFunction\n");
			return 2;
		}
		hipError_t f = rc ? -1 : get_function(&function, module, kernel);
		printf("function rc=%d\n", f);
		ok = ok && f == 0;
	}
	fflush(stdout);
	return ok ? 0 : 1;
}
