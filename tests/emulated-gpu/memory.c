/*
 * memory.c: buffers, as the driver keeps them for the process.
 *
 * ALLOC_MEMORY_OF_GPU makes a buffer (struct bo): VRAM, GTT and doorbell buffers are backed
 * by pages of one sparse memfd (S.backing), whose offset is the buffer's mmap_offset on the
 * render node (emugpu.c's mmap maps those pages); a userptr buffer is the process's own
 * memory, and an MMIO remap page has a /dev/kfd offset. The handle is the gpu_id in the
 * high half and the buffer's index + 1 in the low half, as the driver's idr hands them out.
 * MAP / UNMAP_MEMORY_TO_GPU check the devices and count; SVM answers SET_ATTR and, with
 * nothing set, GET_ATTR's defaults. Every one of them is logged with its flags by name and
 * the calling frames (kfd.c). The code read-back (EMUGPU_CODE_DUMP, emugpu_dump_code) is
 * here too: it reads every buffer the GPU can see.
 */
#include "emugpu.h"

struct bo *bo_of(uint64_t handle)
{
	uint32_t idr = (uint32_t)handle;
	if (idr == 0 || idr > S.nbo || !S.bo[idr - 1].used || S.bo[idr - 1].gpu_id != handle >> 32)
		return NULL;
	return &S.bo[idr - 1];
}

int kfd_alloc(struct kfd_ioctl_alloc_memory_of_gpu_args *a)
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

int kfd_map(void *arg, int map)
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

/* KFD_IOCTL_SVM_FLAG_* bits 0-6; bit 7 EXT_COHERENT is newer than 6.1's uapi (6.7) */
static const char *const SVM_FLAGS[] = { "HOST_ACCESS", "COHERENT", "HIVE_LOCAL", "GPU_RO",
					 "GPU_EXEC", "GPU_READ_MOSTLY", "GPU_ALWAYS_MAPPED",
					 "EXT_COHERENT" };

static const char *const SVM_ATTRS[] = { "PREFERRED_LOC", "PREFETCH_LOC", "ACCESS",
					 "ACCESS_IN_PLACE", "NO_ACCESS", "SET_FLAGS",
					 "CLR_FLAGS", "GRANULARITY" };

/* AMDKFD_IOC_SVM: its arguments logged (the attributes, flags by name); nothing is kept. */
int kfd_svm(struct kfd_ioctl_svm_args *a, struct out *o)
{
	int ret = 0;
	put(o, ",\"op\":\"%s\",\"start\":\"0x%" PRIx64 "\",\"size\":%" PRIu64 ",\"attrs\":[",
	    a->op == KFD_IOCTL_SVM_OP_SET_ATTR ? "SET_ATTR" : a->op == KFD_IOCTL_SVM_OP_GET_ATTR ? "GET_ATTR" : "?",
	    (uint64_t)a->start_addr, (uint64_t)a->size);
	for (uint32_t i = 0; i < a->nattr; i++) {
		uint32_t t = a->attrs[i].type;
		put(o, "%s{\"type\":\"%s\",\"value\":\"0x%x\"", i ? "," : "",
		    t < 8 ? SVM_ATTRS[t] : "?", a->attrs[i].value);
		if (t == KFD_IOCTL_SVM_ATTR_SET_FLAGS || t == KFD_IOCTL_SVM_ATTR_CLR_FLAGS) {
			put(o, ",\"names\":[");
			for (unsigned b = 0, first = 1; b < 8; b++)
				if (a->attrs[i].value & (1u << b)) {
					put(o, "%s\"%s\"", first ? "" : ",", SVM_FLAGS[b]);
					first = 0;
				}
			put(o, "]");
		}
		put(o, "}");
		if (t >= 8)
			ret = -EINVAL;
	}
	put(o, "]");
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
	return ret;
}

/* Code read-back (emugpu.c's header). Where a code object's bytes reach the GPU depends on the
 * runtime: 5.2.3's loader stages the segments in host memory it hands the GPU (a userptr
 * buffer) and has a blit kernel copy them into VRAM, a kernel this emulator completes
 * without running; 7.2.4's writes them into host-visible VRAM itself. So every buffer the
 * GPU can see (userptr ones read in the process's memory through process_vm_readv, never a
 * fault; the others from the backing memfd) of at most DUMP_MAX bytes is appended to
 * EMUGPU_CODE_DUMP, at each kernel dispatch and when the program calls the exported
 * emugpu_dump_code(), whenever its contents differ from when it was last appended (a 64-bit
 * FNV-1a hash). An unreadable buffer is named with size=0. */
#define DUMP_MAX (4u << 20)
void dump_code(void)
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
