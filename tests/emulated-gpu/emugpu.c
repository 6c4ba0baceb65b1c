/*
 * emugpu.c: an LD_PRELOAD stand-in for the amdgpu kernel driver, for one process.
 *
 * Test infrastructure (scripts/emulated-gpu runs anything on it). It lets the real ROCm
 * user-mode stack (libamdhip64 -> libhsa-runtime64 -> libhsakmt, libdrm_amdgpu) start on a
 * machine without an AMD GPU, and records what reaches the driver:
 *
 *  - paths: /dev/kfd and /dev/dri/renderD<drm_render_minor> open as memfds this file owns;
 *    the KFD topology (/sys/devices/virtual/kfd/kfd/topology, /sys/class/kfd/kfd/topology)
 *    and the render node's sysfs directory (/sys/dev/char/226:<minor>, /sys/class/drm/
 *    renderD<minor>) are read from a fixture directory (EMUGPU_FIXTURE, a tests/fixtures directory);
 *  - ioctls on those fds are answered as linux 6.1 answers them (Debian's linux-source-6.1
 *    6.1.192: drivers/gpu/drm/amd/amdkfd/kfd_chardev.c, amdgpu_kms.c; the argument
 *    structures are the uapi headers <linux/kfd_ioctl.h> and libdrm's <amdgpu_drm.h>);
 *  - allocations are backed by one sparse memfd: mmap of the render node at a buffer's
 *    mmap_offset maps that buffer's pages, mmap of /dev/kfd (doorbells, events) maps
 *    anonymous shared memory;
 *  - every ioctl is one JSON line in EMUGPU_LOG (default stderr); the memory ones
 *    (alloc, free, map, unmap, SVM) carry the flags by name, the size, the gpu_id, and the
 *    innermost calling frames that belong to a ROCm library (backtrace + dladdr), plus
 *    `api`, the outermost libamdhip64 frame's exported symbol, and `caller`, the first
 *    object outside ROCm (the application, or rmcp's shim).
 *
 * What it does not do fails loudly: an ioctl it does not know is logged ("unknown": true),
 * written to stderr, and answered -ENOTTY (KFD, nr outside the driver's table) or -EINVAL
 * (DRM, AMDGPU_INFO query), as the driver answers them.
 *
 * Queues: a thread stands in for the packet processor of every AQL queue. It consumes
 * what the runtime publishes (kernel dispatch, barrier-AND/OR, vendor packets) WITHOUT
 * RUNNING IT: barrier dependencies are waited for, then the completion signal is
 * decremented and its event raised, as the hardware's end-of-packet does. Data a kernel
 * would have written is not written. Other queue types (SDMA) are refused with EINVAL
 * and logged, so a runtime that needs them stops there, visibly.
 *
 * emugpu_mark(text), exported, writes {"mark": text} into the log: test programs bracket
 * their steps with it (dlsym(RTLD_DEFAULT, "emugpu_mark")).
 *
 * Code read-back: with EMUGPU_CODE_DUMP=FILE, at each kernel dispatch and at each call of
 * the exported emugpu_dump_code(), every buffer the GPU can see (VRAM, and host memory the
 * runtime handed the GPU, where a loader stages a code object for the blit that copies it
 * into VRAM) is appended to FILE, each as a line "emugpu-code va=0x... size=N kind=K" and
 * its N bytes, again only when it changed. Tests read there which code the runtime
 * uploaded (see "Code read-back" below).
 *
 * Faults: EMUGPU_FAULT=KIND[@VA] or the exported emugpu_fault(kind, va) make the next
 * kernel dispatch fault instead of completing, reported as the driver and ROCr's trap
 * handler report it (the memory event, or the queue's inactive signal): see "Fault
 * injection" below.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <linux/kfd_ioctl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <drm.h>
#include <amdgpu_drm.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------------------ */
/* State                                                                                 */
/* ------------------------------------------------------------------------------------ */

enum fdkind { FD_NONE, FD_KFD, FD_DRM };
#define MAXFD 4096
#define MAXGPU 8
#define MAXBO 65536
/* Signal events take ids 1..4095, their slots in the event page (KFD_SIGNAL_EVENT_LIMIT);
 * the other types (memory, hardware exception) ids from KFD_FIRST_NONSIGNAL_EVENT_ID
 * (kfd_events.h), as the driver's idr hands them out. */
#define MAXEV 4096
#define MAXOEV 64
#define NONSIGNAL_BASE 0x40000000u
#define MAXQ 128
#define DRM_MAJOR 226
#define KFD_MAJOR 235 /* dynamic on a real system */
/* Where the render node's mmap offsets start (drm_vma_manager: DRM_FILE_PAGE_OFFSET_START). */
#define DRM_OFFSET_BASE (0x100000ULL << 12)
/* kfd_doorbell_process_slice on SOC15: 1024 queues x 8-byte doorbells. */
#define DOORBELL_SLICE 8192
/* /dev/kfd mmap offsets (kfd_priv.h, not uapi) */
#define KFD_MMAP_TYPE_DOORBELL (0x3ULL << 62)
#define KFD_MMAP_TYPE_EVENTS (0x2ULL << 62)
#define KFD_MMAP_TYPE_MMIO (0x0ULL << 62)
#define KFD_MMAP_GPU_ID(id) (((uint64_t)(id) & 0xffff) << 46)
/* amdgpu_drm.h after libdrm 2.4.114's copy */
#ifndef AMDGPU_FAMILY_GC_11_0_0
#define AMDGPU_FAMILY_GC_11_0_0 145
#endif

struct gpu {
	unsigned node, gpu_id, minor, gfx;
	unsigned device_id, simd_count, simd_per_cu, array_count, cu_per_array;
	uint64_t vram;
	int vm_acquired;
};

struct bo {
	int used;
	unsigned gpu_id;
	uint32_t flags;
	uint64_t va, size, offset; /* offset in the backing memfd */
	int mapped;
	int dumped; /* its bytes went to EMUGPU_CODE_DUMP (Code read-back), with this hash */
	uint64_t hash;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t ev_cond;
	int inited;
	char fixture[512];
	int logfd;
	unsigned long seq;
	enum fdkind kind[MAXFD];
	unsigned fd_gpu[MAXFD];
	struct gpu gpu[MAXGPU];
	int ngpu;
	int backing; /* the memfd behind every GTT / VRAM / doorbell buffer */
	uint64_t backing_end;
	struct bo bo[MAXBO];
	unsigned nbo;
	struct event {
		int used, signaled, auto_reset;
		unsigned type;
		struct kfd_hsa_memory_exception_data mem; /* a memory event's fault */
	} ev[MAXEV], oev[MAXOEV];
	struct {
		int used;
		int halted; /* an injected queue error halted it (see Fault injection) */
		unsigned type, gpu_id;
		uint64_t ring, ring_size, wptr, rptr;
	} q[MAXQ];
	int evicted; /* an injected VM fault evicted every queue (kfd_dqm_evict_pasid) */
	unsigned queue_next;
	int processor_started;
	int xnack;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER, .ev_cond = PTHREAD_COND_INITIALIZER, .logfd = 2 };

static __thread int in_emu; /* our own libc calls are not ours to answer */

#define REAL(ret, name, ...)                                                         \
	static ret (*real_##name)(__VA_ARGS__);                                      \
	if (!real_##name)                                                            \
		real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "emulated-gpu: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

/* ------------------------------------------------------------------------------------ */
/* Fixture                                                                               */
/* ------------------------------------------------------------------------------------ */

/* Value of `key` in a KFD properties file, or `dflt`. */
static uint64_t prop(const char *file, const char *key, uint64_t dflt)
{
	char line[256];
	size_t klen = strlen(key);
	uint64_t v = dflt;
	FILE *f = fopen(file, "re");
	if (!f)
		return dflt;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			v = strtoull(line + klen + 1, NULL, 10);
	fclose(f);
	return v;
}

static void arm_from_env(void); /* Fault injection */

static void load_fixture(void)
{
	char p[768];
	const char *fx = getenv("EMUGPU_FIXTURE");
	if (!fx || !*fx)
		die("EMUGPU_FIXTURE is not set (scripts/emulated-gpu sets it)");
	snprintf(S.fixture, sizeof S.fixture, "%s", fx);
	for (unsigned n = 0; n < 64 && S.ngpu < MAXGPU; n++) {
		snprintf(p, sizeof p, "%s/nodes/%u/properties", S.fixture, n);
		if (access(p, R_OK))
			break;
		if (!prop(p, "simd_count", 0))
			continue;
		struct gpu *g = &S.gpu[S.ngpu++];
		g->node = n;
		g->minor = prop(p, "drm_render_minor", 0);
		g->gfx = prop(p, "gfx_target_version", 0);
		g->device_id = prop(p, "device_id", 0);
		g->simd_count = prop(p, "simd_count", 0);
		g->simd_per_cu = prop(p, "simd_per_cu", 2);
		g->array_count = prop(p, "array_count", 1);
		g->cu_per_array = prop(p, "cu_per_simd_array", 1);
		snprintf(p, sizeof p, "%s/nodes/%u/mem_banks/0/properties", S.fixture, n);
		g->vram = prop(p, "size_in_bytes", 0);
		snprintf(p, sizeof p, "%s/nodes/%u/gpu_id", S.fixture, n);
		FILE *f = fopen(p, "re");
		if (!f || fscanf(f, "%u", &g->gpu_id) != 1)
			die("%s: no gpu_id", p);
		fclose(f);
	}
	if (!S.ngpu)
		die("fixture %s has no GPU node", S.fixture);
}

/* EMUGPU_LOADED (scripts/emulated-gpu sets it) names a file where every process the
 * emulator is loaded in writes "PID NAME", and "PID /dev/kfd" when it opens the emulated
 * /dev/kfd: after the command the script says when none did (a program that replaced
 * LD_PRELOAD instead of appending to it runs without the emulator). */
static void loaded(const char *what)
{
	const char *file = getenv("EMUGPU_LOADED");
	char line[300];
	if (!file || !*file)
		return;
	in_emu++;
	int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		int n = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), what);
		ssize_t w = write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
		(void)w;
		close(fd);
	}
	in_emu--;
}

