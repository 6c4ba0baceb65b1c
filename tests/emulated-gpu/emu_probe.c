/*
 * emu_probe.c: the HIP program the emulated-GPU tests run (scripts/emulated-gpu).
 *
 * Linked with -lamdhip64 (rmcp-testkit/build.rs links it against the fake runtime's soname,
 * so Debian's real libamdhip64.so.5/.6/.7 is what loads): the hooked allocation calls go
 * through the PLT, where rmcp's shim meets them. The other HIP functions are looked up with
 * dlsym(RTLD_DEFAULT), so the fake runtime need not define them.
 *
 * Each step is bracketed with emugpu_mark("begin STEP") / ("end STEP rc=N") in the
 * emulator's log (a hooked call also with "call FUNC" / "free FUNC" around the call
 * itself), and prints one line "STEP rc=N [detail]". Steps:
 *   init                 hipInit(0)
 *   count                hipGetDeviceCount -> "count=N"
 *   arch                 hipGetDeviceProperties(0) -> "arch=gfx..." (gcnArchName)
 *   FUNC:SIZE:FLAGS      a hooked allocation, then its free (hipFree, hipHostFree,
 *                        hipHostUnregister; hipMallocAsync/FromPoolAsync: on a new stream,
 *                        then hipFreeAsync + hipStreamSynchronize); hipHostRegister registers a page-aligned
 *                        buffer of SIZE bytes from mmap
 *   h2d:SIZE / d2h:SIZE  hipMemcpy between a malloc'd host buffer and a hipMalloc'd one
 *   memset:SIZE          hipMemset on a hipMalloc'd buffer
 *   sync                 hipDeviceSynchronize
 *   peekerror            hipPeekAtLastError: its answer is the step's rc
 *   lasterror            hipGetLastError: its answer is the step's rc
 *   load:PATH            hipModuleLoad(PATH), hipModuleGetFunction(.., "k"), and a hipMalloc'd
 *                        4 KiB buffer for it -> "ptr=0x..." (the buffer)
 *   loaddata:PATH        the same with the file read into memory and hipModuleLoadData
 *   fault:KIND[@VA]      emugpu_fault(KIND, VA): the emulator faults the next dispatch
 *                        (without VA: at its first kernel argument, the buffer)
 *   kernel:NAME          hipModuleGetFunction(.., NAME) on the module last loaded: the
 *                        kernel later launches run (load: makes it "k")
 *   stream:N             later launches go to stream N: 0 the null stream, 1-7 streams made
 *                        by hipStreamCreate when first named
 *   sleep:SECONDS        sleep(SECONDS): the GPU goes on meanwhile
 *   threads              -> "names=A,B,.." the process's threads' names (/proc/self/task)
 *   launch               hipModuleLaunchKernel(the kernel, 1x1x1, 1x1x1, args: the buffer)
 *                        on the current stream
 *   launch@thread        the same launch from a new thread, joined before the next step
 * Exit status: 0 when every step returned hipSuccess, 1 otherwise, 2 on a bad argument.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int hipError_t;

hipError_t hipMalloc(void **p, size_t n);
hipError_t hipExtMallocWithFlags(void **p, size_t n, unsigned flags);
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags);
hipError_t hipHostAlloc(void **p, size_t n, unsigned flags);
hipError_t hipMallocHost(void **p, size_t n);
hipError_t hipMemAllocHost(void **p, size_t n);
hipError_t hipMallocManaged(void **p, size_t n, unsigned flags);
hipError_t hipHostRegister(void *p, size_t n, unsigned flags);
hipError_t hipMallocAsync(void **p, size_t n, void *stream);
hipError_t hipMallocFromPoolAsync(void **p, size_t n, void *pool, void *stream);

static void (*mark)(const char *);

/* "call" right before the hooked call, "free" right after it returned: what the driver
 * receives in between is the call's own (kfd_table.py). */
static void phase(const char *what, const char *fn)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s %s", what, fn);
	if (mark)
		mark(buf);
}

