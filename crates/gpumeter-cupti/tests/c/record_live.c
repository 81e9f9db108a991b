/*
 * record_live.c: records real CUPTI activity buffers on a GPU machine, for gpumeter-cupti's
 * layout checks against what libcupti actually emits (not only what its headers declare).
 *
 *   record_live LIBCUPTI OUT.bin > LOG
 *
 * Loads LIBCUPTI (any 13.x or 12.x libcupti.so; built against the headers of the release whose
 * records it prints) and the driver's libcuda.so.1 with dlopen, enables the activity kinds the
 * gpumeter collector uses (and a few more), then runs a small, known workload through the
 * driver API: a PTX module loaded with the JIT, host<->device copies, a memset, kernel launches
 * with known grids, a stream-ordered allocation, an event, a captured graph, an external
 * correlation id; then flushes. Every completed buffer's valid bytes are appended to OUT.bin (so
 * OUT.bin is a sequence of whole CUPTI buffers: a valid record stream), and LOG gets, per
 * record, libcupti's own walk: `live kind=K offset=O size=S name=value ...` (O: offset in
 * OUT.bin; S: how far libcupti stepped to the next record, or to the end of its buffer) with
 * key fields read through this release's header structs. Lines starting with `#` are notes
 * (versions, enable results, the workload's known values).
 *
 * Build (headers of the release, e.g. CUPTI 13.0 from bindings/cupti/fetch-wheels.sh):
 *   cc -std=gnu11 -O1 -I "$CUPTI130_INCLUDE" -o record_live record_live.c -ldl -lpthread
 * Needs a GPU and a driver at least as new as the CUDA release of LIBCUPTI.
 *
 * tests/c/live/h200_r580_cupti_<api>.{bin,txt} are its output (OUT.bin and LOG) on an NVIDIA
 * H200 with driver 580.159.04 (CUDA 13.0), 2026-11-29, with the libcupti of the pinned wheels
 * (bindings/cupti/versions.env: 12.8.90, 13.0.85, 13.4.92) and this program built against each
 * release's headers, CUDA_CACHE_DISABLE=1 (so the PTX is JIT-compiled: one JIT record). The
 * test `recorded::live_recordings_decode_as_libcupti_walked_them` decodes them.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cupti.h>

#if CUPTI_API_VERSION == 130001
typedef CUpti_ActivityKernel10 KernelT;
typedef CUpti_ActivityMemcpy6 MemcpyT;
typedef CUpti_ActivityMemset4 MemsetT;
typedef CUpti_ActivityDevice5 DeviceT;
typedef CUpti_ActivityContext3 ContextT;
#define DEVICE_LAUNCHED 1
#elif CUPTI_API_VERSION == 130401
typedef CUpti_ActivityKernel13 KernelT;
typedef CUpti_ActivityMemcpy7 MemcpyT;
typedef CUpti_ActivityMemset5 MemsetT;
typedef CUpti_ActivityDevice6 DeviceT;
typedef CUpti_ActivityContext4 ContextT;
#define DEVICE_LAUNCHED 1
#elif CUPTI_API_VERSION == 26
typedef CUpti_ActivityKernel9 KernelT;
typedef CUpti_ActivityMemcpy6 MemcpyT;
typedef CUpti_ActivityMemset4 MemsetT;
typedef CUpti_ActivityDevice5 DeviceT;
typedef CUpti_ActivityContext3 ContextT;
#define DEVICE_LAUNCHED 0
#else
#error "record_live.c knows CUPTI_API_VERSION 26, 130001 and 130401 only"
#endif

#define STR(x) #x
#define XSTR(x) STR(x) /* expands cuda.h's renames first: cuMemAlloc -> "cuMemAlloc_v2" */

/* ------------------------------------------------------------ dlopen'ed entry points */