__attribute__((constructor)) static void at_load(void)
{
	loaded(program_invocation_short_name);
}

static void init(void)
{
	if (S.inited || in_emu)
		return;
	in_emu++;
	load_fixture();
	const char *log = getenv("EMUGPU_LOG");
	if (log && *log) {
		S.logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (S.logfd < 0)
			die("cannot open the log %s: %s", log, strerror(errno));
	}
	S.backing = memfd_create("emulated-gpu memory", MFD_CLOEXEC);
	if (S.backing < 0)
		die("memfd_create: %s", strerror(errno));
	void *warm[1];
	backtrace(warm, 1); /* loads libgcc_s now, not inside an ioctl */
	S.inited = 1;
	arm_from_env();
	in_emu--;
}

static struct gpu *gpu_by_id(unsigned id)
{
	for (int i = 0; i < S.ngpu; i++)
		if (S.gpu[i].gpu_id == id)
			return &S.gpu[i];
	return NULL;
}

/* The live event with this id, or NULL. */
static struct event *event_of(unsigned id)
{
	struct event *e = id < MAXEV ? &S.ev[id]
			: id - NONSIGNAL_BASE < MAXOEV ? &S.oev[id - NONSIGNAL_BASE] : NULL;
	return e && e->used ? e : NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Paths                                                                                 */
/* ------------------------------------------------------------------------------------ */

static const char *const TOPOLOGY[] = { "/sys/devices/virtual/kfd/kfd/topology",
					"/sys/class/kfd/kfd/topology" };

/* The fixture path standing for `path`, or NULL when it is not ours. */
static const char *map_path(const char *path, char *buf, size_t n)
{
	if (!path || strncmp(path, "/sys/", 5))
		return NULL;
	for (unsigned i = 0; i < 2; i++) {
		size_t l = strlen(TOPOLOGY[i]);
		if (!strncmp(path, TOPOLOGY[i], l) && (path[l] == '/' || !path[l])) {
			snprintf(buf, n, "%s%s", S.fixture, path + l);
			return buf;
		}
	}
	unsigned maj, min;
	int used = 0;
	if ((sscanf(path, "/sys/dev/char/%u:%u%n", &maj, &min, &used) == 2 && maj == DRM_MAJOR) ||
	    (sscanf(path, "/sys/class/drm/renderD%u%n", &min, &used) == 1)) {
		for (int i = 0; i < S.ngpu; i++)
			if (S.gpu[i].minor == min) {
				snprintf(buf, n, "%s/drm/renderD%u%s", S.fixture, min, path + used);
				return buf;
			}
	}
	return NULL;
}

/* 1 for /dev/kfd, 2 for a fixture GPU's render node (*gpu its index), 0 otherwise. */
static int dev_node(const char *path, int *gpu)
{
	unsigned minor;
	int used = 0;
	if (!path)
		return 0;
	if (!strcmp(path, "/dev/kfd"))
		return 1;
	if (sscanf(path, "/dev/dri/renderD%u%n", &minor, &used) == 1 && !path[used])
		for (int i = 0; i < S.ngpu; i++)
			if (S.gpu[i].minor == minor) {
				*gpu = i;
				return 2;
			}
	return 0;
}

static int open_dev(int which, int gpu, int flags)
{
	int fd = memfd_create(which == 1 ? "emulated /dev/kfd" : "emulated render node",
			      (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd < 0)
		return -1;
	if (fd >= MAXFD)
		die("fd %d past the emulator's table", fd);
	pthread_mutex_lock(&S.lock);
	S.kind[fd] = which == 1 ? FD_KFD : FD_DRM;
	S.fd_gpu[fd] = gpu;
	pthread_mutex_unlock(&S.lock);
	if (which == 1)
		loaded("/dev/kfd");
	return fd;
}

static enum fdkind kind_of(int fd)
{
	return fd >= 0 && fd < MAXFD ? S.kind[fd] : FD_NONE;
}

static void fake_stat(int which, int gpu, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_mode = S_IFCHR | 0666;
	st->st_rdev = which == 1 ? makedev(KFD_MAJOR, 0) : makedev(DRM_MAJOR, S.gpu[gpu].minor);
	st->st_nlink = 1;
	st->st_blksize = 4096;
}

#define OPEN_BODY(realname, dirfd_expr, ...)                                                 \
	init();                                                                              \
	int which, gpu = 0;                                                                  \
	char buf[1024];                                                                      \
	const char *m;                                                                       \
	if (!in_emu && (which = dev_node(path, &gpu)))                                       \
		return open_dev(which, gpu, flags);                                          \
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))                                \
		path = m;                                                                    \
	REAL(int, realname, __VA_ARGS__);                                                    \
	(void)0

EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	OPEN_BODY(open, , const char *, int, ...);
	return real_open(path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	OPEN_BODY(open64, , const char *, int, ...);
	return real_open64(path, flags, mode);
}

EXPORT int __open_2(const char *path, int flags)
{
	OPEN_BODY(__open_2, , const char *, int);
	return real___open_2(path, flags);
}

EXPORT int __open64_2(const char *path, int flags)
{
	OPEN_BODY(__open64_2, , const char *, int);
	return real___open64_2(path, flags);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	OPEN_BODY(openat, , int, const char *, int, ...);
	return real_openat(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	OPEN_BODY(openat64, , int, const char *, int, ...);
	return real_openat64(dirfd, path, flags, mode);
}

EXPORT FILE *fopen(const char *path, const char *mode)
{
	char buf[1024];
	const char *m;
	init();
	REAL(FILE *, fopen, const char *, const char *);
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_fopen(path, mode);
}

EXPORT FILE *fopen64(const char *path, const char *mode)
{
	return fopen(path, mode);
}

EXPORT DIR *opendir(const char *path)
{
	char buf[1024];
	const char *m;
	init();
	REAL(DIR *, opendir, const char *);
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_opendir(path);
}

EXPORT int access(const char *path, int mode)
{
	char buf[1024];
	const char *m;
	int gpu;
	init();
	REAL(int, access, const char *, int);
	if (!in_emu && dev_node(path, &gpu))
		return 0;
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_access(path, mode);
}

EXPORT ssize_t readlink(const char *path, char *out, size_t n)
{
	char buf[1024];
	const char *m;
	init();
	REAL(ssize_t, readlink, const char *, char *, size_t);
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_readlink(path, out, n);
}

EXPORT char *realpath(const char *path, char *out)
{
	char buf[1024];
	const char *m;
	init();
	REAL(char *, realpath, const char *, char *);
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_realpath(path, out);
}

#define STAT_BODY(realname, ...)                                                             \
	char buf[1024];                                                                      \
	const char *m;                                                                       \
	int which, gpu = 0;                                                                  \
	init();                                                                              \
	REAL(int, realname, __VA_ARGS__);                                                    \
	if (!in_emu && (which = dev_node(path, &gpu))) {                                     \
		fake_stat(which, gpu, (struct stat *)st);                                    \
		return 0;                                                                    \
	}                                                                                    \
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))                                \
		path = m

EXPORT int stat(const char *path, struct stat *st)
{
	STAT_BODY(stat, const char *, struct stat *);
	return real_stat(path, st);
}
EXPORT int stat64(const char *path, struct stat64 *st)
{
	STAT_BODY(stat64, const char *, struct stat64 *);
	return real_stat64(path, st);
}
EXPORT int lstat(const char *path, struct stat *st)
{
	STAT_BODY(lstat, const char *, struct stat *);
	return real_lstat(path, st);
}
EXPORT int lstat64(const char *path, struct stat64 *st)
{
	STAT_BODY(lstat64, const char *, struct stat64 *);
	return real_lstat64(path, st);
}
EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	STAT_BODY(__xstat, int, const char *, struct stat *);
	return real___xstat(ver, path, st);
}
EXPORT int __xstat64(int ver, const char *path, struct stat64 *st)
{
	STAT_BODY(__xstat64, int, const char *, struct stat64 *);
	return real___xstat64(ver, path, st);
}
EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
	STAT_BODY(__lxstat, int, const char *, struct stat *);
	return real___lxstat(ver, path, st);
}
EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	if (path && !*path && (flags & AT_EMPTY_PATH) && kind_of(dirfd)) {
		fake_stat(kind_of(dirfd) == FD_KFD ? 1 : 2, S.fd_gpu[dirfd], st);
		return 0;
	}
	STAT_BODY(fstatat, int, const char *, struct stat *, int);
	return real_fstatat(dirfd, path, st, flags);
}
EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return fstatat(dirfd, path, (struct stat *)st, flags);
}

static void fake_statx(int which, int gpu, struct statx *st)
{
	struct stat s;
	fake_stat(which, gpu, &s);
	memset(st, 0, sizeof *st);
	st->stx_mask = STATX_BASIC_STATS;
	st->stx_mode = s.st_mode;
	st->stx_nlink = 1;
	st->stx_blksize = 4096;
	st->stx_rdev_major = major(s.st_rdev);
	st->stx_rdev_minor = minor(s.st_rdev);
}

