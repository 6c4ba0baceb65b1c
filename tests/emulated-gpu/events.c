/*
 * events.c: KFD events, as linux 6.1's kfd_events.c keeps them.
 *
 * Signal (and debug) events take ids 1..4095, each its slot in the event page the runtime
 * maps from /dev/kfd (KFD_MMAP_TYPE_EVENTS); the packet processor (queues.c) raises one when
 * a completion signal's mailbox names it. The other types (memory, hardware exception) take
 * ids from NONSIGNAL_BASE and no page slot: faults.c raises the memory events at a VM
 * fault, with the fault's data, and signal_reset the hardware exception events at a GPU
 * reset. WAIT_EVENTS waits on S.ev_cond and copies a signaled memory or hardware exception
 * event's data out (copy_signaled_event_data). Everything here runs with S.lock held.
 */
#include "emugpu.h"

/* The live event with this id, or NULL. */
struct event *event_of(unsigned id)
{
	struct event *e = id < MAXEV ? &S.ev[id]
			: id - NONSIGNAL_BASE < MAXOEV ? &S.oev[id - NONSIGNAL_BASE] : NULL;
	return e && e->used ? e : NULL;
}

/* AMDKFD_IOC_CREATE_EVENT */
int kfd_create_event(struct kfd_ioctl_create_event_args *a, struct out *o)
{
	/* kfd_event_create: signal and debug events get a slot in the event page,
	 * the others an id past it and no page offset */
	int slot = a->event_type == KFD_IOC_EVENT_SIGNAL || a->event_type == KFD_IOC_EVENT_DEBUG_EVENT;
	unsigned id = 0;
	for (unsigned i = slot ? 1 : NONSIGNAL_BASE; i < (slot ? MAXEV : NONSIGNAL_BASE + MAXOEV); i++)
		if (!event_of(i)) {
			id = i;
			break;
		}
	if (!id)
		return slot ? -ENOSPC : -ENOMEM;
	struct event *e = id < MAXEV ? &S.ev[id] : &S.oev[id - NONSIGNAL_BASE];
	*e = (struct event){ .used = 1, .type = a->event_type, .auto_reset = a->auto_reset };
	a->event_id = id;
	a->event_trigger_data = id;
	a->event_page_offset = 0;
	if (slot) {
		a->event_slot_index = id;
		a->event_page_offset = KFD_MMAP_TYPE_EVENTS;
	}
	put(o, ",\"event_id\":%u,\"event_type\":%u", id, a->event_type);
	return 0;
}

/* AMDKFD_IOC_DESTROY_EVENT (nr 0x09), SET_EVENT (0x0A), RESET_EVENT (0x0B) */
int kfd_set_event(unsigned nr, unsigned id)
{
	struct event *e = event_of(id);
	/* set / reset: only signal events (event_can_be_cpu_signaled) */
	if (!e || (nr != 0x09 && e->type != KFD_IOC_EVENT_SIGNAL))
		return -EINVAL;
	if (nr == 0x09)
		e->used = 0;
	e->signaled = nr == 0x0A;
	pthread_cond_broadcast(&S.ev_cond);
	return 0;
}

int kfd_wait(struct kfd_ioctl_wait_events_args *a)
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
				/* copy_signaled_event_data: a signaled memory event's fault, a
				 * hardware exception event's reset (the union's same bytes) */
				if (e->signaled && e->type == KFD_IOC_EVENT_MEMORY)
					ev[i].memory_exception_data = e->mem;
				if (e->signaled && e->type == KFD_IOC_EVENT_HW_EXCEPTION)
					ev[i].hw_exception_data = e->hw;
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

/* The GPU reset's notice (kfd_signal_reset_event, from kgd2kfd_pre_reset): every hardware
 * exception event of the process is set with its data, a whole-GPU reset caused by a hang
 * (reset_cause GPU_HANG: no RAS poison), memory lost, the reset GPU's gpu_id. Memory events
 * are set only for an ECC cause, so not here. Returns how many events were set. */
unsigned signal_reset(unsigned gpu_id)
{
	unsigned n = 0;
	for (unsigned i = 0; i < MAXOEV; i++)
		if (S.oev[i].used && S.oev[i].type == KFD_IOC_EVENT_HW_EXCEPTION) {
			S.oev[i].hw = (struct kfd_hsa_hw_exception_data){
				.reset_type = KFD_HW_EXCEPTION_WHOLE_GPU_RESET,
				.reset_cause = KFD_HW_EXCEPTION_GPU_HANG,
				.memory_lost = 1,
				.gpu_id = gpu_id,
			};
			S.oev[i].signaled = 1;
			n++;
		}
	pthread_cond_broadcast(&S.ev_cond);
	return n;
}