#define CUPTI_FNS(X)                                                                             \
  X(cuptiGetVersion)                                                                             \
  X(cuptiActivityRegisterCallbacks)                                                              \
  X(cuptiActivityEnable)                                                                         \
  X(cuptiActivityDisable)                                                                        \
  X(cuptiActivityFlushAll)                                                                       \
  X(cuptiActivityGetNextRecord)                                                                  \
  X(cuptiActivityGetNumDroppedRecords)                                                           \
  X(cuptiActivityPushExternalCorrelationId)                                                      \
  X(cuptiActivityPopExternalCorrelationId)

#define CUDA_FNS(X)                                                                              \
  X(cuInit)                                                                                      \
  X(cuDriverGetVersion)                                                                          \
  X(cuDeviceGet)                                                                                 \
  X(cuDevicePrimaryCtxRetain)                                                                    \
  X(cuCtxSetCurrent)                                                                             \
  X(cuCtxSynchronize)                                                                            \
  X(cuModuleLoadData)                                                                            \
  X(cuModuleGetFunction)                                                                         \
  X(cuMemAlloc)                                                                                  \
  X(cuMemFree)                                                                                   \
  X(cuMemcpyHtoD)                                                                                \
  X(cuMemcpyDtoH)                                                                                \
  X(cuMemcpyDtoD)                                                                                \
  X(cuMemsetD8)                                                                                  \
  X(cuLaunchKernel)                                                                              \
  X(cuStreamCreate)                                                                              \
  X(cuStreamSynchronize)                                                                         \
  X(cuMemAllocAsync)                                                                             \
  X(cuMemFreeAsync)                                                                              \
  X(cuEventCreate)                                                                               \
  X(cuEventRecord)                                                                               \
  X(cuEventSynchronize)                                                                          \
  X(cuStreamBeginCapture)                                                                        \
  X(cuStreamEndCapture)                                                                          \
  X(cuGraphInstantiate)                                                                          \
  X(cuGraphLaunch)                                                                               \
  X(cuGetErrorString)

#define DECL(f) static __typeof__(f) *p_##f;
CUPTI_FNS(DECL)
CUDA_FNS(DECL)