/* Rust's std::fs::metadata calls statx. */
EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *st)
{
	char buf[1024];
	const char *m;
	int which, gpu = 0;
	init();
	REAL(int, statx, int, const char *, int, unsigned, struct statx *);
	if (path && !*path && (flags & AT_EMPTY_PATH) && kind_of(dirfd)) {
		fake_statx(kind_of(dirfd) == FD_KFD ? 1 : 2, S.fd_gpu[dirfd], st);
		return 0;
	}
	if (!in_emu && (which = dev_node(path, &gpu))) {
		fake_statx(which, gpu, st);
		return 0;
	}
	if (!in_emu && (m = map_path(path, buf, sizeof buf)))
		path = m;
	return real_statx(dirfd, path, flags, mask, st);
}

EXPORT int fstat(int fd, struct stat *st)
{
	REAL(int, fstat, int, struct stat *);
	if (kind_of(fd)) {
		fake_stat(kind_of(fd) == FD_KFD ? 1 : 2, S.fd_gpu[fd], st);
		return 0;
	}
	return real_fstat(fd, st);
}
EXPORT int fstat64(int fd, struct stat64 *st)
{
	return fstat(fd, (struct stat *)st);
}
EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	REAL(int, __fxstat, int, int, struct stat *);
	if (kind_of(fd)) {
		fake_stat(kind_of(fd) == FD_KFD ? 1 : 2, S.fd_gpu[fd], st);
		return 0;
	}
	return real___fxstat(ver, fd, st);
}
EXPORT int __fxstat64(int ver, int fd, struct stat64 *st)
{
	return __fxstat(ver, fd, (struct stat *)st);
}

EXPORT int close(int fd)
{
	REAL(int, close, int);
	if (kind_of(fd)) {
		pthread_mutex_lock(&S.lock);
		S.kind[fd] = FD_NONE;
		pthread_mutex_unlock(&S.lock);
	}
	return real_close(fd);
}

/* A duplicate of one of our fds is ours too (libdrm_amdgpu keeps an F_DUPFD_CLOEXEC copy). */
static int dup_of(int old, int fd)
{
	if (fd >= 0 && fd < MAXFD) {
		pthread_mutex_lock(&S.lock);
		S.kind[fd] = kind_of(old);
		S.fd_gpu[fd] = S.fd_gpu[old];
		pthread_mutex_unlock(&S.lock);
	}
	return fd;
}

EXPORT int dup(int old)
{
	REAL(int, dup, int);
	int fd = real_dup(old);
	return kind_of(old) ? dup_of(old, fd) : fd;
}

EXPORT int dup2(int old, int new)
{
	REAL(int, dup2, int, int);
	int fd = real_dup2(old, new);
	return kind_of(old) || kind_of(new) ? dup_of(old, fd) : fd;
}

EXPORT int dup3(int old, int new, int flags)
{
	REAL(int, dup3, int, int, int);
	int fd = real_dup3(old, new, flags);
	return kind_of(old) || kind_of(new) ? dup_of(old, fd) : fd;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	REAL(int, fcntl, int, int, ...);
	int r = real_fcntl(fd, cmd, arg);
	if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && kind_of(fd))
		dup_of(fd, r);
	return r;
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

/* ------------------------------------------------------------------------------------ */
/* mmap                                                                                  */
/* ------------------------------------------------------------------------------------ */

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	REAL(void *, mmap, void *, size_t, int, int, int, off_t);
	enum fdkind k = kind_of(fd);
	if (k == FD_KFD) /* doorbells, events, MMIO: touchable, backed by nothing */
		return real_mmap(addr, len, prot, (flags & ~MAP_PRIVATE) | MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (k == FD_DRM) {
		uint64_t o = (uint64_t)off;
		if (o < DRM_OFFSET_BASE || o - DRM_OFFSET_BASE + len > S.backing_end) {
			errno = EINVAL;
			return MAP_FAILED;
		}
		return real_mmap(addr, len, prot, flags, S.backing, (off_t)(o - DRM_OFFSET_BASE));
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

/* ------------------------------------------------------------------------------------ */
/* The log                                                                               */
/* ------------------------------------------------------------------------------------ */

struct out {
	char b[8192];
	size_t n;
};

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(o->b + o->n, sizeof o->b - o->n, fmt, ap);
	va_end(ap);
	if (w > 0)
		o->n += (size_t)w < sizeof o->b - o->n ? (size_t)w : sizeof o->b - o->n - 1;
}

static void put_str(struct out *o, const char *s)
{
	put(o, "\"");
	for (; s && *s; s++)
		if (*s == '"' || *s == '\\')
			put(o, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			put(o, "\\u%04x", *s);
		else
			put(o, "%c", *s);
	put(o, "\"");
}

static void emit(struct out *o)
{
	put(o, "}\n");
	ssize_t w = write(S.logfd, o->b, o->n);
	(void)w;
}

static void begin(struct out *o, const char *ioctl, const char *fdname)
{
	o->n = 0;
	put(o, "{\"seq\":%lu,\"tid\":%ld,\"fd\":\"%s\",\"ioctl\":\"%s\"",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), (long)gettid(), fdname, ioctl);
}

static const char *const ROCM_LIBS[] = { "libamdhip64", "libhsa-runtime64", "libhsakmt",
					 "libdrm_amdgpu", "libamd_comgr", "libMIOpen",
					 "librocblas", "librccl", NULL };

static int is_rocm(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	for (int i = 0; ROCM_LIBS[i]; i++)
		if (!strncmp(base, ROCM_LIBS[i], strlen(ROCM_LIBS[i])))
			return 1;
	return 0;
}

static const char *base_of(const char *p)
{
	const char *b = strrchr(p, '/');
	return b ? b + 1 : p;
}

/* The exported function holding pc, or NULL: dladdr1's symbol, when pc is inside it
 * (st_size), so an internal function is never named after its exported neighbour. */
static const char *sym_of(void *pc, Dl_info *di)
{
	const ElfW(Sym) *sym = NULL;
	if (!dladdr1(pc, di, (void **)&sym, RTLD_DL_SYMENT) || !di->dli_fname)
		return NULL;
	if (!sym || !di->dli_sname || !di->dli_saddr ||
	    (char *)pc >= (char *)di->dli_saddr + sym->st_size)
		return NULL;
	return di->dli_sname;
}

/* frames: the innermost ROCm frames (object+offset, and the exported function holding it,
 * when there is one); api / hsa / kmt: the outermost frame in libamdhip64 /
 * libhsa-runtime64 / libhsakmt, named when exported (the entry point each layer was
 * called through); caller: the object that called ROCm (the application, rmcp's shim). */
static void put_frames(struct out *o)
{
	void *pc[64];
	int n = backtrace(pc, 64), shown = 0, top = -1;
	const char *outer[3] = { NULL, NULL, NULL };
	static const char *const layer[3] = { "libamdhip64", "libhsa-runtime64", "libhsakmt" };
	Dl_info di;
	put(o, ",\"frames\":[");
	for (int i = 0; i < n; i++) {
		const char *sym = sym_of(pc[i], &di);
		if (!di.dli_fname || !is_rocm(di.dli_fname))
			continue;
		top = i;
		for (int l = 0; l < 3; l++)
			if (!strncmp(base_of(di.dli_fname), layer[l], strlen(layer[l])))
				outer[l] = sym ? sym : "?";
		if (shown < 12) {
			put(o, "%s{\"obj\":", shown ? "," : "");
			put_str(o, base_of(di.dli_fname));
			put(o, ",\"off\":\"0x%lx\"", (unsigned long)((char *)pc[i] - (char *)di.dli_fbase));
			if (sym) {
				put(o, ",\"sym\":");
				put_str(o, sym);
			}
			put(o, "}");
			shown++;
		}
	}
	put(o, "]");
	static const char *const key[3] = { "api", "hsa", "kmt" };
	for (int l = 0; l < 3; l++)
		if (outer[l]) {
			put(o, ",\"%s\":", key[l]);
			put_str(o, outer[l]);
		}
	if (top >= 0 && top + 1 < n && dladdr(pc[top + 1], &di) && di.dli_fname) {
		put(o, ",\"caller\":");
		put_str(o, base_of(di.dli_fname));
	}
}

EXPORT void emugpu_mark(const char *text)
{
	struct out o;
	init();
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"mark\":", __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED));
	put_str(&o, text);
	emit(&o);
}

static const struct {
	uint32_t bit;
	const char *name;
} ALLOC_FLAGS[] = {
	{ KFD_IOC_ALLOC_MEM_FLAGS_VRAM, "VRAM" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_GTT, "GTT" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, "USERPTR" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, "DOORBELL" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, "MMIO_REMAP" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE, "WRITABLE" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE, "EXECUTABLE" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC, "PUBLIC" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE, "NO_SUBSTITUTE" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM, "AQL_QUEUE_MEM" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_COHERENT, "COHERENT" },
	{ KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED, "UNCACHED" },
	/* newer than linux 6.1's uapi: EXT_COHERENT (6.7), CONTIGUOUS (6.10) */
	{ 1u << 24, "EXT_COHERENT" },
	{ 1u << 23, "CONTIGUOUS" },
};

