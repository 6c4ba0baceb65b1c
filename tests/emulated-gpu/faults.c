/*
 * faults.c: fault injection, what a broken kernel or a broken card does to the runtime.
 *
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
 *   hang              a wave that never ends (an endless loop, a barrier some waves never
 *                     reach): the dispatch never completes, its completion signal is never
 *                     decremented, the queue's read index stays at that packet and the
 *                     queue consumes nothing more; other queues go on. The runtime hears
 *                     nothing (said once on stderr); a program waiting for that dispatch
 *                     waits for ever, unless the driver resets the GPU (below). No @VA.
 *
 * The GPU reset: with EMUGPU_RESET_AFTER=SECONDS (a decimal number), SECONDS after a
 * dispatch stopped for good (a hang, or a gfx10.3 queue error) comes what linux 6.1 does
 * when it resets a hung GPU (amdgpu_device_gpu_recover, kgd2kfd_pre_reset): the process's
 * queues are evicted (kfd_suspend_all_processes; post_reset does not restore them, so
 * nothing of the process runs again), and kfd_signal_reset_event sets every event of type
 * HW_EXCEPTION with its data (struct kfd_hsa_hw_exception_data: reset_type
 * WHOLE_GPU_RESET, reset_cause GPU_HANG, memory_lost 1, the gpu_id), which WAIT_EVENTS
 * copies out (events.c). ROCr 6.0 and later (Debian's 5.7.1 too) create such an event at
 * hsa_init and watch it: "HW Exception by GPU node-N (Agent handle: 0x...) reason :GPU
 * Hang", unless a system event handler (HSA_AMD_GPU_HW_EXCEPTION_EVENT) returns success,
 * then abort. 5.2.3 creates none: it hears nothing and waits for ever. The reset is
 * written to the log as {"reset": "gpu", ...} and said on stderr. Without
 * EMUGPU_RESET_AFTER nothing resets: a test bounds the program's run time itself.
 *
 * EMUGPU_FAULT_DELAY=SECONDS makes a memory fault (vm, vm-read-only, vm-imprecise) come late
 * in its kernel's run, as a kernel that works a while before its bad access: the dispatch is
 * taken and its queue consumes nothing more (its read index stays at that packet), the
 * other queues go on, and SECONDS later the fault is delivered as above. Without it the
 * fault comes as the dispatch is taken.
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
#include "emugpu.h"

enum { F_NONE, F_VM, F_VM_RO, F_VM_IMPRECISE, F_APERTURE, F_ILLEGAL, F_HANG };
static const char *const FAULT_NAMES[] = { "none", "vm", "vm-read-only", "vm-imprecise", "aperture",
					   "illegal", "hang" };
static struct {
	int kind; /* F_*, taken by the packet processor */
	uint64_t va; /* 0: the first kernel argument */
	unsigned long after; /* dispatches to let complete before taking it */
} armed;

/* A memory fault delivered late (EMUGPU_FAULT_DELAY): the delay, and the one pending. */
static struct {
	uint64_t delay_ns;
	uint64_t due_ns; /* CLOCK_MONOTONIC; 0: none pending */
	unsigned q;
	int kind;
	uint64_t va;
} late;

/* The GPU reset (above): EMUGPU_RESET_AFTER, and when the next one is due. */
static struct {
	const char *after; /* EMUGPU_RESET_AFTER as given, NULL when unset */
	uint64_t after_ns;
	uint64_t due_ns; /* CLOCK_MONOTONIC; 0: none due */
	unsigned gpu_id;
} reset;

/* Arms KIND with VA for the dispatch after the next AFTER ones; -1 (and a line on stderr)
 * when KIND is unknown or takes no address. */
