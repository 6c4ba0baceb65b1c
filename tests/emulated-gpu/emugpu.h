/*
 * emugpu.h: what the emulated GPU's files share (emugpu.c says what the whole does).
 *
 * It owns the emulator's state, S, one structure for the process (defined in emugpu.c):
 * the fixture's GPUs, the fds that stand for /dev/kfd and the render nodes, the buffers,
 * the KFD events and the AQL queues. S.lock guards it; kfd_ioctl holds it across every KFD
 * ioctl, so the kfd_* helpers below run with it held. The library is built with
 * -fvisibility=hidden: what is declared here is shared between the files and invisible to
 * the program; only EXPORT functions (the interposed libc entry points, emugpu_mark,
 * emugpu_fault, emugpu_dump_code) are seen from outside.
 *
 * The files, one concern each:
 *   emugpu.c    the interposed libc entry points (open, stat, mmap, ioctl, ...), device
 *               fds, initialisation, and the dispatch of an ioctl to kfd.c or drm.c
 *   topology.c  the fixture: the KFD topology, the GPUs, the sysfs paths standing for it
 *   log.c       the ioctl log (one JSON line per ioctl) and emugpu_mark
 *   kfd.c       the KFD ioctls (/dev/kfd): the table and the ones answered in place
 *   memory.c    buffers: allocation, mapping, SVM, mmap offsets, and the code read-back
 *   events.c    KFD events: creation, set / reset, WAIT_EVENTS, and the GPU reset's
 *               hardware exception event
 *   queues.c    AQL queues and the packet processor that completes their packets
 *   faults.c    fault injection (EMUGPU_FAULT, emugpu_fault): faults, hangs, resets
 *   drm.c       the render node's ioctls (DRM_IOCTL_VERSION, AMDGPU_INFO)
 */
#ifndef EMUGPU_H
#define EMUGPU_H

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

struct event {
	int used, signaled, auto_reset;
	unsigned type;
	struct kfd_hsa_memory_exception_data mem; /* a memory event's fault */
	struct kfd_hsa_hw_exception_data hw; /* a hardware exception event's reset */
};

struct queue {
	int used;
	int halted; /* an injected queue error or hang halted it (faults.c) */
	unsigned type, gpu_id;
	uint64_t ring, ring_size, wptr, rptr;
};

struct emu {
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
	struct event ev[MAXEV], oev[MAXOEV];
	struct queue q[MAXQ];
	int evicted; /* an injected VM fault or a GPU reset evicted every queue */
	unsigned queue_next;
	int processor_started;
	int xnack;
};
extern struct emu S;

extern __thread int in_emu; /* our own libc calls are not ours to answer */

#define REAL(ret, name, ...)                                                         \
	static ret (*real_##name)(__VA_ARGS__);                                      \
	if (!real_##name)                                                            \
		real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

/* emugpu.c */
__attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...);
void init(void);
enum fdkind kind_of(int fd);
uint64_t now_ns(clockid_t c);

/* topology.c */
void load_fixture(void);
struct gpu *gpu_by_id(unsigned id);
const char *map_path(const char *path, char *buf, size_t n);
int dev_node(const char *path, int *gpu);

/* log.c: a JSON line is built in a struct out and written whole by emit() */
struct out {
	char b[8192];
	size_t n;
};
__attribute__((format(printf, 2, 3))) void put(struct out *o, const char *fmt, ...);
void put_str(struct out *o, const char *s);
void emit(struct out *o);
void begin(struct out *o, const char *ioctl, const char *fdname);
void put_frames(struct out *o);
void put_flags(struct out *o, uint32_t flags);
void put_ret(struct out *o, int ret);
int answer(struct out *o, int ret);

/* kfd.c */
int kfd_ioctl(int fd, unsigned long req, void *arg);

/* memory.c (with S.lock held, but dump_code, which takes it) */
struct bo *bo_of(uint64_t handle);
int kfd_alloc(struct kfd_ioctl_alloc_memory_of_gpu_args *a);
int kfd_map(void *arg, int map);
int kfd_svm(struct kfd_ioctl_svm_args *a, struct out *o);
void dump_code(void);

/* events.c (with S.lock held) */
struct event *event_of(unsigned id);
int kfd_create_event(struct kfd_ioctl_create_event_args *a, struct out *o);
int kfd_set_event(unsigned nr, unsigned id);
int kfd_wait(struct kfd_ioctl_wait_events_args *a);
unsigned signal_reset(unsigned gpu_id);

/* queues.c (kfd_* with S.lock held) */
int kfd_create_queue(struct kfd_ioctl_create_queue_args *a, struct out *o);
int kfd_destroy_queue(unsigned id);
int kfd_update_queue(unsigned id);

/* faults.c */
void arm_from_env(void);
int take_fault(unsigned q, const uint8_t *pkt);
void reset_if_due(void);
void late_fault_if_due(void);

/* drm.c */
int drm_ioctl(int fd, unsigned long req, void *arg);

#endif