static void *hip(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		fprintf(stderr, "emu_probe: the runtime has no %s\n", name);
		exit(2);
	}
	return f;
}

#define CALL(type, name, ...) ((type)hip(name))(__VA_ARGS__)
typedef hipError_t (*f_u)(unsigned);
typedef hipError_t (*f_pi)(int *);
typedef hipError_t (*f_p)(void *);
typedef hipError_t (*f_pp)(void *, void *);
typedef hipError_t (*f_ppn)(void *, void *, size_t);
typedef hipError_t (*f_ppni)(void *, const void *, size_t, int);
typedef hipError_t (*f_pin)(void *, int, size_t);
typedef hipError_t (*f_v)(void);
typedef hipError_t (*f_ppi)(void *, int);

/* The device's gcnArchName, found in hipGetDeviceProperties' output wherever the
 * layout (R0000 or R0600) puts it: the first "gfx" string. */
static hipError_t arch(char *out, size_t n)
{
	static char props[8192];
	void *r0600 = dlsym(RTLD_DEFAULT, "hipGetDevicePropertiesR0600");
	hipError_t rc = r0600 ? ((hipError_t(*)(void *, int))r0600)(props, 0)
		   : ((hipError_t(*)(void *, int))hip("hipGetDeviceProperties"))(props, 0);
	snprintf(out, n, "none");
	for (size_t i = 0; rc == 0 && i + 4 < sizeof props; i++)
		if (!memcmp(props + i, "gfx", 3) && props[i + 3] >= '0' && props[i + 3] <= '9') {
			snprintf(out, n, "%.100s", props + i);
			break;
		}
	return rc;
}

static hipError_t hooked(const char *fn, size_t size, unsigned flags, char *detail, size_t dn)
{
	void *p = NULL;
	hipError_t rc, frc = 0;
	int host = 0;
	if (strcmp(fn, "hipMallocAsync") && strcmp(fn, "hipMallocFromPoolAsync") &&
	    strcmp(fn, "hipHostRegister"))
		phase("call", fn);
	if (!strcmp(fn, "hipMalloc"))
		rc = hipMalloc(&p, size);
	else if (!strcmp(fn, "hipExtMallocWithFlags"))
		rc = hipExtMallocWithFlags(&p, size, flags);
	else if (!strcmp(fn, "hipHostMalloc"))
		rc = hipHostMalloc(&p, size, flags), host = 1;
	else if (!strcmp(fn, "hipHostAlloc"))
		rc = hipHostAlloc(&p, size, flags), host = 1;
	else if (!strcmp(fn, "hipMallocHost"))
		rc = hipMallocHost(&p, size), host = 1;
	else if (!strcmp(fn, "hipMemAllocHost"))
		rc = hipMemAllocHost(&p, size), host = 1;
	else if (!strcmp(fn, "hipMallocManaged"))
		rc = hipMallocManaged(&p, size, flags);
	else if (!strcmp(fn, "hipMallocAsync") || !strcmp(fn, "hipMallocFromPoolAsync")) {
		/* On a stream of its own: 5.2.3's hipMallocAsync dereferences a NULL stream. */
		void *stream = NULL;
		rc = CALL(f_p, "hipStreamCreate", &stream);
		if (!rc && !strcmp(fn, "hipMallocAsync")) {
			phase("call", fn);
			rc = hipMallocAsync(&p, size, stream);
		} else if (!rc) {
			void *pool = NULL;
			rc = CALL(f_ppi, "hipDeviceGetDefaultMemPool", &pool, 0);
			phase("call", fn);
			rc = rc ? rc : hipMallocFromPoolAsync(&p, size, pool, stream);
		}
		phase("free", fn);
		if (!rc)
			frc = CALL(f_pp, "hipFreeAsync", p, stream);
		if (!frc && stream)
			frc = CALL(f_p, "hipStreamSynchronize", stream);
		/* The stream is left: on the emulated device 5.2.3's hipStreamDestroy spins after
		 * hipFreeAsync (libamdhip64 waits for a pointer no packet sets). */
		snprintf(detail, dn, "free=%d", frc);
		return rc ? rc : frc;
	} else if (!strcmp(fn, "hipHostRegister")) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		memset(p, 1, size);
		phase("call", fn);
		rc = hipHostRegister(p, size, flags);
		phase("free", fn);
		if (!rc)
			frc = CALL(f_p, "hipHostUnregister", p);
		munmap(p, size);
		snprintf(detail, dn, "free=%d", frc);
		return rc ? rc : frc;
	} else {
		fprintf(stderr, "emu_probe: unknown function %s\n", fn);
		exit(2);
	}
	phase("free", fn);
	if (!rc && p)
		frc = host ? CALL(f_p, "hipHostFree", p) : CALL(f_p, "hipFree", p);
	snprintf(detail, dn, "free=%d", frc);
	return rc ? rc : frc;
}

