/*
 * A stand-in for libcudart used by cuda_test.go (TestFakeRuntime) to check
 * the purego bindings' calling conventions without a GPU, and by
 * engine_test.go to run transfer engines on "device" memory. "Device"
 * memory is host memory, recorded in an allocation table; two devices
 * exist; cudaSetDevice is per thread as in CUDA. cudaMemcpy checks its
 * kind against the table (a host pointer passed as device memory, or the
 * reverse, fails with cudaErrorInvalidValue), so tests prove the engine
 * picks the right kind. Each allocation is a shared memory file (memfd),
 * so IPC works across processes as with CUDA: the handle names the
 * exporting process and its descriptor, and another process maps
 * /proc/<pid>/fd/<fd>; opening a handle in the exporting process itself
 * returns the same memory (real CUDA refuses that).
 * cuMemGetAddressRange_v2 stands in for the driver call.
 * cudaHostRegister records page-locked host ranges, so tests can count the
 * copies that staged through pinned memory.
 * Built with: cc -shared -fPIC -o libfakecudart.so fakecudart.c
 * Not part of any Go build (testdata is ignored by the go tool).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { char reserved[64]; } cudaIpcMemHandle_t;

enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorHostMemoryAlreadyRegistered = 712,
	cudaErrorHostMemoryNotRegistered = 713,
};

static __thread int current;
static int ndev = 2;
static int last_malloc_device = -1;

/* The allocation table (own allocations and mappings imported through
 * IPC), guarded by a spin lock (no libpthread needed). */
struct alloc { char *base; size_t size; int fd; int imported; struct alloc *next; };
static struct alloc *allocs;
static char table_lock;
static void lock(void) { while (__atomic_test_and_set(&table_lock, __ATOMIC_ACQUIRE)) ; }
static void unlock(void) { __atomic_clear(&table_lock, __ATOMIC_RELEASE); }

/* find returns the allocation holding p, or NULL; the lock must be held. */
static struct alloc *find(const void *p) {
	for (struct alloc *a = allocs; a; a = a->next)
		if ((const char *)p >= a->base && (const char *)p < a->base + a->size) return a;
	return NULL;
}
static int is_device(const void *p) {
	lock();
	int d = find(p) != NULL;
	unlock();
	return d;
}
/* track records a mapping; 0 when out of memory. */
static int track(void *base, size_t n, int fd, int imported) {
	struct alloc *a = malloc(sizeof *a);
	if (!a) return 0;
	a->base = base;
	a->size = n;
	a->fd = fd;
	a->imported = imported;
	lock();
	a->next = allocs;
	allocs = a;
	unlock();
	return 1;
}
/* untrack removes and returns the mapping starting at p that is imported
 * (or not), or NULL. */
static struct alloc *untrack(void *p, int imported) {
	lock();
	struct alloc **pp = &allocs;
	while (*pp && ((*pp)->base != p || (*pp)->imported != imported)) pp = &(*pp)->next;
	struct alloc *a = *pp;
	if (a) *pp = a->next;
	unlock();
	return a;
}

/* Counters read by tests: memcpy calls per kind, IPC opens and closes,
 * stream synchronisations. */
enum { cntMemcpy = 0, cntIpcOpen = 5, cntIpcClose, cntSync, cntPinnedCopy, cntHostRegister, cntMax };
static long counters[cntMax];
static void count(int c) { __atomic_add_fetch(&counters[c], 1, __ATOMIC_RELAXED); }
static int fail_ipc_open;

