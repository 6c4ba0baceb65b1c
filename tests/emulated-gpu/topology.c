/*
 * topology.c: the fixture, the GPUs the emulated driver serves.
 *
 * EMUGPU_FIXTURE names a tests/fixtures directory: a KFD topology as sysfs shows it
 * (nodes/N/properties, gpu_id, mem_banks) and the render nodes' sysfs directories
 * (drm/renderD<minor>). This file reads the GPU nodes from it once (load_fixture, at the
 * first interposed call), finds a GPU by its gpu_id, and maps the paths the runtime reads
 * (/sys/devices/virtual/kfd/kfd/topology, /sys/class/kfd/kfd/topology, /sys/dev/char/226:N,
 * /sys/class/drm/renderDN) into the fixture, and /dev/kfd and /dev/dri/renderDN to the
 * emulated devices (emugpu.c opens them).
 */
#include "emugpu.h"

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

void load_fixture(void)
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

struct gpu *gpu_by_id(unsigned id)
{
	for (int i = 0; i < S.ngpu; i++)
		if (S.gpu[i].gpu_id == id)
			return &S.gpu[i];
	return NULL;
}

static const char *const TOPOLOGY[] = { "/sys/devices/virtual/kfd/kfd/topology",
					"/sys/class/kfd/kfd/topology" };

/* The fixture path standing for `path`, or NULL when it is not ours. */
const char *map_path(const char *path, char *buf, size_t n)
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
int dev_node(const char *path, int *gpu)
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