static int load(void *h, const char *lib, const char *sym, void **out) {
  *out = dlsym(h, sym);
  if (!*out) {
    fprintf(stderr, "%s: no symbol %s\n", lib, sym);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ output */

static FILE *g_bin, *g_log;
static uint64_t g_bin_off;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void pu(const char *n, unsigned long long v) { fprintf(g_log, " %s=%llu", n, v); }
static void pi(const char *n, long long v) { fprintf(g_log, " %s=%lld", n, v); }
#define U(r, f) pu(#f, (unsigned long long)(r)->f)
#define I(r, f) pi(#f, (long long)(r)->f)
#define PTR(r, f) pu(#f, (unsigned long long)(uintptr_t)(r)->f)

static void print_fields(const CUpti_Activity *a) {
  switch (a->kind) {
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
    const KernelT *r = (const void *)a;
    U(r, start); U(r, end); U(r, deviceId); U(r, contextId); U(r, streamId); I(r, gridX);
    I(r, gridY); I(r, gridZ); I(r, blockX); I(r, blockY); I(r, blockZ); U(r, registersPerThread);
    I(r, staticSharedMemory); I(r, dynamicSharedMemory); U(r, correlationId); I(r, gridId);
    PTR(r, name); U(r, launchType); U(r, graphNodeId); U(r, graphId); U(r, clusterX);
    fprintf(g_log, " name_str=%s", r->name ? r->name : "(null)");
#if DEVICE_LAUNCHED
    U(r, isDeviceLaunched);
#endif
    break;
  }
  case CUPTI_ACTIVITY_KIND_MEMCPY: {
    const MemcpyT *r = (const void *)a;
    U(r, copyKind); U(r, srcKind); U(r, dstKind); U(r, flags); U(r, bytes); U(r, start);
    U(r, end); U(r, deviceId); U(r, contextId); U(r, streamId); U(r, correlationId);
    U(r, graphNodeId); U(r, graphId); U(r, copyCount);
#if DEVICE_LAUNCHED
    U(r, isDeviceLaunched);
#endif
    break;
  }
  case CUPTI_ACTIVITY_KIND_MEMSET: {
    const MemsetT *r = (const void *)a;
    U(r, value); U(r, bytes); U(r, start); U(r, end); U(r, deviceId); U(r, contextId);
    U(r, streamId); U(r, correlationId); U(r, flags); U(r, memoryKind);
#if DEVICE_LAUNCHED
    U(r, isDeviceLaunched);
#endif
    break;
  }
  case CUPTI_ACTIVITY_KIND_DEVICE: {
    const DeviceT *r = (const void *)a;
    U(r, id); U(r, numMultiprocessors); U(r, computeCapabilityMajor);
    U(r, computeCapabilityMinor); U(r, globalMemorySize); U(r, numThreadsPerWarp);
    U(r, maxWarpsPerMultiprocessor); U(r, maxBlocksPerMultiprocessor);
    U(r, maxSharedMemoryPerMultiprocessor); U(r, maxRegistersPerMultiprocessor);
    U(r, l2CacheSize); U(r, coreClockRate); U(r, isMigEnabled); U(r, isCudaVisible);
    fprintf(g_log, " uuid=");
    for (int i = 0; i < 16; i++) fprintf(g_log, "%02x", (unsigned)(uint8_t)r->uuid.bytes[i]);
    fprintf(g_log, " name_str=\"%s\"", r->name ? r->name : "(null)");
    break;
  }
  case CUPTI_ACTIVITY_KIND_CONTEXT: {
    const ContextT *r = (const void *)a;
    U(r, contextId); U(r, deviceId); U(r, computeApiKind); U(r, nullStreamId);
    U(r, isGreenContext); U(r, numMultiprocessors);
    break;
  }
  case CUPTI_ACTIVITY_KIND_DRIVER:
  case CUPTI_ACTIVITY_KIND_RUNTIME:
  case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: {
    const CUpti_ActivityAPI *r = (const void *)a;
    U(r, cbid); U(r, start); U(r, end); U(r, processId); U(r, threadId); U(r, correlationId);
    U(r, returnValue);
    break;
  }
  case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
    const CUpti_ActivityExternalCorrelation *r = (const void *)a;
    U(r, externalKind); U(r, externalId); U(r, correlationId);
    break;
  }
  case CUPTI_ACTIVITY_KIND_MEMORY2: {
    const CUpti_ActivityMemory4 *r = (const void *)a;
    U(r, memoryOperationType); U(r, memoryKind); U(r, correlationId); U(r, bytes);
    U(r, timestamp); U(r, processId); U(r, deviceId); U(r, contextId); U(r, streamId);
    U(r, isAsync);
    break;
  }
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
    const CUpti_ActivityGraphTrace2 *r = (const void *)a;
    U(r, correlationId); U(r, start); U(r, end); U(r, deviceId); U(r, graphId);
    U(r, contextId); U(r, streamId);
    break;
  }
  case CUPTI_ACTIVITY_KIND_OVERHEAD: {
    const CUpti_ActivityOverhead3 *r = (const void *)a;
    U(r, overheadKind); U(r, objectKind); U(r, start); U(r, end); U(r, correlationId);
    break;
  }
  default:
    break;
  }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  const size_t sz = 1 << 20;
  void *p = NULL;
  if (posix_memalign(&p, 8, sz) != 0) p = NULL;
  *buffer = p;
  *size = p ? sz : 0;
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
  (void)ctx;
  pthread_mutex_lock(&g_mu);
  fprintf(g_log, "# buffer stream=%u size=%zu valid=%zu at=%" PRIu64 "\n", stream, size, valid,
          g_bin_off);
  if (valid > 0) {
    fwrite(buffer, 1, valid, g_bin);
    CUpti_Activity *rec = NULL, *prev = NULL;
    CUptiResult st;
    while ((st = p_cuptiActivityGetNextRecord(buffer, valid, &rec)) == CUPTI_SUCCESS) {
      if (prev) {
        fprintf(g_log, " size=%zu", (size_t)((uint8_t *)rec - (uint8_t *)prev));
        print_fields(prev);
        fputc('\n', g_log);
      }
      fprintf(g_log, "live kind=%d offset=%" PRIu64, (int)rec->kind,
              g_bin_off + (uint64_t)((uint8_t *)rec - buffer));
      prev = rec;
    }
    if (prev) {
      fprintf(g_log, " size=%zu", (size_t)(buffer + valid - (uint8_t *)prev));
      print_fields(prev);
      fputc('\n', g_log);
    }
    fprintf(g_log, "# buffer end status=%d\n", (int)st);
    g_bin_off += valid;
  }
  free(buffer);
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------ workload */