/* load:PATH's module, kernel and argument, and the stream, for launch */
static void *module_loaded, *function, *buffer, *streams[8];
static unsigned stream_now;

static hipError_t load(const char *path, int data, char *detail, size_t dn)
{
	void *module = NULL;
	hipError_t rc;
	if (data) {
		/* The image stays for the module's life: the runtime keeps the pointer. */
		FILE *f = fopen(path, "rb");
		char *image = NULL;
		long n = -1;
		if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET)) {
			image = malloc((size_t)n);
			if (image && fread(image, 1, (size_t)n, f) != (size_t)n)
				n = -1;
		}
		if (f)
			fclose(f);
		if (!image || n <= 0) {
			fprintf(stderr, "loaddata: cannot read %s\n", path);
			exit(2);
		}
		rc = CALL(hipError_t(*)(void **, const void *), "hipModuleLoadData", &module, image);
	} else {
		rc = CALL(hipError_t(*)(void **, const char *), "hipModuleLoad", &module, path);
	}
	if (!rc)
		rc = CALL(hipError_t(*)(void **, void *, const char *), "hipModuleGetFunction", &function,
			  module, "k");
	module_loaded = module;
	if (!rc)
		rc = hipMalloc(&buffer, 4096);
	snprintf(detail, dn, "ptr=%p", buffer);
	return rc;
}

static hipError_t launch(void)
{
	void *args[] = { &buffer };
	typedef hipError_t (*f_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
				       unsigned, unsigned, void *, void **, void **);
	return CALL(f_launch, "hipModuleLaunchKernel", function, 1, 1, 1, 1, 1, 1, 0,
		    streams[stream_now], args, NULL);
}

static void *launch_thread(void *rc)
{
	*(hipError_t *)rc = launch();
	return NULL;
}

static hipError_t copy(int d2h, size_t size)
{
	void *d = NULL;
	char *h = malloc(size);
	hipError_t rc = hipMalloc(&d, size);
	memset(h, 7, size);
	if (!rc)
		rc = d2h ? CALL(f_ppni, "hipMemcpy", h, d, size, 2 /* DeviceToHost */)
			 : CALL(f_ppni, "hipMemcpy", d, h, size, 1 /* HostToDevice */);
	if (d)
		CALL(f_p, "hipFree", d);
	free(h);
	return rc;
}

