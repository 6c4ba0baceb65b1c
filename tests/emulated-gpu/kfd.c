/*
 * kfd.c: the KFD ioctls (/dev/kfd), as linux 6.1 (KFD 1.11) answers them.
 *
 * kfd_ioctl logs each ioctl as one line (log.c), holds S.lock while it answers, and answers
 * in place the ones about the process and its devices (version, apertures, ACQUIRE_VM,
 * clock counters, tile config, XNACK, available memory, the per-device policies); memory
 * (memory.c), events (events.c) and queues (queues.c) have files of their own. An ioctl
 * outside linux 6.1's table is answered -ENOTTY, one in it that is not emulated -EINVAL;
 * both are logged as unknown and said on stderr.
 */
#include "emugpu.h"

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

int kfd_ioctl(int fd, unsigned long req, void *arg)
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
	case 0x08:
		ret = kfd_create_event(arg, &o);
		break;
	case 0x09:
	case 0x0A:
	case 0x0B:
		ret = kfd_set_event(nr, ((struct kfd_ioctl_set_event_args *)arg)->event_id);
		break;
	case 0x0C:
		ret = kfd_wait(arg);
		break;
	case 0x02:
		ret = kfd_create_queue(arg, &o);
		break;
	case 0x03:
		ret = kfd_destroy_queue(((struct kfd_ioctl_destroy_queue_args *)arg)->queue_id);
		break;
	case 0x07:
	case 0x1A:
		ret = kfd_update_queue(((struct kfd_ioctl_update_queue_args *)arg)->queue_id);
		break;
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
	case 0x20:
		memory = 1;
		ret = kfd_svm(arg, &o);
		break;
	default:
		/* in the driver's table, not emulated: loud, and an error the caller sees */
		put(&o, ",\"unknown\":true");
		fprintf(stderr, "emulated-gpu: KFD ioctl %s is not emulated: answered EINVAL\n", name);
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&S.lock);
	if (memory)
		put_frames(&o);
	return answer(&o, ret);
}