/* fill(p, n): p[i] = i for i < n, one thread per element. */
static const char PTX[] =
    ".version 8.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry fill(.param .u64 p, .param .u32 n)\n"
    "{\n"
    "  .reg .pred %pr;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %pr, %r5, %r1;\n"
    "  @%pr bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r5, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r5;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#define CK(call)                                                                                 \
  do {                                                                                           \
    CUresult rc_ = (call);                                                                       \
    if (rc_ != CUDA_SUCCESS) {                                                                   \
      const char *s_ = NULL;                                                                     \
      p_cuGetErrorString(rc_, &s_);                                                              \
      fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call, (int)rc_,              \
              s_ ? s_ : "?");                                                                    \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

#define CKC(call)                                                                                \
  do {                                                                                           \
    CUptiResult rc_ = (call);                                                                    \
    if (rc_ != CUPTI_SUCCESS) {                                                                  \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)rc_);                  \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static void launch(CUfunction f, CUdeviceptr d, unsigned grid, unsigned block, CUstream s) {
  unsigned n = grid * block;
  void *args[] = {&d, &n};
  CK(p_cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBCUPTI OUT.bin\n", argv[0]);
    return 2;
  }
  g_log = stdout;
  void *hc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!hc) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 3;
  }
  void *hd = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!hd) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 3;
  }
  int bad = 0;
