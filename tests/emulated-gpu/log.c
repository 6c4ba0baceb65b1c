/*
 * log.c: the ioctl log.
 *
 * Every ioctl on an emulated fd is one JSON line in EMUGPU_LOG (default stderr), built in a
 * struct out (put, put_str) and written whole (emit), so that lines from several threads
 * never interleave: "seq", "tid", "fd", "ioctl", the arguments that matter, "ret". The
 * memory ioctls also carry their flags by name (put_flags) and the calling frames
 * (put_frames: the innermost ROCm frames, and the outermost frame of each ROCm layer, named
 * when exported: "api", "hsa", "kmt"; "caller", the object that called ROCm). Test programs
 * write {"mark": TEXT} lines with the exported emugpu_mark; faults.c writes {"fault": ...}
 * and {"reset": ...} lines.
 */
#include "emugpu.h"

void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(o->b + o->n, sizeof o->b - o->n, fmt, ap);
	va_end(ap);
	if (w > 0)
		o->n += (size_t)w < sizeof o->b - o->n ? (size_t)w : sizeof o->b - o->n - 1;
}

void put_str(struct out *o, const char *s)
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

void emit(struct out *o)
{
	put(o, "}\n");
	ssize_t w = write(S.logfd, o->b, o->n);
	(void)w;
}

void begin(struct out *o, const char *ioctl, const char *fdname)
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
void put_frames(struct out *o)
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

void put_flags(struct out *o, uint32_t flags)
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

void put_ret(struct out *o, int ret)
{
	put(o, ",\"ret\":%d", ret);
	if (ret)
		put(o, ",\"errno\":\"%s\"", strerrorname_np(-ret) ? strerrorname_np(-ret) : "?");
}

/* An ioctl's end: its answer (0 or -errno) logged and the line written, then returned as
 * ioctl(2) returns it (-1 with errno set). */
int answer(struct out *o, int ret)
{
	put_ret(o, ret);
	emit(o);
	if (ret) {
		errno = -ret;
		return -1;
	}
	return 0;
}