static void put_flags(struct out *o, uint32_t flags)
{
	uint32_t rest = flags;
	int first = 1;
	put(o, ",\"flags\":\"0x%x\",\"flag_names\":[", flags);
	for (unsigned i = 0; i < sizeof ALLOC_FLAGS / sizeof *ALLOC_FLAGS; i++)
		if (flags & ALLOC_FLAGS[i].bit) {
			put(o, "%s\"%s\"", first ? "" : ",", ALLOC_FLAGS[i].name);
			rest &= ~ALLOC_FLAGS[i].bit;
			first = 0;
		}
	if (rest)
		put(o, "%s\"0x%x\"", first ? "" : ",", rest);
	put(o, "]");
}

static void put_ret(struct out *o, int ret)
{
	put(o, ",\"ret\":%d", ret);
	if (ret)
		put(o, ",\"errno\":\"%s\"", strerrorname_np(-ret) ? strerrorname_np(-ret) : "?");
}

/* ------------------------------------------------------------------------------------ */
/* KFD                                                                                   */
/* ------------------------------------------------------------------------------------ */

static struct bo *bo_of(uint64_t handle)
{
	uint32_t idr = (uint32_t)handle;
	if (idr == 0 || idr > S.nbo || !S.bo[idr - 1].used || S.bo[idr - 1].gpu_id != handle >> 32)
		return NULL;
	return &S.bo[idr - 1];
}

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int kfd_alloc(struct kfd_ioctl_alloc_memory_of_gpu_args *a)
{
	struct gpu *g = gpu_by_id(a->gpu_id);
	uint32_t f = a->flags;
	if (!a->size)
		return -EINVAL;
	if (!g || !g->vm_acquired) /* kfd_bind_process_to_device needs the VM */
		return -EINVAL;
	if ((f & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) && a->size != DOORBELL_SLICE)
		return -EINVAL;
	if ((f & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) && a->size != 4096)
		return -EINVAL;
	if (!(f & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT |
		   KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL |
		   KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP)))
		return -ENOMEM; /* amdgpu_amdkfd_reserve_mem_limit: "Invalid BO type" */
	if (S.nbo >= MAXBO)
		return -ENOMEM;
	struct bo *b = &S.bo[S.nbo++];
	uint64_t size = (a->size + 4095) & ~4095ull;
	*b = (struct bo){ .used = 1, .gpu_id = a->gpu_id, .flags = f, .va = a->va_addr,
			  .size = a->size };
	if (!(f & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)) {
		b->offset = S.backing_end;
		S.backing_end += size;
		if (ftruncate(S.backing, (off_t)S.backing_end))
			die("growing the backing memfd: %s", strerror(errno));
	}
	a->handle = ((uint64_t)a->gpu_id << 32) | S.nbo;
	if (f & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)
		; /* mmap_offset in: the user address; left as it was */
	else if (f & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP)
		a->mmap_offset = KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(a->gpu_id);
	else
		a->mmap_offset = DRM_OFFSET_BASE + b->offset;
	return 0;
}

static int kfd_map(void *arg, int map)
{
	/* map and unmap args share their layout */
	struct kfd_ioctl_map_memory_to_gpu_args *a = arg;
	struct bo *b = bo_of(a->handle);
	if (!b)
		return -EINVAL;
	if (!a->n_devices || a->n_success > a->n_devices)
		return -EINVAL;
	const uint32_t *ids = (const uint32_t *)(uintptr_t)a->device_ids_array_ptr;
	for (uint32_t i = a->n_success; i < a->n_devices; i++) {
		if (!gpu_by_id(ids[i]))
			return -EINVAL;
		a->n_success = i + 1;
	}
	b->mapped += map ? 1 : -1;
	return 0;
}

static int kfd_wait(struct kfd_ioctl_wait_events_args *a)
{
	struct kfd_event_data *ev = (struct kfd_event_data *)(uintptr_t)a->events_ptr;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	uint64_t ns = until.tv_nsec + (uint64_t)(a->timeout == 0xffffffffu ? 3600000u : a->timeout) * 1000000ull;
	until.tv_sec += ns / 1000000000ull;
	until.tv_nsec = ns % 1000000000ull;
	for (;;) {
		unsigned done = 0;
		for (uint32_t i = 0; i < a->num_events; i++) {
			struct event *e = event_of(ev[i].event_id);
			if (!e)
				return -EINVAL;
			done += e->signaled != 0;
		}
		if (a->wait_for_all ? done == a->num_events : done > 0) {
			for (uint32_t i = 0; i < a->num_events; i++) {
				struct event *e = event_of(ev[i].event_id);
				/* copy_signaled_event_data: a signaled memory event's fault */
				if (e->signaled && e->type == KFD_IOC_EVENT_MEMORY)
					ev[i].memory_exception_data = e->mem;
				if (e->auto_reset)
					e->signaled = 0;
			}
			a->wait_result = KFD_IOC_WAIT_RESULT_COMPLETE;
			return 0;
		}
		if (!a->timeout || pthread_cond_timedwait(&S.ev_cond, &S.lock, &until) == ETIMEDOUT) {
			a->wait_result = KFD_IOC_WAIT_RESULT_TIMEOUT;
			return 0;
		}
	}
}

/* The AQL packet processor (see the header). amd_signal_t: value at +8, event mailbox
 * pointer at +16, event id at +24; every AQL packet's completion signal is at +56, the
 * barrier packets' five dependency signals at +8. */
static int signal_done(uint64_t sig)
{
	return !sig || __atomic_load_n((int64_t *)(uintptr_t)(sig + 8), __ATOMIC_ACQUIRE) <= 0;
}

static void complete(uint64_t sig)
{
	if (!sig)
		return;
	uint64_t ts = now_ns(CLOCK_MONOTONIC_RAW) / 10; /* the GPU clock of GET_CLOCK_COUNTERS */
	*(volatile uint64_t *)(uintptr_t)(sig + 32) = ts; /* start_ts */
	*(volatile uint64_t *)(uintptr_t)(sig + 40) = ts; /* end_ts */
	__atomic_sub_fetch((int64_t *)(uintptr_t)(sig + 8), 1, __ATOMIC_ACQ_REL);
	uint64_t mailbox = *(volatile uint64_t *)(uintptr_t)(sig + 16);
	uint32_t id = *(volatile uint32_t *)(uintptr_t)(sig + 24);
	if (mailbox) {
		__atomic_store_n((uint64_t *)(uintptr_t)mailbox, id, __ATOMIC_RELEASE);
		pthread_mutex_lock(&S.lock);
		if (id < MAXEV && S.ev[id].used) {
			S.ev[id].signaled = 1;
			pthread_cond_broadcast(&S.ev_cond);
		}
		pthread_mutex_unlock(&S.lock);
	}
}

/* ------------------------------------------------------------------------------------ */
/* Fault injection                                                                       */
/* ------------------------------------------------------------------------------------ */

/*
 * A test arms one fault for the next kernel dispatch the packet processor takes: with
 * EMUGPU_FAULT=KIND[@VA] (scripts/emulated-gpu --fault) from the start, or by calling the
 * exported emugpu_fault(kind, va) (dlsym(RTLD_DEFAULT, "emugpu_fault")) when the address
 * is known only at run time. That dispatch is then not completed, and the fault reaches
 * the runtime the way linux 6.1 (KFD 1.11, no debugger interface) and ROCr's own trap
 * handler report it on a gfx10.1 card:
 *
 *   vm, vm-read-only  the memory event: kfd_signal_vm_fault_event fills every memory
 *                     event's memory_exception_data (gpu_id, va page-aligned, NotPresent /
 *                     ReadOnly), sets them and evicts the process's queues
 *                     (kfd_dqm_evict_pasid): nothing runs after it. WAIT_EVENTS copies the
 *                     data out (copy_signaled_event_data).
 *   vm-imprecise      the same event as 6.1 fills it without fault information: imprecise,
 *                     no reason bit, va 0 (so no @VA).
 *   aperture, illegal the trap handler (amd_trap_handler_v1.h, .signal_error) swaps the
 *                     queue's inactive signal value to bit 29 (memory violation) or 30
 *                     (illegal instruction), writes the signal's event id to its mailbox
 *                     and raises the event when the old value was 0; the wave halts, so the
 *                     queue stops (UPDATE_QUEUE to 0% then succeeds, as it always does here).
 *                     No address reaches the runtime (so no @VA). On a gfx10.3 card (the
 *                     fixture's gfx_target_version) that handler signals nothing ("needs to
 *                     be rewritten for gfx10.3"): the wave halts, the queue stops, the
 *                     dispatch never completes and the runtime hears nothing (a hang; said
 *                     once on stderr). gfx11's handler is not modelled: refused loudly.
 *
 * EMUGPU_FAULT_AFTER=N (with EMUGPU_FAULT) lets N kernel dispatches complete first, so that
 * a program that cannot call emugpu_fault (a real application) faults in the middle of its
 * run: the (N+1)-th dispatch takes the fault. emugpu_fault() arms for the very next one.
 *
 * Without @VA (va 0 from emugpu_fault), a vm / vm-read-only fault's address is the
 * dispatch's first kernel argument (the first 8 bytes of its kernarg segment). The fault
 * is written to the log as {"fault": KIND, ...}. The card is the fixture's, whatever ISA
 * HSA_OVERRIDE_GFX_VERSION makes the runtime believe (and so whichever trap handler it
 * installed): a gfx1010 under the override still reports as gfx10.1's handler does.
 */
enum { F_NONE, F_VM, F_VM_RO, F_VM_IMPRECISE, F_APERTURE, F_ILLEGAL };
static const char *const FAULT_NAMES[] = { "none", "vm", "vm-read-only", "vm-imprecise", "aperture",
					   "illegal" };