/* The names of the process's threads, comma-separated, into out. */
static hipError_t thread_names(char *out, size_t n)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	size_t used = (size_t)snprintf(out, n, "names=");
	if (!d)
		return -1;
	while ((e = readdir(d)) && used < n) {
		char path[300], name[64] = "";
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fgets(name, sizeof name, f))
			name[strcspn(name, "\n")] = 0;
		if (f)
			fclose(f);
		used += (size_t)snprintf(out + used, n - used, "%s,", name);
	}
	closedir(d);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;
	mark = (void (*)(const char *))dlsym(RTLD_DEFAULT, "emugpu_mark");
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		char step[1024], fn[128] = "", detail[256] = "", buf[1100];
		unsigned long long size = 4096;
		unsigned flags = 0, secs = 0;
		hipError_t rc;
		snprintf(step, sizeof step, "%s", argv[i]);
		snprintf(buf, sizeof buf, "begin %s", step);
		if (mark)
			mark(buf);
		if (!strcmp(step, "init")) {
			rc = CALL(f_u, "hipInit", 0);
		} else if (!strcmp(step, "count")) {
			int n = -1;
			rc = CALL(f_pi, "hipGetDeviceCount", &n);
			snprintf(detail, sizeof detail, "count=%d", n);
		} else if (!strcmp(step, "arch")) {
			char a[128];
			rc = arch(a, sizeof a);
			snprintf(detail, sizeof detail, "arch=%s", a);
		} else if (!strcmp(step, "sync")) {
			rc = CALL(f_v, "hipDeviceSynchronize");
		} else if (!strcmp(step, "peekerror")) {
			rc = CALL(f_v, "hipPeekAtLastError");
		} else if (!strcmp(step, "lasterror")) {
			rc = CALL(f_v, "hipGetLastError");
		} else if (!strncmp(step, "load:", 5)) {
			rc = load(step + 5, 0, detail, sizeof detail);
		} else if (!strncmp(step, "loaddata:", 9)) {
			rc = load(step + 9, 1, detail, sizeof detail);
		} else if (!strncmp(step, "fault:", 6)) {
			int (*fault)(const char *, unsigned long long) =
				(int (*)(const char *, unsigned long long))dlsym(RTLD_DEFAULT, "emugpu_fault");
			char *at = strchr(step + 6, '@');
			unsigned long long va = at ? strtoull(at + 1, NULL, 0) : 0;
			if (at)
				*at = 0;
			rc = fault ? fault(step + 6, va) : -1;
		} else if (!strcmp(step, "threads")) {
			rc = thread_names(detail, sizeof detail);
		} else if (sscanf(step, "sleep:%u", &secs) == 1) {
			sleep(secs);
			rc = 0;
		} else if (!strncmp(step, "kernel:", 7)) {
			rc = CALL(hipError_t(*)(void **, void *, const char *), "hipModuleGetFunction",
				  &function, module_loaded, step + 7);
		} else if (sscanf(step, "stream:%u", &stream_now) == 1) {
			rc = 0;
			if (stream_now >= 8) {
				fprintf(stderr, "emu_probe: %s: streams are 0 to 7\n", step);
				return 2;
			}
			if (stream_now && !streams[stream_now])
				rc = CALL(f_p, "hipStreamCreate", &streams[stream_now]);
		} else if (!strcmp(step, "launch")) {
			rc = launch();
		} else if (!strcmp(step, "launch@thread")) {
			pthread_t t;
			rc = -1;
			if (pthread_create(&t, NULL, launch_thread, &rc) == 0)
				pthread_join(t, NULL);
		} else if (sscanf(step, "h2d:%llu", &size) == 1) {
			rc = copy(0, size);
		} else if (sscanf(step, "d2h:%llu", &size) == 1) {
			rc = copy(1, size);
		} else if (sscanf(step, "memset:%llu", &size) == 1) {
			void *d = NULL;
			rc = hipMalloc(&d, size);
			if (!rc)
				rc = CALL(f_pin, "hipMemset", d, 0, size);
			if (d)
				CALL(f_p, "hipFree", d);
		} else if (sscanf(step, "%127[^:]:%llu:%i", fn, &size, (int *)&flags) >= 1) {
			rc = hooked(fn, size, flags, detail, sizeof detail);
		} else {
			fprintf(stderr, "emu_probe: cannot parse %s\n", step);
			return 2;
		}
		printf("%s rc=%d%s%s\n", step, rc, *detail ? " " : "", detail);
		snprintf(buf, sizeof buf, "end %s rc=%d", step, rc);
		if (mark)
			mark(buf);
		failed |= rc != 0;
	}
	return failed;
}
