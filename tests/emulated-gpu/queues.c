/*
 * queues.c: AQL queues, and the packet processor that stands in for the hardware's.
 *
 * CREATE_QUEUE records where a compute AQL queue lives (its ring, read and write pointers:
 * the runtime's amd_queue_t) and starts the processor, one thread for every queue; other
 * queue types (SDMA) are refused with EINVAL and logged, so a runtime that needs them
 * stops there, visibly. The processor consumes what the runtime publishes (kernel
 * dispatch, barrier-AND/OR, vendor packets) WITHOUT RUNNING IT: barrier dependencies are
 * waited for, then the completion signal is decremented and its event raised, as the
 * hardware's end-of-packet does, and the read index moves on. Data a kernel would have
 * written is not written. Before each kernel dispatch it appends the code read-back
 * (memory.c) and asks faults.c whether the dispatch faults or hangs instead: a faulted
 * queue (halted) or an evicted process (S.evicted) consumes nothing more. faults.c's GPU
 * reset, when one is due, runs on this thread too.
 */
#include "emugpu.h"

/* The AQL packet processor (see above). amd_signal_t: value at +8, event mailbox
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
		late_fault_if_due();
		reset_if_due();
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

/* AMDKFD_IOC_CREATE_QUEUE */
int kfd_create_queue(struct kfd_ioctl_create_queue_args *a, struct out *o)
{
	put(o, ",\"queue_type\":%u", a->queue_type);
	if (!gpu_by_id(a->gpu_id) || S.queue_next >= MAXQ)
		return -EINVAL;
	if (a->queue_type != KFD_IOC_QUEUE_TYPE_COMPUTE_AQL) {
		put(o, ",\"unknown\":true");
		fprintf(stderr, "emulated-gpu: queue type %u (not AQL) is not emulated: answered EINVAL\n",
			a->queue_type);
		return -EINVAL;
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
	put(o, ",\"gpu_id\":%u,\"queue_id\":%u,\"ring_size\":%u", a->gpu_id, a->queue_id,
	    a->ring_size);
	return 0;
}

/* AMDKFD_IOC_DESTROY_QUEUE */
int kfd_destroy_queue(unsigned id)
{
	if (id >= MAXQ || !S.q[id].used)
		return -EINVAL;
	__atomic_store_n(&S.q[id].used, 0, __ATOMIC_RELEASE);
	return 0;
}

/* AMDKFD_IOC_UPDATE_QUEUE, SET_CU_MASK: the emulated processor has no percentage or CU
 * mask */
int kfd_update_queue(unsigned id)
{
	if (id >= MAXQ || !S.q[id].used)
		return -EINVAL;
	return 0;
}