static struct {
	int kind; /* F_*, taken by the packet processor */
	uint64_t va; /* 0: the first kernel argument */
	unsigned long after; /* dispatches to let complete before taking it */
} armed;

/* Arms KIND with VA for the dispatch after the next AFTER ones; -1 (and a line on stderr)
 * when KIND is unknown or takes no address. */
static int arm(const char *kind, uint64_t va, unsigned long after)
{
	int k = -1;
	for (int i = 0; i < (int)(sizeof FAULT_NAMES / sizeof *FAULT_NAMES); i++)
		if (kind && !strcmp(kind, FAULT_NAMES[i]))
			k = i;
	if (k < 0 || (va && k != F_VM && k != F_VM_RO)) {
		fprintf(stderr, "emulated-gpu: %s: %s (kinds: vm[@VA] vm-read-only[@VA] vm-imprecise aperture illegal none)\n",
			kind ? kind : "(null)", k < 0 ? "no such fault kind" : "this fault carries no address");
		return -1;
	}
	pthread_mutex_lock(&S.lock);
	armed.kind = k;
	armed.va = va;
	armed.after = after;
	pthread_mutex_unlock(&S.lock);
	struct out o;
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"fault\":\"armed\",\"kind\":\"%s\",\"va\":\"0x%" PRIx64 "\",\"after\":%lu",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), FAULT_NAMES[k], va, after);
	emit(&o);
	return 0;
}

/* EMUGPU_FAULT=KIND[@VA], read once at start; a malformed one stops the process. */
static void arm_from_env(void)
{
	const char *spec = getenv("EMUGPU_FAULT");
	char kind[32];
	uint64_t va = 0;
	if (!spec || !*spec)
		return;
	const char *at = strchr(spec, '@');
	size_t n = at ? (size_t)(at - spec) : strlen(spec);
	char *end = NULL;
	if (at) {
		errno = 0;
		va = strtoull(at + 1, &end, 0);
	}
	if (n >= sizeof kind || (at && (errno || !*(at + 1) || *end || !va)))
		die("EMUGPU_FAULT=%s: expected KIND[@VA], VA a non-zero number", spec);
	memcpy(kind, spec, n);
	kind[n] = 0;
	unsigned long after = 0;
	const char *a = getenv("EMUGPU_FAULT_AFTER");
	if (a && *a) {
		errno = 0;
		after = strtoul(a, &end, 10);
		if (errno || *end || *a == '-')
			die("EMUGPU_FAULT_AFTER=%s: expected a number of dispatches", a);
	}
	if (arm(kind, va, after))
		die("EMUGPU_FAULT=%s is not a fault this emulator injects", spec);
}

EXPORT int emugpu_fault(const char *kind, uint64_t va)
{
	init();
	return arm(kind, va, 0);
}

/* The first kernel argument of a dispatch packet, read without trusting the pointer. */
static uint64_t first_kernarg(const uint8_t *pkt)
{
	uint64_t kernarg = *(const uint64_t *)(pkt + 40), v = 0;
	struct iovec local = { &v, sizeof v }, remote = { (void *)(uintptr_t)kernarg, sizeof v };
	if (kernarg && process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof v)
		die("injecting a fault: the dispatch's kernarg segment 0x%" PRIx64 " is not readable", kernarg);
	return v;
}

/* Called by the packet processor with a kernel dispatch packet of queue q: 1 when a fault
 * was armed and is now delivered (the packet stays unconsumed), 0 otherwise. The log line
 * is written first: the runtime may end the process as soon as the fault is delivered. */
static int take_fault(unsigned q, const uint8_t *pkt)
{
	pthread_mutex_lock(&S.lock);
	int kind = armed.kind;
	uint64_t va = armed.va;
	if (kind != F_NONE && armed.after) {
		armed.after--;
		kind = F_NONE;
	} else {
		armed.kind = F_NONE;
	}
	pthread_mutex_unlock(&S.lock);
	if (kind == F_NONE)
		return 0;
	int memory = kind == F_VM || kind == F_VM_RO || kind == F_VM_IMPRECISE;
	if ((kind == F_VM || kind == F_VM_RO) && !va)
		va = first_kernarg(pkt);
	va &= ~4095ull;
	/* amd_queue_t: read_dispatch_id_field_base_byte_offset follows read_dispatch_id (the
	 * KFD read pointer); queue_inactive_signal is at +192 */
	uint64_t rptr = S.q[q].rptr, sig = 0;
	if (!memory)
		sig = *(volatile uint64_t *)(uintptr_t)(rptr - *(volatile uint32_t *)(uintptr_t)(rptr + 8) + 192);
	if (!memory && !sig)
		die("injecting %s: queue %u has no inactive signal", FAULT_NAMES[kind], q);
	struct gpu *g = gpu_by_id(S.q[q].gpu_id);
	unsigned gfx = g ? g->gfx : 0;
	int silent = !memory && gfx >= 100300 && gfx < 110000; /* gfx10.3: the wave only halts */
	if (!memory && gfx >= 110000)
		die("injecting %s on gfx%u%x%x: the gfx11 trap handler is not emulated", FAULT_NAMES[kind],
		    gfx / 10000, gfx / 100 % 100, gfx % 100);

	struct out o;
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"fault\":\"%s\",\"queue_id\":%u,\"gpu_id\":%u,\"va\":\"0x%" PRIx64 "\"",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), FAULT_NAMES[kind], q, S.q[q].gpu_id, va);
	if (!memory)
		put(&o, ",\"inactive_signal\":\"0x%" PRIx64 "\",\"signalled\":%s", sig, silent ? "false" : "true");
	emit(&o);
	if (silent)
		fprintf(stderr, "emulated-gpu: %s on gfx%u%x%x: its trap handler signals nothing; the wave halts and the dispatch never completes\n",
			FAULT_NAMES[kind], gfx / 10000, gfx / 100 % 100, gfx % 100);

	pthread_mutex_lock(&S.lock);
	if (memory) {
		struct kfd_hsa_memory_exception_data m;
		memset(&m, 0, sizeof m);
		m.gpu_id = S.q[q].gpu_id;
		m.va = va;
		m.failure.NotPresent = kind == F_VM;
		m.failure.ReadOnly = kind == F_VM_RO;
		m.failure.imprecise = kind == F_VM_IMPRECISE;
		for (unsigned i = 0; i < MAXOEV; i++)
			if (S.oev[i].used && S.oev[i].type == KFD_IOC_EVENT_MEMORY) {
				S.oev[i].mem = m;
				S.oev[i].signaled = 1;
			}
		S.evicted = 1;
	} else if (silent) {
		S.q[q].halted = 1;
	} else {
		int64_t code = kind == F_APERTURE ? 1ll << 29 : 1ll << 30;
		int64_t old = __atomic_exchange_n((int64_t *)(uintptr_t)(sig + 8), code, __ATOMIC_ACQ_REL);
		uint64_t mailbox = *(volatile uint64_t *)(uintptr_t)(sig + 16);
		uint32_t id = *(volatile uint32_t *)(uintptr_t)(sig + 24);
		struct event *e = event_of(id);
		if (!old && mailbox) {
			__atomic_store_n((uint64_t *)(uintptr_t)mailbox, id, __ATOMIC_RELEASE);
			if (e)
				e->signaled = 1;
		}
		S.q[q].halted = 1;
	}
	pthread_cond_broadcast(&S.ev_cond);
	pthread_mutex_unlock(&S.lock);
	return 1;
}

/* Code read-back (the header). Where a code object's bytes reach the GPU depends on the
 * runtime: 5.2.3's loader stages the segments in host memory it hands the GPU (a userptr
 * buffer) and has a blit kernel copy them into VRAM, a kernel this emulator completes
 * without running; 7.2.4's writes them into host-visible VRAM itself. So every buffer the
 * GPU can see (userptr ones read in the process's memory through process_vm_readv, never a
 * fault; the others from the backing memfd) of at most DUMP_MAX bytes is appended to
 * EMUGPU_CODE_DUMP, at each kernel dispatch and when the program calls the exported
 * emugpu_dump_code(), whenever its contents differ from when it was last appended (a 64-bit
 * FNV-1a hash). An unreadable buffer is named with size=0. */
#define DUMP_MAX (4u << 20)
static void dump_code(void)
{
	const char *file = getenv("EMUGPU_CODE_DUMP");
	if (!file || !*file)
		return;
	in_emu++;
	int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die("EMUGPU_CODE_DUMP=%s: %s", file, strerror(errno));
	uint8_t *buf = malloc(DUMP_MAX);
	if (!buf)
		die("EMUGPU_CODE_DUMP: no memory");
	pthread_mutex_lock(&S.lock);
	for (unsigned i = 0; i < S.nbo; i++) {
		struct bo *b = &S.bo[i];
		if (!b->used || b->size > DUMP_MAX || (b->flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP))
			continue;
		int user = (b->flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR) != 0;
		ssize_t got;
		if (user) {
			struct iovec local = { buf, b->size }, remote = { (void *)(uintptr_t)b->va, b->size };
			got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
		} else {
			got = pread(S.backing, buf, b->size, (off_t)b->offset);
		}
		if (got != (ssize_t)b->size)
			got = 0;
		uint64_t h = 0xcbf29ce484222325ull;
		for (ssize_t k = 0; k < got; k++)
			h = (h ^ buf[k]) * 0x100000001b3ull;
		if (b->dumped && b->hash == h)
			continue;
		b->dumped = 1;
		b->hash = h;
		char head[128];
		int n = snprintf(head, sizeof head, "emugpu-code va=0x%" PRIx64 " size=%zd kind=%s\n", b->va, got,
				 user ? "userptr" : (b->flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM) ? "vram" : "other");
		if (write(fd, head, (size_t)n) != n || (got && write(fd, buf, (size_t)got) != got))
			die("EMUGPU_CODE_DUMP=%s: short write", file);
	}
	pthread_mutex_unlock(&S.lock);
	free(buf);
	close(fd);
	in_emu--;
}

