/*
 * A stand-in for libcudart used by cuda_test.go (TestFakeRuntime) to check
 * the purego bindings' calling conventions without a GPU. "Device" memory
 * is host memory; two devices exist; cudaSetDevice is per thread as in
 * CUDA. Built with: cc -shared -fPIC -o libfakecudart.so fakecudart.c
 * Not part of any Go build (testdata is ignored by the go tool).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char reserved[64]; } cudaIpcMemHandle_t;

enum {
	cudaSuccess = 0,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
};

static __thread int current;
static int ndev = 2;
static int last_malloc_device = -1;

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
	if (n > ((size_t)1 << 40)) return cudaErrorMemoryAllocation;
	*p = malloc(n);
	last_malloc_device = current;
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
int cudaFree(void *p) { free(p); return cudaSuccess; }
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	if (kind < 0 || kind > 4) return cudaErrorInvalidMemcpyDirection;
	memmove(dst, src, n);
	return cudaSuccess;
}
/* The handle carries a marker, the device and the pointer at fixed offsets
 * so a mangled by-value struct is detected on open. */
int cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
	memset(h->reserved, 0xA5, sizeof h->reserved);
	memcpy(h->reserved, "MCFAKE", 6);
	h->reserved[8] = (char)current;
	memcpy(h->reserved + 56, &p, sizeof p);
	return cudaSuccess;
}
int cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags) {
	if (memcmp(h.reserved, "MCFAKE", 6) != 0 || (unsigned char)h.reserved[40] != 0xA5 || flags != 1)
		return cudaErrorInvalidResourceHandle;
	memcpy(p, h.reserved + 56, sizeof *p);
	return cudaSuccess;
}
int cudaIpcCloseMemHandle(void *p) { (void)p; return cudaSuccess; }
const char *cudaGetErrorString(int e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	}
	return "unrecognized error code";
}
/* Test hook, not a CUDA function. */
int fakecudartLastMallocDevice(void) { return last_malloc_device; }