static int arm(const char *kind, uint64_t va, unsigned long after)
{
	int k = -1;
	for (int i = 0; i < (int)(sizeof FAULT_NAMES / sizeof *FAULT_NAMES); i++)
		if (kind && !strcmp(kind, FAULT_NAMES[i]))
			k = i;
	if (k < 0 || (va && k != F_VM && k != F_VM_RO)) {
		fprintf(stderr, "emulated-gpu: %s: %s (kinds: vm[@VA] vm-read-only[@VA] vm-imprecise aperture illegal hang none)\n",
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

/* EMUGPU_RESET_AFTER=SECONDS and EMUGPU_FAULT=KIND[@VA], read once at start; a malformed
 * one stops the process. */
void arm_from_env(void)
{
	const char *spec = getenv("EMUGPU_FAULT"), *r = getenv("EMUGPU_RESET_AFTER"),
		   *d = getenv("EMUGPU_FAULT_DELAY");
	if (d && *d) {
		char *end = NULL;
		errno = 0;
		double s = strtod(d, &end);
		if (errno || *end || !(s >= 0 && s < 1e6) || *d == '-' || *d == '+' || *d == ' ')
			die("EMUGPU_FAULT_DELAY=%s: expected a number of seconds", d);
		late.delay_ns = (uint64_t)(s * 1e9);
	}
	char kind[32];
	uint64_t va = 0;
	if (r && *r) {
		char *end = NULL;
		errno = 0;
		double s = strtod(r, &end);
		if (errno || *end || !(s >= 0 && s < 1e6) || *r == '-' || *r == '+' || *r == ' ')
			die("EMUGPU_RESET_AFTER=%s: expected a number of seconds", r);
		reset.after = r;
		reset.after_ns = (uint64_t)(s * 1e9);
	}
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

/* The memory event as KFD signals it (above), and the process's queues evicted. S.lock held. */
static void deliver_memory_fault(unsigned q, int kind, uint64_t va)
{
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
}

/* Called by the packet processor with a kernel dispatch packet of queue q: 1 when a fault
 * was armed and is now delivered (the packet stays unconsumed), 0 otherwise. The log line
 * is written first: the runtime may end the process as soon as the fault is delivered. */
int take_fault(unsigned q, const uint8_t *pkt)
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
	int memory = kind == F_VM || kind == F_VM_RO || kind == F_VM_IMPRECISE, hang = kind == F_HANG;
	if ((kind == F_VM || kind == F_VM_RO) && !va)
		va = first_kernarg(pkt);
	va &= ~4095ull;
	/* amd_queue_t: read_dispatch_id_field_base_byte_offset follows read_dispatch_id (the
	 * KFD read pointer); queue_inactive_signal is at +192 */
	uint64_t rptr = S.q[q].rptr, sig = 0;
	if (!memory && !hang)
		sig = *(volatile uint64_t *)(uintptr_t)(rptr - *(volatile uint32_t *)(uintptr_t)(rptr + 8) + 192);
	if (!memory && !hang && !sig)
		die("injecting %s: queue %u has no inactive signal", FAULT_NAMES[kind], q);
	struct gpu *g = gpu_by_id(S.q[q].gpu_id);
	unsigned gfx = g ? g->gfx : 0;
	int silent = !memory && !hang && gfx >= 100300 && gfx < 110000; /* gfx10.3: the wave only halts */
	if (!memory && !hang && gfx >= 110000)
		die("injecting %s on gfx%u%x%x: the gfx11 trap handler is not emulated", FAULT_NAMES[kind],
		    gfx / 10000, gfx / 100 % 100, gfx % 100);

	struct out o;
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"fault\":\"%s\",\"queue_id\":%u,\"gpu_id\":%u,\"va\":\"0x%" PRIx64 "\"",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), FAULT_NAMES[kind], q, S.q[q].gpu_id, va);
	if ((hang || silent) && reset.after)
		put(&o, ",\"reset_after\":\"%s\"", reset.after);
	if (memory && late.delay_ns)
		put(&o, ",\"delivered_after_ns\":%" PRIu64, late.delay_ns);
	if (!memory && !hang)
		put(&o, ",\"inactive_signal\":\"0x%" PRIx64 "\",\"signalled\":%s", sig, silent ? "false" : "true");
	emit(&o);
	if (silent)
		fprintf(stderr, "emulated-gpu: %s on gfx%u%x%x: its trap handler signals nothing; the wave halts and the dispatch never completes\n",
			FAULT_NAMES[kind], gfx / 10000, gfx / 100 % 100, gfx % 100);
	if (hang)
		fprintf(stderr, "emulated-gpu: hang: the dispatch on queue %u never completes%s%s%s\n", q,
			reset.after ? "; the driver resets the GPU in " : " (no EMUGPU_RESET_AFTER: no reset)",
			reset.after ? reset.after : "", reset.after ? " s (EMUGPU_RESET_AFTER)" : "");

	pthread_mutex_lock(&S.lock);
	if ((hang || silent) && reset.after && !reset.due_ns) {
		reset.gpu_id = S.q[q].gpu_id;
		__atomic_store_n(&reset.due_ns, now_ns(CLOCK_MONOTONIC) + reset.after_ns, __ATOMIC_RELEASE);
	}
	if (memory && late.delay_ns) {
		late.q = q;
		late.kind = kind;
		late.va = va;
		__atomic_store_n(&late.due_ns, now_ns(CLOCK_MONOTONIC) + late.delay_ns, __ATOMIC_RELEASE);
		S.q[q].halted = 1;
	} else if (memory) {
		deliver_memory_fault(q, kind, va);
	} else if (silent || hang) {
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

/* Called by the packet processor on each of its rounds: a late memory fault (above), when
 * it is due. */
void late_fault_if_due(void)
{
	uint64_t due = __atomic_load_n(&late.due_ns, __ATOMIC_ACQUIRE);
	if (!due || now_ns(CLOCK_MONOTONIC) < due)
		return;
	pthread_mutex_lock(&S.lock);
	late.due_ns = 0;
	struct out o;
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"fault\":\"delivered\",\"queue_id\":%u",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), late.q);
	emit(&o);
	deliver_memory_fault(late.q, late.kind, late.va);
	pthread_cond_broadcast(&S.ev_cond);
	pthread_mutex_unlock(&S.lock);
}

/* Called by the packet processor on each of its rounds: the GPU reset (above), when one is
 * due. The log line and the line on stderr are written with S.lock held, before the runtime
 * waiting in WAIT_EVENTS can return and end the process. */
void reset_if_due(void)
{
	uint64_t due = __atomic_load_n(&reset.due_ns, __ATOMIC_ACQUIRE);
	if (!due || now_ns(CLOCK_MONOTONIC) < due)
		return;
	pthread_mutex_lock(&S.lock);
	reset.due_ns = 0;
	unsigned n = 0;
	for (unsigned i = 0; i < MAXOEV; i++)
		n += S.oev[i].used && S.oev[i].type == KFD_IOC_EVENT_HW_EXCEPTION;
	struct out o;
	o.n = 0;
	put(&o, "{\"seq\":%lu,\"reset\":\"gpu\",\"gpu_id\":%u,\"reset_cause\":\"GPU_HANG\",\"memory_lost\":1,"
		"\"hw_exception_events\":%u",
	    __atomic_add_fetch(&S.seq, 1, __ATOMIC_RELAXED), reset.gpu_id, n);
	emit(&o);
	fprintf(stderr, "emulated-gpu: GPU reset %s s after the hang: the process's queues are evicted; %u hardware exception event%s set (GPU hang, memory lost)\n",
		reset.after, n, n == 1 ? "" : "s");
	S.evicted = 1;
	signal_reset(reset.gpu_id);
	pthread_mutex_unlock(&S.lock);
}