EXPORT void emugpu_dump_code(void)
{
	init();
	dump_code();
}

static void *processor(void *unused)
{
	(void)unused;
	for (;;) {
		int busy = 0;
		for (unsigned i = 0; i < MAXQ; i++) {
			if (!__atomic_load_n(&S.q[i].used, __ATOMIC_ACQUIRE) || S.q[i].halted || S.evicted)
				continue;
			uint64_t *wp = (uint64_t *)(uintptr_t)S.q[i].wptr, *rp = (uint64_t *)(uintptr_t)S.q[i].rptr;
			uint64_t slots = S.q[i].ring_size / 64;
			for (;;) {
				uint64_t r = __atomic_load_n(rp, __ATOMIC_ACQUIRE);
				if (r >= __atomic_load_n(wp, __ATOMIC_ACQUIRE))
					break;
				uint8_t *pkt = (uint8_t *)(uintptr_t)(S.q[i].ring + (r % slots) * 64);
				uint16_t header = __atomic_load_n((uint16_t *)pkt, __ATOMIC_ACQUIRE);
				unsigned type = header & 0xff;
				if (type == 1) /* INVALID: not published yet */
					break;
				if (type == 3 || type == 5) { /* BARRIER_AND / BARRIER_OR */
					const uint64_t *dep = (const uint64_t *)(pkt + 8);
					int n = 0, done = 0;
					for (int d = 0; d < 5; d++)
						if (dep[d]) {
							n++;
							done += signal_done(dep[d]);
						}
					if (n && (type == 3 ? done < n : !done))
						break; /* the queue waits, as the hardware's does */
				}
				if (type == 2)
					dump_code();
				if (type == 2 && take_fault(i, pkt)) /* KERNEL_DISPATCH */
					break;
				complete(*(uint64_t *)(pkt + 56));
				__atomic_store_n((uint16_t *)pkt, (uint16_t)((header & ~0xff) | 1), __ATOMIC_RELEASE);
				__atomic_store_n(rp, r + 1, __ATOMIC_RELEASE);
				busy = 1;
			}
		}
		if (!busy)
			usleep(50);
	}
	return NULL;
}

static void start_processor(void)
{
	pthread_t t;
	if (S.processor_started)
		return;
	S.processor_started = 1;
	if (pthread_create(&t, NULL, processor, NULL))
		die("cannot start the packet processor thread");
	pthread_detach(t);
}

static const char *const KFD_NAMES[] = {
	[0x01] = "GET_VERSION", [0x02] = "CREATE_QUEUE", [0x03] = "DESTROY_QUEUE",
	[0x04] = "SET_MEMORY_POLICY", [0x05] = "GET_CLOCK_COUNTERS",
	[0x06] = "GET_PROCESS_APERTURES", [0x07] = "UPDATE_QUEUE", [0x08] = "CREATE_EVENT",
	[0x09] = "DESTROY_EVENT", [0x0A] = "SET_EVENT", [0x0B] = "RESET_EVENT",
	[0x0C] = "WAIT_EVENTS", [0x0D] = "DBG_REGISTER_DEPRECATED",
	[0x0E] = "DBG_UNREGISTER_DEPRECATED", [0x0F] = "DBG_ADDRESS_WATCH_DEPRECATED",
	[0x10] = "DBG_WAVE_CONTROL_DEPRECATED", [0x11] = "SET_SCRATCH_BACKING_VA",
	[0x12] = "GET_TILE_CONFIG", [0x13] = "SET_TRAP_HANDLER",
	[0x14] = "GET_PROCESS_APERTURES_NEW", [0x15] = "ACQUIRE_VM",
	[0x16] = "ALLOC_MEMORY_OF_GPU", [0x17] = "FREE_MEMORY_OF_GPU",
	[0x18] = "MAP_MEMORY_TO_GPU", [0x19] = "UNMAP_MEMORY_FROM_GPU", [0x1A] = "SET_CU_MASK",
	[0x1B] = "GET_QUEUE_WAVE_STATE", [0x1C] = "GET_DMABUF_INFO", [0x1D] = "IMPORT_DMABUF",
	[0x1E] = "ALLOC_QUEUE_GWS", [0x1F] = "SMI_EVENTS", [0x20] = "SVM",
	[0x21] = "SET_XNACK_MODE", [0x22] = "CRIU_OP", [0x23] = "AVAILABLE_MEMORY",
};
/* linux 6.1 kfd_chardev.c: amdkfd_ioctls[] ends at AVAILABLE_MEMORY */
#define KFD_NR_END 0x24

/* KFD_IOCTL_SVM_FLAG_* bits 0-6; bit 7 EXT_COHERENT is newer than 6.1's uapi (6.7) */
static const char *const SVM_FLAGS[] = { "HOST_ACCESS", "COHERENT", "HIVE_LOCAL", "GPU_RO",
					 "GPU_EXEC", "GPU_READ_MOSTLY", "GPU_ALWAYS_MAPPED",
					 "EXT_COHERENT" };

static const char *const SVM_ATTRS[] = { "PREFERRED_LOC", "PREFETCH_LOC", "ACCESS",
					 "ACCESS_IN_PLACE", "NO_ACCESS", "SET_FLAGS",
					 "CLR_FLAGS", "GRANULARITY" };

