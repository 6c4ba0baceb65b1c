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
 * uploaded (memory.c, "Code read-back").
 *
 * Faults: EMUGPU_FAULT=KIND[@VA] or the exported emugpu_fault(kind, va) make the next
 * kernel dispatch fault instead of completing, reported as the driver and ROCr's trap
 * handler report it (the memory event, or the queue's inactive signal), or hang (kind
 * `hang`: the dispatch never completes; with EMUGPU_RESET_AFTER=SECONDS the driver's GPU
 * reset follows, the hardware exception event): see faults.c.
 *
 * The emulator is split by concern, as Mesa's drm-shim is (emugpu.h lists the files). This
 * file is the core: the interposed libc entry points (open and its variants, stat, access,
 * readlink, realpath, opendir, fopen, close, dup, fcntl, mmap, ioctl), the fds that stand
 * for /dev/kfd and the render nodes, the state's definition and initialisation, and the
 * dispatch of an ioctl on those fds to kfd.c or drm.c.
 */
#include "emugpu.h"

struct emu S = { .lock = PTHREAD_MUTEX_INITIALIZER, .ev_cond = PTHREAD_COND_INITIALIZER, .logfd = 2 };

__thread int in_emu;

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "emulated-gpu: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
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

void init(void)
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

uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ */
/* Device fds and the interposed entry points                                           */
/* ------------------------------------------------------------------------------------ */

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

enum fdkind kind_of(int fd)
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
/* mmap: a render node's offset maps a buffer's pages (memory.c)                        */
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
/* ioctl: /dev/kfd's go to kfd.c, the render node's to drm.c                            */
/* ------------------------------------------------------------------------------------ */

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