#define LOADC(f) bad |= load(hc, argv[1], XSTR(f), (void **)&p_##f);
#define LOADD(f) bad |= load(hd, "libcuda.so.1", XSTR(f), (void **)&p_##f);
  CUPTI_FNS(LOADC)
  CUDA_FNS(LOADD)
  if (bad) return 3;
  g_bin = fopen(argv[2], "wb");
  if (!g_bin) {
    perror(argv[2]);
    return 1;
  }

  uint32_t ver = 0;
  CKC(p_cuptiGetVersion(&ver));
  Dl_info info;
  memset(&info, 0, sizeof info);
  dladdr((void *)p_cuptiGetVersion, &info);
  printf("# libcupti %s: cuptiGetVersion %u; headers CUPTI_API_VERSION %d\n",
         info.dli_fname ? info.dli_fname : argv[1], ver, (int)CUPTI_API_VERSION);
  CKC(p_cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));

  /* The kinds the collector uses, some more, and the legacy ones 13.x declares unsupported. */
  static const int kinds[] = {
      CUPTI_ACTIVITY_KIND_DEVICE, CUPTI_ACTIVITY_KIND_CONTEXT, CUPTI_ACTIVITY_KIND_DRIVER,
      CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMORY2,
      CUPTI_ACTIVITY_KIND_MEMORY_POOL, CUPTI_ACTIVITY_KIND_OVERHEAD,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_CUDA_EVENT,
      CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
      CUPTI_ACTIVITY_KIND_JIT, CUPTI_ACTIVITY_KIND_NAME, CUPTI_ACTIVITY_KIND_MARKER,
      CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API, CUPTI_ACTIVITY_KIND_PCIE,
      CUPTI_ACTIVITY_KIND_NVLINK, CUPTI_ACTIVITY_KIND_STREAM, CUPTI_ACTIVITY_KIND_FUNCTION,
      CUPTI_ACTIVITY_KIND_ENVIRONMENT, CUPTI_ACTIVITY_KIND_EVENT, CUPTI_ACTIVITY_KIND_METRIC,
      CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR, CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION,
      CUPTI_ACTIVITY_KIND_PC_SAMPLING};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    printf("# enable %d = %d\n", kinds[i], (int)p_cuptiActivityEnable((CUpti_ActivityKind)kinds[i]));

  CK(p_cuInit(0));
  int drv = 0;
  CK(p_cuDriverGetVersion(&drv));
  printf("# driver CUDA version %d\n", drv);
  CUdevice dev;
  CUcontext ctx;
  CK(p_cuDeviceGet(&dev, 0));
  CK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(p_cuCtxSetCurrent(ctx));
  CKC(p_cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 4242));

  CUmodule mod;
  CUfunction fill;
  CK(p_cuModuleLoadData(&mod, PTX));
  CK(p_cuModuleGetFunction(&fill, mod, "fill"));

  const size_t mib = 1 << 20;
  CUdeviceptr d;
  CK(p_cuMemAlloc(&d, 4 * mib));
  uint32_t *h = calloc(1, mib);
  if (!h) return 1;
  CK(p_cuMemcpyHtoD(d, h, mib));                 /* memcpy HTOD 1048576 */
  CK(p_cuMemsetD8(d, 0xAB, 12289));              /* memset value 171, 12289 bytes */
  launch(fill, d, 264, 128, 0);                  /* kernel grid 264 x 128 */
  CK(p_cuCtxSynchronize());
  CK(p_cuMemcpyDtoH(h, d, 65536));               /* memcpy DTOH 65536 */
  int okv = 1;
  for (uint32_t i = 0; i < 16384; i++) okv &= h[i] == i;
  printf("# kernel wrote p[i] = i: %s\n", okv ? "yes" : "NO");
  CK(p_cuMemcpyDtoD(d + 2 * mib, d, 4096));      /* memcpy DTOD 4096 */

  CUstream s;
  CK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a;
  CK(p_cuMemAllocAsync(&a, 3 * mib, s));         /* memory2 allocation 3145728, async */
  launch(fill, a, 33, 256, s);                   /* kernel grid 33 x 256 */
  CK(p_cuMemFreeAsync(a, s));                    /* memory2 release */
  CUevent ev;
  CK(p_cuEventCreate(&ev, CU_EVENT_DEFAULT));
  CK(p_cuEventRecord(ev, s));
  CK(p_cuEventSynchronize(ev));

  CUgraph g;
  CUgraphExec ge;
  CK(p_cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  launch(fill, d, 66, 64, s);                    /* graph kernel grid 66 x 64 */
  CK(p_cuStreamEndCapture(s, &g));
  CK(p_cuGraphInstantiate(&ge, g, 0));
  CK(p_cuGraphLaunch(ge, s));
  CK(p_cuStreamSynchronize(s));
  uint64_t popped = 0;
  CKC(p_cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped));
  CKC(p_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));

  /* Serialized kernels: KERNEL (3) instead of CONCURRENT_KERNEL. */
  printf("# disable %d = %d\n", CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
         (int)p_cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  printf("# enable %d = %d\n", CUPTI_ACTIVITY_KIND_KERNEL,
         (int)p_cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL));
  launch(fill, d, 7, 32, 0);                     /* kernel grid 7 x 32, kind KERNEL */
  CK(p_cuCtxSynchronize());
  CK(p_cuMemFree(d));
  CKC(p_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  size_t dropped = 0;
  p_cuptiActivityGetNumDroppedRecords(ctx, 0, &dropped);
  printf("# dropped %zu\n", dropped);
  pthread_mutex_lock(&g_mu);
  fclose(g_bin);
  printf("# wrote %" PRIu64 " bytes\n", g_bin_off);
  pthread_mutex_unlock(&g_mu);
  return 0;
}