static int kfd_ioctl(int fd, unsigned long req, void *arg)
{
	unsigned nr = _IOC_NR(req);
	struct out o;
	char name[64];
	int ret = 0, memory = 0;
	struct bo *b = NULL;
	(void)fd;

	if (nr >= KFD_NR_END || !KFD_NAMES[nr]) {
		begin(&o, "unknown", "kfd");
		put(&o, ",\"cmd\":\"0x%lx\",\"nr\":\"0x%x\",\"unknown\":true", req, nr);
		put_frames(&o);
		put_ret(&o, -ENOTTY);
		emit(&o);
		fprintf(stderr, "emulated-gpu: unknown KFD ioctl 0x%lx (nr 0x%x): answered ENOTTY\n", req, nr);
		errno = ENOTTY;
		return -1;
	}
	snprintf(name, sizeof name, "AMDKFD_IOC_%s", KFD_NAMES[nr]);
	begin(&o, name, "kfd");
	pthread_mutex_lock(&S.lock);
	switch (nr) {
	case 0x01: {
		struct kfd_ioctl_get_version_args *a = arg;
		a->major_version = KFD_IOCTL_MAJOR_VERSION;
		a->minor_version = KFD_IOCTL_MINOR_VERSION;
		break;
	}
	case 0x14: {
		struct kfd_ioctl_get_process_apertures_new_args *a = arg;
		struct kfd_process_device_apertures *ap =
			(struct kfd_process_device_apertures *)(uintptr_t)a->kfd_process_device_apertures_ptr;
		if (!a->num_of_nodes) {
			a->num_of_nodes = S.ngpu;
			break;
		}
		uint32_t n = a->num_of_nodes < (uint32_t)S.ngpu ? a->num_of_nodes : (uint32_t)S.ngpu;
		for (uint32_t i = 0; i < n; i++) {
			/* kfd_flat_memory.c, kfd_init_apertures_v9 */
			memset(&ap[i], 0, sizeof ap[i]);
			ap[i].lds_base = 1ull << 48;
			ap[i].lds_limit = ap[i].lds_base | 0xFFFFFFFFull;
			ap[i].scratch_base = 2ull << 48;
			ap[i].scratch_limit = ap[i].scratch_base | 0xFFFFFFFFull;
			ap[i].gpuvm_base = 4 * 4096; /* SVM_USER_BASE */
			ap[i].gpuvm_limit = (1ull << 47) - 1;
			ap[i].gpu_id = S.gpu[i].gpu_id;
		}
		a->num_of_nodes = n;
		break;
	}
	case 0x15: {
		struct kfd_ioctl_acquire_vm_args *a = arg;
		struct gpu *g = gpu_by_id(a->gpu_id);
		put(&o, ",\"gpu_id\":%u", a->gpu_id);
		if (!g || kind_of(a->drm_fd) != FD_DRM || &S.gpu[S.fd_gpu[a->drm_fd]] != g)
			ret = -EINVAL;
		else
			g->vm_acquired = 1;
		break;
	}
	case 0x04: /* SET_MEMORY_POLICY */
	case 0x11: /* SET_SCRATCH_BACKING_VA */
	case 0x13: /* SET_TRAP_HANDLER */ {
		uint32_t id = nr == 0x04 ? ((struct kfd_ioctl_set_memory_policy_args *)arg)->gpu_id
			    : nr == 0x11 ? ((struct kfd_ioctl_set_scratch_backing_va_args *)arg)->gpu_id
					 : ((struct kfd_ioctl_set_trap_handler_args *)arg)->gpu_id;
		put(&o, ",\"gpu_id\":%u", id);
		if (!gpu_by_id(id))
			ret = -EINVAL;
		break;
	}
	case 0x05: {
		struct kfd_ioctl_get_clock_counters_args *a = arg;
		/* a node without GPU (the CPU's) reads 0; the GPU's: a 100 MHz counter */
		a->gpu_clock_counter = gpu_by_id(a->gpu_id) ? now_ns(CLOCK_MONOTONIC_RAW) / 10 : 0;
		a->cpu_clock_counter = now_ns(CLOCK_MONOTONIC_RAW);
		a->system_clock_counter = now_ns(CLOCK_BOOTTIME);
		a->system_clock_freq = 1000000000;
		break;
	}
	case 0x12: {
		struct kfd_ioctl_get_tile_config_args *a = arg;
		if (!gpu_by_id(a->gpu_id)) {
			ret = -EINVAL;
			break;
		}
		/* gfx10: no tile mode tables (all zero); gb_addr_config as the driver reads it */
		a->gb_addr_config = 0x00000044;
		a->num_banks = a->num_ranks = 0;
		uint32_t *t = (uint32_t *)(uintptr_t)a->tile_config_ptr;
		uint32_t *m = (uint32_t *)(uintptr_t)a->macro_tile_config_ptr;
		a->num_tile_configs = a->num_tile_configs < 32 ? a->num_tile_configs : 32;
		a->num_macro_tile_configs = a->num_macro_tile_configs < 16 ? a->num_macro_tile_configs : 16;
		for (uint32_t i = 0; t && i < a->num_tile_configs; i++)
			t[i] = 0;
		for (uint32_t i = 0; m && i < a->num_macro_tile_configs; i++)
			m[i] = 0;
		break;
	}
	case 0x21: {
		struct kfd_ioctl_set_xnack_mode_args *a = arg;
		if (a->xnack_enabled < 0)
			a->xnack_enabled = S.xnack;
		else if (a->xnack_enabled && !S.xnack)
			ret = -EPERM; /* kfd_process_xnack_mode: GFX 10.1.1 and later: false */
		break;
	}
	case 0x23: {
		struct kfd_ioctl_get_available_memory_args *a = arg;
		struct gpu *g = gpu_by_id(a->gpu_id);
		if (!g)
			ret = -EINVAL;
		else
			a->available = g->vram;
		break;
	}
	case 0x08: {
		struct kfd_ioctl_create_event_args *a = arg;
		/* kfd_event_create: signal and debug events get a slot in the event page,
		 * the others an id past it and no page offset */
		int slot = a->event_type == KFD_IOC_EVENT_SIGNAL || a->event_type == KFD_IOC_EVENT_DEBUG_EVENT;
		unsigned id = 0;
		for (unsigned i = slot ? 1 : NONSIGNAL_BASE; i < (slot ? MAXEV : NONSIGNAL_BASE + MAXOEV); i++)
			if (!event_of(i)) {
				id = i;
				break;
			}
		if (!id) {
			ret = slot ? -ENOSPC : -ENOMEM;
			break;
		}
		struct event *e = id < MAXEV ? &S.ev[id] : &S.oev[id - NONSIGNAL_BASE];
		*e = (struct event){ .used = 1, .type = a->event_type, .auto_reset = a->auto_reset };
		a->event_id = id;
		a->event_trigger_data = id;
		a->event_page_offset = 0;
		if (slot) {
			a->event_slot_index = id;
			a->event_page_offset = KFD_MMAP_TYPE_EVENTS;
		}
		put(&o, ",\"event_id\":%u,\"event_type\":%u", id, a->event_type);
		break;
	}
	case 0x09:
	case 0x0A:
	case 0x0B: {
		unsigned id = ((struct kfd_ioctl_set_event_args *)arg)->event_id;
		struct event *e = event_of(id);
		/* set / reset: only signal events (event_can_be_cpu_signaled) */
		if (!e || (nr != 0x09 && e->type != KFD_IOC_EVENT_SIGNAL)) {
			ret = -EINVAL;
			break;
		}
		if (nr == 0x09)
			e->used = 0;
		e->signaled = nr == 0x0A;
		pthread_cond_broadcast(&S.ev_cond);
		break;
	}
	case 0x0C:
		ret = kfd_wait(arg);
		break;
	case 0x02: {
		struct kfd_ioctl_create_queue_args *a = arg;
		put(&o, ",\"queue_type\":%u", a->queue_type);
		if (!gpu_by_id(a->gpu_id) || S.queue_next >= MAXQ) {
			ret = -EINVAL;
			break;
		}
		if (a->queue_type != KFD_IOC_QUEUE_TYPE_COMPUTE_AQL) {
			put(&o, ",\"unknown\":true");
			fprintf(stderr, "emulated-gpu: queue type %u (not AQL) is not emulated: answered EINVAL\n",
				a->queue_type);
			ret = -EINVAL;
			break;
		}
		a->queue_id = S.queue_next++;
		S.q[a->queue_id].ring = a->ring_base_address;
		S.q[a->queue_id].ring_size = a->ring_size;
		S.q[a->queue_id].wptr = a->write_pointer_address;
		S.q[a->queue_id].rptr = a->read_pointer_address;
		S.q[a->queue_id].type = a->queue_type;
		S.q[a->queue_id].gpu_id = a->gpu_id;
		S.q[a->queue_id].halted = 0;
		__atomic_store_n(&S.q[a->queue_id].used, 1, __ATOMIC_RELEASE);
		start_processor();
		a->doorbell_offset = KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(a->gpu_id) |
				     ((uint64_t)a->queue_id * 8);
		put(&o, ",\"gpu_id\":%u,\"queue_id\":%u,\"ring_size\":%u", a->gpu_id, a->queue_id,
		    a->ring_size);
		break;
	}
	case 0x03: {
		unsigned id = ((struct kfd_ioctl_destroy_queue_args *)arg)->queue_id;
		if (id >= MAXQ || !S.q[id].used)
			ret = -EINVAL;
		else
			__atomic_store_n(&S.q[id].used, 0, __ATOMIC_RELEASE);
		break;
	}
	case 0x07:
	case 0x1A: {
		unsigned id = ((struct kfd_ioctl_update_queue_args *)arg)->queue_id;
		if (id >= MAXQ || !S.q[id].used)
			ret = -EINVAL;
		break; /* the emulated processor has no percentage or CU mask */
	}
	case 0x16: {
		struct kfd_ioctl_alloc_memory_of_gpu_args *a = arg;
		memory = 1;
		ret = kfd_alloc(a);
		put(&o, ",\"gpu_id\":%u,\"size\":%" PRIu64 ",\"va\":\"0x%" PRIx64 "\"", a->gpu_id, (uint64_t)a->size,
		    (uint64_t)a->va_addr);
		put_flags(&o, a->flags);
		if (!ret)
			put(&o, ",\"handle\":\"0x%" PRIx64 "\"", (uint64_t)a->handle);
		break;
	}
	case 0x17: {
		struct kfd_ioctl_free_memory_of_gpu_args *a = arg;
		memory = 1;
		b = bo_of(a->handle);
		put(&o, ",\"handle\":\"0x%" PRIx64 "\"", (uint64_t)a->handle);
		if (!b) {
			ret = -EINVAL;
			break;
		}
		put(&o, ",\"gpu_id\":%u,\"size\":%" PRIu64 ",\"va\":\"0x%" PRIx64 "\"", b->gpu_id, b->size, b->va);
		put_flags(&o, b->flags);
		b->used = 0;
		break;
	}
	case 0x18:
	case 0x19: {
		struct kfd_ioctl_map_memory_to_gpu_args *a = arg;
		memory = 1;
		put(&o, ",\"handle\":\"0x%" PRIx64 "\"", (uint64_t)a->handle);
		ret = kfd_map(arg, nr == 0x18);
		b = bo_of(a->handle);
		if (b) {
			put(&o, ",\"gpu_id\":%u,\"size\":%" PRIu64 ",\"va\":\"0x%" PRIx64 "\"", b->gpu_id, b->size,
			    b->va);
			put_flags(&o, b->flags);
		}
		put(&o, ",\"n_devices\":%u,\"n_success\":%u", a->n_devices, a->n_success);
		break;
	}
	case 0x20: {
		struct kfd_ioctl_svm_args *a = arg;
		memory = 1;
		put(&o, ",\"op\":\"%s\",\"start\":\"0x%" PRIx64 "\",\"size\":%" PRIu64 ",\"attrs\":[",
		    a->op == KFD_IOCTL_SVM_OP_SET_ATTR ? "SET_ATTR" : a->op == KFD_IOCTL_SVM_OP_GET_ATTR ? "GET_ATTR" : "?",
		    (uint64_t)a->start_addr, (uint64_t)a->size);
		for (uint32_t i = 0; i < a->nattr; i++) {
			uint32_t t = a->attrs[i].type;
			put(&o, "%s{\"type\":\"%s\",\"value\":\"0x%x\"", i ? "," : "",
			    t < 8 ? SVM_ATTRS[t] : "?", a->attrs[i].value);
			if (t == KFD_IOCTL_SVM_ATTR_SET_FLAGS || t == KFD_IOCTL_SVM_ATTR_CLR_FLAGS) {
				put(&o, ",\"names\":[");
				for (unsigned b = 0, first = 1; b < 8; b++)
					if (a->attrs[i].value & (1u << b)) {
						put(&o, "%s\"%s\"", first ? "" : ",", SVM_FLAGS[b]);
						first = 0;
					}
				put(&o, "]");
			}
			put(&o, "}");
			if (t >= 8)
				ret = -EINVAL;
		}
		put(&o, "]");
		if (a->op > KFD_IOCTL_SVM_OP_GET_ATTR || !a->size || ((a->start_addr | a->size) & 4095)) {
			ret = -EINVAL;
		} else if (a->op == KFD_IOCTL_SVM_OP_GET_ATTR) {
			for (uint32_t i = 0; i < a->nattr; i++) { /* nothing set: the defaults */
				if (a->attrs[i].type <= KFD_IOCTL_SVM_ATTR_PREFETCH_LOC)
					a->attrs[i].value = KFD_IOCTL_SVM_LOCATION_UNDEFINED;
				else if (a->attrs[i].type >= KFD_IOCTL_SVM_ATTR_SET_FLAGS)
					a->attrs[i].value = 0;
			}
		}
		break;
	}
	default:
		/* in the driver's table, not emulated: loud, and an error the caller sees */
		put(&o, ",\"unknown\":true");
		fprintf(stderr, "emulated-gpu: KFD ioctl %s is not emulated: answered EINVAL\n", name);
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&S.lock);
	if (memory)
		put_frames(&o);
	put_ret(&o, ret);
	emit(&o);
	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* DRM (amdgpu)                                                                          */
/* ------------------------------------------------------------------------------------ */

static int copy_out(struct drm_amdgpu_info *q, const void *v, size_t n)
{
	memcpy((void *)(uintptr_t)q->return_pointer, v, q->return_size < n ? q->return_size : n);
	return 0;
}

static int amdgpu_info(struct gpu *g, struct drm_amdgpu_info *q, struct out *o)
{
	put(o, ",\"query\":\"0x%x\"", q->query);
	switch (q->query) {
	case AMDGPU_INFO_ACCEL_WORKING: {
		uint32_t one = 1;
		return copy_out(q, &one, sizeof one);
	}
	case AMDGPU_INFO_DEV_INFO: {
		struct drm_amdgpu_info_device d;
		memset(&d, 0, sizeof d);
		unsigned cus = g->simd_count / (g->simd_per_cu ? g->simd_per_cu : 1);
		d.device_id = g->device_id;
		/* nv.c / soc21.c: external_rev_id = rev_id + 0x1 (GC 10.1.10, 11.0.0), + 0x32
		 * (GC 10.3.2, gfx1031); rev_id 0 */
		d.chip_rev = 0;
		d.external_rev = g->gfx == 100301 ? 0x32 : 0x1;
		d.family = g->gfx >= 110000 ? AMDGPU_FAMILY_GC_11_0_0 : AMDGPU_FAMILY_NV;
		d.num_shader_engines = g->array_count / 2 ? g->array_count / 2 : 1;
		d.num_shader_arrays_per_engine = 2;
		d.cu_active_number = cus;
		d.max_engine_clock = 1750000;
		d.max_memory_clock = 875000;
		d.gpu_counter_freq = 100000;
		d.virtual_address_offset = 0x200000;
		d.virtual_address_max = 1ull << 47;
		d.virtual_address_alignment = 4096;
		d.gart_page_size = 4096;
		d.pte_fragment_size = 2 << 20;
		d.wave_front_size = 32;
		d.num_rb_pipes = 16;
		d.vram_type = AMDGPU_VRAM_TYPE_GDDR6;
		d.vram_bit_width = 256;
		d.ids_flags = 0;
		d.high_va_offset = 0xffff800000000000ull;
		d.high_va_max = 0xffffffffffffffffull;
		return copy_out(q, &d, sizeof d);
	}
	case AMDGPU_INFO_VRAM_GTT: {
		struct drm_amdgpu_info_vram_gtt v = { .vram_size = g->vram,
						      .vram_cpu_accessible_size = 256 << 20,
						      .gtt_size = 8ull << 30 };
		return copy_out(q, &v, sizeof v);
	}
	case AMDGPU_INFO_MEMORY: {
		struct drm_amdgpu_memory_info m;
		memset(&m, 0, sizeof m);
		m.vram.total_heap_size = m.vram.usable_heap_size = g->vram;
		m.cpu_accessible_vram.total_heap_size = m.cpu_accessible_vram.usable_heap_size = 256 << 20;
		m.gtt.total_heap_size = m.gtt.usable_heap_size = 8ull << 30;
		m.vram.max_allocation = g->vram;
		m.gtt.max_allocation = 8ull << 30;
		return copy_out(q, &m, sizeof m);
	}
	case AMDGPU_INFO_HW_IP_INFO: {
		/* GFX / COMPUTE: the GC version of the fixture's gfx_target_version; SDMA: 5.0;
		 * one ring each; IB alignments as gfx10/11 report them (amdgpu_hw_ip_info) */
		struct drm_amdgpu_info_hw_ip ip;
		uint32_t t = q->query_hw_ip.type;
		memset(&ip, 0, sizeof ip);
		put(o, ",\"hw_ip\":%u", t);
		if (t == AMDGPU_HW_IP_GFX || t == AMDGPU_HW_IP_COMPUTE) {
			ip.hw_ip_version_major = g->gfx / 10000;
			ip.hw_ip_version_minor = g->gfx / 100 % 100;
			ip.ib_start_alignment = 32;
			ip.ib_size_alignment = 32;
			ip.available_rings = 1;
		} else if (t == AMDGPU_HW_IP_DMA) {
			ip.hw_ip_version_major = g->gfx >= 110000 ? 6 : 5;
			ip.ib_start_alignment = 256;
			ip.ib_size_alignment = 4;
			ip.available_rings = 1;
		}
		return copy_out(q, &ip, sizeof ip);
	}
	case AMDGPU_INFO_HW_IP_COUNT: {
		/* amdgpu_kms.c: the number of IP blocks of the type: one GFX (also for
		 * COMPUTE), one SDMA block; no video blocks emulated */
		uint32_t t = q->query_hw_ip.type, n = t == AMDGPU_HW_IP_GFX || t == AMDGPU_HW_IP_COMPUTE ||
							   t == AMDGPU_HW_IP_DMA;
		put(o, ",\"hw_ip\":%u", t);
		return copy_out(q, &n, sizeof n);
	}
	case AMDGPU_INFO_READ_MMR_REG: {
		/* Only GB_ADDR_CONFIG (0x263e); the driver's whitelist has more
		 * (nv_allowed_read_registers), not emulated. gfx10: 0x44, the value of
		 * gfx_v10_0.c's golden settings for GC 10.1.2 (navi10's sibling); gfx11: 0x545
		 * (32 pipes, 256-byte interleave), a layout ROCr's gfx11 addrlib accepts; real
		 * boards read theirs from the hardware. */
		uint32_t v = g->gfx >= 110000 ? 0x00000545 : 0x00000044;
		put(o, ",\"reg\":\"0x%x\",\"count\":%u", q->read_mmr_reg.dword_offset, q->read_mmr_reg.count);
		if (q->read_mmr_reg.dword_offset != 0x263e || q->read_mmr_reg.count != 1) {
			put(o, ",\"unknown\":true");
			fprintf(stderr, "emulated-gpu: register 0x%x is not emulated: answered EINVAL\n",
				q->read_mmr_reg.dword_offset);
			return -EINVAL;
		}
		return copy_out(q, &v, sizeof v);
	}
	default:
		/* amdgpu_kms.c amdgpu_info_ioctl: "Invalid request" -> -EINVAL */
		put(o, ",\"unknown\":true");
		fprintf(stderr, "emulated-gpu: AMDGPU_INFO query 0x%x is not emulated: answered EINVAL\n",
			q->query);
		return -EINVAL;
	}
}

static int drm_ioctl(int fd, unsigned long req, void *arg)
{
	struct out o;
	unsigned nr = _IOC_NR(req);
	int ret;
	struct gpu *g = &S.gpu[S.fd_gpu[fd]];

	if (nr == 0x00) { /* DRM_IOCTL_VERSION */
		struct drm_version *v = arg;
		/* amdgpu_drv.c (6.1): KMS_DRIVER_MAJOR 3, KMS_DRIVER_MINOR 49 */
		static const char name[] = "amdgpu", date[] = "20150101", desc[] = "AMD GPU";
		begin(&o, "DRM_IOCTL_VERSION", "render");
		v->version_major = 3;
		v->version_minor = 49;
		v->version_patchlevel = 0;
#define FILL(f, s)                                                                     \
	do {                                                                           \
		if (v->f##_len && v->f)                                                \
			memcpy(v->f, s, v->f##_len < sizeof s ? v->f##_len : sizeof s); \
		v->f##_len = sizeof s - 1;                                             \
	} while (0)
		FILL(name, name);
		FILL(date, date);
		FILL(desc, desc);
		ret = 0;
	} else if (nr == DRM_COMMAND_BASE + DRM_AMDGPU_INFO) {
		begin(&o, "DRM_IOCTL_AMDGPU_INFO", "render");
		ret = amdgpu_info(g, arg, &o);
	} else {
		/* drm_ioctl: an ioctl outside the tables -> -EINVAL */
		begin(&o, "unknown", "render");
		put(&o, ",\"cmd\":\"0x%lx\",\"nr\":\"0x%x\",\"unknown\":true", req, nr);
		put_frames(&o);
		fprintf(stderr, "emulated-gpu: DRM ioctl 0x%lx (nr 0x%x) is not emulated: answered EINVAL\n",
			req, nr);
		ret = -EINVAL;
	}
	put_ret(&o, ret);
	emit(&o);
	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	REAL(int, ioctl, int, unsigned long, ...);
	switch (kind_of(fd)) {
	case FD_KFD:
		return kfd_ioctl(fd, req, arg);
	case FD_DRM:
		return drm_ioctl(fd, req, arg);
	default:
		return real_ioctl(fd, req, arg);
	}
}
