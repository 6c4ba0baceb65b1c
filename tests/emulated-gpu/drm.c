/*
 * drm.c: the render node's ioctls, as linux 6.1's amdgpu answers them.
 *
 * libdrm_amdgpu opens /dev/dri/renderD<minor> (a fixture GPU's) and asks DRM_IOCTL_VERSION
 * and AMDGPU_INFO queries: the device (family, revision, CUs, clocks, address space), VRAM
 * and GTT sizes, the IP blocks, one register (GB_ADDR_CONFIG). The answers come from the
 * fixture's node properties and the driver's own constants. Any other query or ioctl is
 * logged as unknown, written to stderr and answered -EINVAL, as the driver answers it.
 */
#include "emugpu.h"

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

int drm_ioctl(int fd, unsigned long req, void *arg)
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
	return answer(&o, ret);
}