int cudaGetDeviceCount(int *n) {
	const char *e = getenv("FAKECUDART_NO_DEVICE");
	if (e && *e) { *n = 0; return cudaErrorNoDevice; }
	*n = ndev;
	return cudaSuccess;
}
int cudaGetDevice(int *d) { *d = current; return cudaSuccess; }
int cudaSetDevice(int d) {
	if (d < 0 || d >= ndev) return cudaErrorInvalidDevice;
	current = d;
	return cudaSuccess;
}
int cudaMalloc(void **p, size_t n) {
	if (n == 0 || n > ((size_t)1 << 40)) return cudaErrorMemoryAllocation;
	int fd = memfd_create("fakecudart", MFD_CLOEXEC);
	if (fd < 0) return cudaErrorMemoryAllocation;
	void *m = MAP_FAILED;
	if (ftruncate(fd, (off_t)n) == 0) m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || !track(m, n, fd, 0)) {
		if (m != MAP_FAILED) munmap(m, n);
		close(fd);
		return cudaErrorMemoryAllocation;
	}
	*p = m;
	last_malloc_device = current;
	return cudaSuccess;
}
int cudaFree(void *p) {
	if (!p) return cudaSuccess; /* as CUDA: a no-op that initialises the context */
	struct alloc *a = untrack(p, 0);
	if (!a) return cudaErrorInvalidValue;
	munmap(a->base, a->size);
	close(a->fd);
	free(a);
	return cudaSuccess;
}
/* Page-locked host ranges (cudaHostRegister), guarded by the table lock. */
struct pin { char *base; size_t size; struct pin *next; };
static struct pin *pins;
/* pinned reports whether [p, p+n) lies in one registered range. */
static int pinned(const void *p, size_t n) {
	lock();
	int ok = 0;
	for (struct pin *q = pins; q && !ok; q = q->next)
		ok = (const char *)p >= q->base && (const char *)p + n <= q->base + q->size;
	unlock();
	return ok;
}
int cudaHostRegister(void *p, size_t n, unsigned int flags) {
	if (!p || n == 0 || flags != 0) return cudaErrorInvalidValue;
	if (is_device(p)) return cudaErrorInvalidValue;
	struct pin *q = malloc(sizeof *q);
	if (!q) return cudaErrorMemoryAllocation;
	lock();
	for (struct pin *o = pins; o; o = o->next)
		if ((char *)p < o->base + o->size && o->base < (char *)p + n) { unlock(); free(q); return cudaErrorHostMemoryAlreadyRegistered; }
	q->base = p;
	q->size = n;
	q->next = pins;
	pins = q;
	unlock();
	count(cntHostRegister);
	return cudaSuccess;
}
int cudaHostUnregister(void *p) {
	lock();
	struct pin **pp = &pins;
	while (*pp && (*pp)->base != p) pp = &(*pp)->next;
	struct pin *q = *pp;
	if (q) *pp = q->next;
	unlock();
	if (!q) return cudaErrorHostMemoryNotRegistered;
	free(q);
	return cudaSuccess;
}
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	if (kind < 0 || kind > 4) return cudaErrorInvalidMemcpyDirection;
	if ((kind == 1 && pinned(src, n)) || (kind == 2 && pinned(dst, n))) count(cntPinnedCopy);
	if (kind != 4) {
		int want_dst = kind == 1 || kind == 3, want_src = kind == 2 || kind == 3;
		if (is_device(dst) != want_dst || is_device(src) != want_src) return cudaErrorInvalidValue;
		if (n > 0 && ((want_dst && !is_device((char *)dst + n - 1)) || (want_src && !is_device((const char *)src + n - 1))))
			return cudaErrorInvalidValue;
	}
	count(cntMemcpy + kind);
	memmove(dst, src, n);
	return cudaSuccess;
}
int cudaStreamSynchronize(void *stream) { (void)stream; count(cntSync); return cudaSuccess; }
/* The driver's cuMemGetAddressRange_v2; 1 is CUDA_ERROR_INVALID_VALUE. */
int cuMemGetAddressRange_v2(uintptr_t *base, size_t *size, uintptr_t p) {
	lock();
	struct alloc *a = find((void *)p);
	if (a) { *base = (uintptr_t)a->base; *size = a->size; }
	unlock();
	return a ? 0 : 1;
}
/* The handle carries a marker, the device, the exporter's pid (at 16) and
 * descriptor (at 20), the size (at 24) and the pointer (at 56) at fixed
 * offsets, and 0xA5 filler (checked at 40) so a mangled by-value struct is
 * detected on open. */
int cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
	lock();
	struct alloc *a = find(p);
	int ok = a && a->base == p && !a->imported; /* CUDA wants an allocation's base */
	int fd = ok ? a->fd : -1;
	size_t size = ok ? a->size : 0;
	unlock();
	if (!ok) return cudaErrorInvalidValue;
	int pid = getpid();
	memset(h->reserved, 0xA5, sizeof h->reserved);
	memcpy(h->reserved, "MCFAKE", 6);
	h->reserved[8] = (char)current;
	memcpy(h->reserved + 16, &pid, sizeof pid);
	memcpy(h->reserved + 20, &fd, sizeof fd);
	memcpy(h->reserved + 24, &size, sizeof size);
	memcpy(h->reserved + 56, &p, sizeof p);
	return cudaSuccess;
}
int cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags) {
	if (memcmp(h.reserved, "MCFAKE", 6) != 0 || (unsigned char)h.reserved[40] != 0xA5 || flags != 1)
		return cudaErrorInvalidResourceHandle;
	if (__atomic_load_n(&fail_ipc_open, __ATOMIC_RELAXED)) return cudaErrorInvalidResourceHandle;
	int pid, fd;
	size_t size;
	memcpy(&pid, h.reserved + 16, sizeof pid);
	memcpy(&fd, h.reserved + 20, sizeof fd);
	memcpy(&size, h.reserved + 24, sizeof size);
	if (pid == getpid()) {
		memcpy(p, h.reserved + 56, sizeof *p);
	} else {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
		int f = open(path, O_RDWR | O_CLOEXEC);
		if (f < 0) return cudaErrorInvalidResourceHandle;
		void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
		if (m == MAP_FAILED || !track(m, size, f, 1)) {
			if (m != MAP_FAILED) munmap(m, size);
			close(f);
			return cudaErrorInvalidResourceHandle;
		}
		*p = m;
	}
	count(cntIpcOpen);
	return cudaSuccess;
}
int cudaIpcCloseMemHandle(void *p) {
	struct alloc *a = untrack(p, 1); /* NULL: opened in the exporting process */
	if (a) {
		munmap(a->base, a->size);
		close(a->fd);
		free(a);
	}
	count(cntIpcClose);
	return cudaSuccess;
}
const char *cudaGetErrorString(int e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
	case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
	}
	return "unrecognized error code";
}
/* Test hooks, not CUDA functions. */
int fakecudartLastMallocDevice(void) { return last_malloc_device; }
/* fakecudartCount returns counter c: 0-4 cudaMemcpy calls of that kind,
 * 5 IPC opens, 6 IPC closes, 7 stream synchronisations, 8 host<->device
 * copies whose host side is page-locked (cudaHostRegister), 9
 * cudaHostRegister calls. */
long fakecudartCount(int c) { return c >= 0 && c < cntMax ? __atomic_load_n(&counters[c], __ATOMIC_RELAXED) : -1; }
/* fakecudartFailIpcOpen makes cudaIpcOpenMemHandle fail while on != 0. */
void fakecudartFailIpcOpen(int on) { __atomic_store_n(&fail_ipc_open, on, __ATOMIC_RELAXED); }
