/*
 * make_buffers.c: the C side of gpumeter-cupti's cross-check (issue 3, part 4).
 *
 * Compiled by `tests/main.rs` against the CUPTI headers of one wheel (12.8: CUPTI_API_VERSION 26;
 * 13.0: CUPTI_API_VERSION 130001; 13.4: CUPTI_API_VERSION 130401) plus that release's cuda.h.
 * The layout of every record comes from the header structs, never from gpumeter's tables: this
 * program is the oracle.
 *
 * Modes:
 *   make_buffers layouts
 *       prints `api N`, then `size KIND STRUCT SIZEOF` for every activity kind of this release
 *       and `field STRUCT FIELD OFFSET SIZE` for every field gpumeter decodes.
 *   make_buffers buffer OUT.bin EXPECTED.txt
 *       writes a buffer holding one record of each decoded kind (real header structs, memset 0,
 *       then distinctive key fields) back to back, exactly as CUPTI lays records out, plus
 *       zero-filled records of kinds gpumeter skips; EXPECTED.txt gets `api N` and one line per
 *       record: `record kind=K offset=O name=value ...` (values decimal; UUIDs as 32 hex digits;
 *       pointers as their integer value).
 *   make_buffers allkinds OUT.bin
 *       writes one zero-filled record of every activity kind of this release (kind set), in
 *       kind order.
 *   make_buffers walk LIBCUPTI BUFFER
 *       walks BUFFER with libcupti's own cuptiActivityGetNextRecord (dlopen'ed; libcupti 12.8
 *       and 13.0 need no GPU or driver for this, 13.4 does) and prints, for each record it
 *       returns, the line `walk kind=K offset=O name=value ...` with the same key fields as
 *       EXPECTED.txt, read
 *       through the header struct at the address libcupti returned; then `end status=S`.
 *   make_buffers steps LIBCUPTI
 *       measures libcupti's own record size of every kind value 1 .. CUPTI_ACTIVITY_KIND_COUNT+3,
 *       independently of the headers: a buffer holding a record of kind K at offset 0 and the
 *       kind RUNTIME at every 8-byte boundary after it, walked with cuptiActivityGetNextRecord;
 *       the second record it returns starts where it thinks K's record ends. Prints
 *       `step K SIZE`, or `step K refused STATUS` when libcupti rejects the kind.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

/* The releases this helper knows, and the record struct CUPTI uses for each kind in them (the
 * enum comments in cupti_activity.h, corrected where libcupti's own walk disagrees: JIT). Any
 * other release is refused: its structs must be read from its own headers first.
 *   V13:   any CUDA 13 release here (13.0, 13.4): isDeviceLaunched in kernel, memcpy and memset
 *          records, CUpti_ActivityMarkerData2, CUpti_ActivityMemoryPool3, kind
 *          CONFIDENTIAL_COMPUTE_ROTATION (55).
 *   V13_4: 13.4 only: CUpti_ActivityKernel13, Memcpy7, Memset5, Device6 (numTpcs), Context4
 *          (processId), NvLink5, kinds 56..59.
 * 13.0 keeps the 12.8 struct names for memcpy and memset (CUpti_ActivityMemcpy6, Memset4) but
 * its headers turned their `uint32_t pad2` into `uint8_t isDeviceLaunched; uint8_t pad2[3]`. */
#if CUPTI_API_VERSION == 130401
#define V13 1
#define V13_4 1
typedef CUpti_ActivityKernel13 KernelT;
typedef CUpti_ActivityMemcpy7 MemcpyT;
typedef CUpti_ActivityMemset5 MemsetT;
typedef CUpti_ActivityDevice6 DeviceT;
typedef CUpti_ActivityContext4 ContextT;
#define KERNEL_S "CUpti_ActivityKernel13"
#define MEMCPY_S "CUpti_ActivityMemcpy7"
#define MEMSET_S "CUpti_ActivityMemset5"
#define DEVICE_S "CUpti_ActivityDevice6"
#define CONTEXT_S "CUpti_ActivityContext4"
#elif CUPTI_API_VERSION == 130001
#define V13 1
#define V13_4 0
typedef CUpti_ActivityKernel10 KernelT;
typedef CUpti_ActivityMemcpy6 MemcpyT;
typedef CUpti_ActivityMemset4 MemsetT;
typedef CUpti_ActivityDevice5 DeviceT;
typedef CUpti_ActivityContext3 ContextT;
#define KERNEL_S "CUpti_ActivityKernel10"
#define MEMCPY_S "CUpti_ActivityMemcpy6"
#define MEMSET_S "CUpti_ActivityMemset4"
#define DEVICE_S "CUpti_ActivityDevice5"
#define CONTEXT_S "CUpti_ActivityContext3"
#elif CUPTI_API_VERSION == 26
#define V13 0
#define V13_4 0
typedef CUpti_ActivityKernel9 KernelT;
typedef CUpti_ActivityMemcpy6 MemcpyT;
typedef CUpti_ActivityMemset4 MemsetT;
typedef CUpti_ActivityDevice5 DeviceT;
typedef CUpti_ActivityContext3 ContextT;
#define KERNEL_S "CUpti_ActivityKernel9"
#define MEMCPY_S "CUpti_ActivityMemcpy6"
#define MEMSET_S "CUpti_ActivityMemset4"
#define DEVICE_S "CUpti_ActivityDevice5"
#define CONTEXT_S "CUpti_ActivityContext3"
#else
#error "make_buffers.c knows CUPTI_API_VERSION 26 (12.8), 130001 (13.0) and 130401 (13.4) only"
#endif

/* ---------------------------------------------------------------- layouts */

#define SIZE(k, S) fprintf(out, "size %d %s %zu\n", (int)(k), #S, sizeof(S))
/* The same for the per-release typedefs above, printing the header struct's name. */
#define SIZET(k, T, name) fprintf(out, "size %d %s %zu\n", (int)(k), name, sizeof(T))
#define FLD(S, name, f) printf("field %s %s %zu %zu\n", name, #f, offsetof(S, f), sizeof(((S *)0)->f))

static void print_sizes(FILE *out) {
  SIZET(CUPTI_ACTIVITY_KIND_MEMCPY, MemcpyT, MEMCPY_S);
  SIZET(CUPTI_ACTIVITY_KIND_MEMSET, MemsetT, MEMSET_S);
  SIZET(CUPTI_ACTIVITY_KIND_KERNEL, KernelT, KERNEL_S);
  SIZE(CUPTI_ACTIVITY_KIND_DRIVER, CUpti_ActivityAPI);
  SIZE(CUPTI_ACTIVITY_KIND_RUNTIME, CUpti_ActivityAPI);
  SIZE(CUPTI_ACTIVITY_KIND_EVENT, CUpti_ActivityEvent);
  SIZE(CUPTI_ACTIVITY_KIND_METRIC, CUpti_ActivityMetric);
  SIZET(CUPTI_ACTIVITY_KIND_DEVICE, DeviceT, DEVICE_S);
  SIZET(CUPTI_ACTIVITY_KIND_CONTEXT, ContextT, CONTEXT_S);
  SIZET(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, KernelT, KERNEL_S);
  SIZE(CUPTI_ACTIVITY_KIND_NAME, CUpti_ActivityName);
  SIZE(CUPTI_ACTIVITY_KIND_MARKER, CUpti_ActivityMarker2);
#if V13
  SIZE(CUPTI_ACTIVITY_KIND_MARKER_DATA, CUpti_ActivityMarkerData2);
#else
  SIZE(CUPTI_ACTIVITY_KIND_MARKER_DATA, CUpti_ActivityMarkerData);
#endif
  SIZE(CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR, CUpti_ActivitySourceLocator);
  SIZE(CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS, CUpti_ActivityGlobalAccess3);
  SIZE(CUPTI_ACTIVITY_KIND_BRANCH, CUpti_ActivityBranch2);
  SIZE(CUPTI_ACTIVITY_KIND_OVERHEAD, CUpti_ActivityOverhead3);
  SIZE(CUPTI_ACTIVITY_KIND_CDP_KERNEL, CUpti_ActivityCdpKernel);
  SIZE(CUPTI_ACTIVITY_KIND_PREEMPTION, CUpti_ActivityPreemption);
  SIZE(CUPTI_ACTIVITY_KIND_ENVIRONMENT, CUpti_ActivityEnvironment);
  SIZE(CUPTI_ACTIVITY_KIND_EVENT_INSTANCE, CUpti_ActivityEventInstance);
  SIZE(CUPTI_ACTIVITY_KIND_MEMCPY2, CUpti_ActivityMemcpyPtoP4);
  SIZE(CUPTI_ACTIVITY_KIND_METRIC_INSTANCE, CUpti_ActivityMetricInstance);
  SIZE(CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION, CUpti_ActivityInstructionExecution);
  SIZE(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER, CUpti_ActivityUnifiedMemoryCounter3);
  SIZE(CUPTI_ACTIVITY_KIND_FUNCTION, CUpti_ActivityFunction);
  SIZE(CUPTI_ACTIVITY_KIND_MODULE, CUpti_ActivityModule);
  SIZE(CUPTI_ACTIVITY_KIND_DEVICE_ATTRIBUTE, CUpti_ActivityDeviceAttribute);
  SIZE(CUPTI_ACTIVITY_KIND_SHARED_ACCESS, CUpti_ActivitySharedAccess);
  SIZE(CUPTI_ACTIVITY_KIND_PC_SAMPLING, CUpti_ActivityPCSampling3);
  SIZE(CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO, CUpti_ActivityPCSamplingRecordInfo);
  SIZE(CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION, CUpti_ActivityInstructionCorrelation);
  SIZE(CUPTI_ACTIVITY_KIND_OPENACC_DATA, CUpti_ActivityOpenAccData);
  SIZE(CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH, CUpti_ActivityOpenAccLaunch);
  SIZE(CUPTI_ACTIVITY_KIND_OPENACC_OTHER, CUpti_ActivityOpenAccOther);
  SIZE(CUPTI_ACTIVITY_KIND_CUDA_EVENT, CUpti_ActivityCudaEvent2);
  SIZE(CUPTI_ACTIVITY_KIND_STREAM, CUpti_ActivityStream);
  SIZE(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUpti_ActivitySynchronization2);
  SIZE(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUpti_ActivityExternalCorrelation);
#if V13_4
  SIZE(CUPTI_ACTIVITY_KIND_NVLINK, CUpti_ActivityNvLink5);
#else
  SIZE(CUPTI_ACTIVITY_KIND_NVLINK, CUpti_ActivityNvLink4);
#endif
  SIZE(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT, CUpti_ActivityInstantaneousEvent);
  SIZE(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_EVENT_INSTANCE, CUpti_ActivityInstantaneousEventInstance);
  SIZE(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC, CUpti_ActivityInstantaneousMetric);
  SIZE(CUPTI_ACTIVITY_KIND_INSTANTANEOUS_METRIC_INSTANCE, CUpti_ActivityInstantaneousMetricInstance);
  SIZE(CUPTI_ACTIVITY_KIND_MEMORY, CUpti_ActivityMemory);
  SIZE(CUPTI_ACTIVITY_KIND_PCIE, CUpti_ActivityPcie);
  SIZE(CUPTI_ACTIVITY_KIND_OPENMP, CUpti_ActivityOpenMp);
  SIZE(CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API, CUpti_ActivityAPI);
  SIZE(CUPTI_ACTIVITY_KIND_MEMORY2, CUpti_ActivityMemory4);
#if V13
  SIZE(CUPTI_ACTIVITY_KIND_MEMORY_POOL, CUpti_ActivityMemoryPool3);
#else
  SIZE(CUPTI_ACTIVITY_KIND_MEMORY_POOL, CUpti_ActivityMemoryPool2);
#endif
  SIZE(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, CUpti_ActivityGraphTrace2);
  /* The 12.8 and 13.0 enum comments name CUpti_ActivityJit (64 bytes), but libcupti 12.8's and
   * 13.0's own walks step 72 bytes over a JIT record: sizeof(CUpti_ActivityJit2). */
  SIZE(CUPTI_ACTIVITY_KIND_JIT, CUpti_ActivityJit2);
  SIZE(CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE, CUpti_ActivityDeviceGraphTrace);
  SIZE(CUPTI_ACTIVITY_KIND_MEM_DECOMPRESS, CUpti_ActivityMemDecompress);
#if V13
  SIZE(CUPTI_ACTIVITY_KIND_CONFIDENTIAL_COMPUTE_ROTATION, CUpti_ActivityConfidentialComputeRotation);
#endif
#if V13_4
  SIZE(CUPTI_ACTIVITY_KIND_GRAPH_HOST_NODE, CUpti_ActivityGraphHostNode);
  SIZE(CUPTI_ACTIVITY_KIND_COMPUTE_ENGINE_CTX_SWITCH, CUpti_ActivityComputeEngineCtxSwitch);
  SIZE(CUPTI_ACTIVITY_KIND_HOST_LAUNCH, CUpti_ActivityHostLaunch);
  SIZE(CUPTI_ACTIVITY_KIND_GREEN_CONTEXT, CUpti_ActivityGreenContext3);
#endif
  fprintf(out, "count %d\n", (int)CUPTI_ACTIVITY_KIND_COUNT);
}

static void print_fields(void) {
  const char *k = KERNEL_S;
  FLD(KernelT, k, kind);
  FLD(KernelT, k, registersPerThread);
  FLD(KernelT, k, start);
  FLD(KernelT, k, end);
  FLD(KernelT, k, completed);
  FLD(KernelT, k, deviceId);
  FLD(KernelT, k, contextId);
  FLD(KernelT, k, streamId);
  FLD(KernelT, k, gridX);
  FLD(KernelT, k, gridY);
  FLD(KernelT, k, gridZ);
  FLD(KernelT, k, blockX);
  FLD(KernelT, k, blockY);
  FLD(KernelT, k, blockZ);
  FLD(KernelT, k, staticSharedMemory);
  FLD(KernelT, k, dynamicSharedMemory);
  FLD(KernelT, k, localMemoryPerThread);
  FLD(KernelT, k, correlationId);
  FLD(KernelT, k, gridId);
  FLD(KernelT, k, name);
  FLD(KernelT, k, queued);
  FLD(KernelT, k, submitted);
  FLD(KernelT, k, launchType);
  FLD(KernelT, k, sharedMemoryExecuted);
  FLD(KernelT, k, graphNodeId);
  FLD(KernelT, k, graphId);
  FLD(KernelT, k, clusterX);
  FLD(KernelT, k, clusterY);
  FLD(KernelT, k, clusterZ);
#if V13
  FLD(KernelT, k, isDeviceLaunched);
#endif

  const char *m = MEMCPY_S;
  FLD(MemcpyT, m, kind);
  FLD(MemcpyT, m, copyKind);
  FLD(MemcpyT, m, srcKind);
  FLD(MemcpyT, m, dstKind);
  FLD(MemcpyT, m, flags);
  FLD(MemcpyT, m, bytes);
  FLD(MemcpyT, m, start);
  FLD(MemcpyT, m, end);
  FLD(MemcpyT, m, deviceId);
  FLD(MemcpyT, m, contextId);
  FLD(MemcpyT, m, streamId);
  FLD(MemcpyT, m, correlationId);
  FLD(MemcpyT, m, runtimeCorrelationId);
  FLD(MemcpyT, m, graphNodeId);
  FLD(MemcpyT, m, graphId);
  FLD(MemcpyT, m, copyCount);
#if V13
  FLD(MemcpyT, m, isDeviceLaunched);
#endif

  const char *p = "CUpti_ActivityMemcpyPtoP4";
  FLD(CUpti_ActivityMemcpyPtoP4, p, kind);
  FLD(CUpti_ActivityMemcpyPtoP4, p, copyKind);
  FLD(CUpti_ActivityMemcpyPtoP4, p, srcKind);
  FLD(CUpti_ActivityMemcpyPtoP4, p, dstKind);
  FLD(CUpti_ActivityMemcpyPtoP4, p, flags);
  FLD(CUpti_ActivityMemcpyPtoP4, p, bytes);
  FLD(CUpti_ActivityMemcpyPtoP4, p, start);
  FLD(CUpti_ActivityMemcpyPtoP4, p, end);
  FLD(CUpti_ActivityMemcpyPtoP4, p, deviceId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, contextId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, streamId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, srcDeviceId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, srcContextId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, dstDeviceId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, dstContextId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, correlationId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, graphNodeId);
  FLD(CUpti_ActivityMemcpyPtoP4, p, graphId);

  const char *s = MEMSET_S;
  FLD(MemsetT, s, kind);
  FLD(MemsetT, s, value);
  FLD(MemsetT, s, bytes);
  FLD(MemsetT, s, start);
  FLD(MemsetT, s, end);
  FLD(MemsetT, s, deviceId);
  FLD(MemsetT, s, contextId);
  FLD(MemsetT, s, streamId);
  FLD(MemsetT, s, correlationId);
  FLD(MemsetT, s, flags);
  FLD(MemsetT, s, memoryKind);
  FLD(MemsetT, s, graphNodeId);
  FLD(MemsetT, s, graphId);
#if V13
  FLD(MemsetT, s, isDeviceLaunched);
#endif

  const char *y = "CUpti_ActivityMemory4";
  FLD(CUpti_ActivityMemory4, y, kind);
  FLD(CUpti_ActivityMemory4, y, memoryOperationType);
  FLD(CUpti_ActivityMemory4, y, memoryKind);
  FLD(CUpti_ActivityMemory4, y, correlationId);
  FLD(CUpti_ActivityMemory4, y, address);
  FLD(CUpti_ActivityMemory4, y, bytes);
  FLD(CUpti_ActivityMemory4, y, timestamp);
  FLD(CUpti_ActivityMemory4, y, PC);
  FLD(CUpti_ActivityMemory4, y, processId);
  FLD(CUpti_ActivityMemory4, y, deviceId);
  FLD(CUpti_ActivityMemory4, y, contextId);
  FLD(CUpti_ActivityMemory4, y, streamId);
  FLD(CUpti_ActivityMemory4, y, name);
  FLD(CUpti_ActivityMemory4, y, isAsync);
  FLD(CUpti_ActivityMemory4, y, memoryPoolConfig.memoryPoolType);
  FLD(CUpti_ActivityMemory4, y, memoryPoolConfig.address);
  FLD(CUpti_ActivityMemory4, y, memoryPoolConfig.releaseThreshold);
  FLD(CUpti_ActivityMemory4, y, memoryPoolConfig.pool.size);
  FLD(CUpti_ActivityMemory4, y, memoryPoolConfig.utilizedSize);
  FLD(CUpti_ActivityMemory4, y, source);

  const char *d = DEVICE_S;
  FLD(DeviceT, d, kind);
  FLD(DeviceT, d, flags);
  FLD(DeviceT, d, globalMemoryBandwidth);
  FLD(DeviceT, d, globalMemorySize);
  FLD(DeviceT, d, constantMemorySize);
  FLD(DeviceT, d, l2CacheSize);
  FLD(DeviceT, d, numThreadsPerWarp);
  FLD(DeviceT, d, coreClockRate);
  FLD(DeviceT, d, numMemcpyEngines);
  FLD(DeviceT, d, numMultiprocessors);
  FLD(DeviceT, d, maxIPC);
  FLD(DeviceT, d, maxWarpsPerMultiprocessor);
  FLD(DeviceT, d, maxBlocksPerMultiprocessor);
  FLD(DeviceT, d, maxSharedMemoryPerMultiprocessor);
  FLD(DeviceT, d, maxRegistersPerMultiprocessor);
  FLD(DeviceT, d, maxRegistersPerBlock);
  FLD(DeviceT, d, maxSharedMemoryPerBlock);
  FLD(DeviceT, d, maxThreadsPerBlock);
  FLD(DeviceT, d, computeCapabilityMajor);
  FLD(DeviceT, d, computeCapabilityMinor);
  FLD(DeviceT, d, id);
  FLD(DeviceT, d, eccEnabled);
  FLD(DeviceT, d, uuid);
  FLD(DeviceT, d, name);
  FLD(DeviceT, d, isCudaVisible);
  FLD(DeviceT, d, isMigEnabled);
  FLD(DeviceT, d, gpuInstanceId);
  FLD(DeviceT, d, computeInstanceId);
  FLD(DeviceT, d, migUuid);
  FLD(DeviceT, d, isNumaNode);
  FLD(DeviceT, d, numaId);
#if V13_4
  FLD(DeviceT, d, numTpcs);
#endif

  const char *c = CONTEXT_S;
  FLD(ContextT, c, kind);
  FLD(ContextT, c, contextId);
  FLD(ContextT, c, deviceId);
  FLD(ContextT, c, computeApiKind);
  FLD(ContextT, c, nullStreamId);
  FLD(ContextT, c, parentContextId);
  FLD(ContextT, c, isGreenContext);
  FLD(ContextT, c, numMultiprocessors);
  FLD(ContextT, c, cigMode);
#if V13_4
  FLD(ContextT, c, processId);
#endif

  const char *a = "CUpti_ActivityAPI";
  FLD(CUpti_ActivityAPI, a, kind);
  FLD(CUpti_ActivityAPI, a, cbid);
  FLD(CUpti_ActivityAPI, a, start);
  FLD(CUpti_ActivityAPI, a, end);
  FLD(CUpti_ActivityAPI, a, processId);
  FLD(CUpti_ActivityAPI, a, threadId);
  FLD(CUpti_ActivityAPI, a, correlationId);
  FLD(CUpti_ActivityAPI, a, returnValue);

  const char *e = "CUpti_ActivityExternalCorrelation";
  FLD(CUpti_ActivityExternalCorrelation, e, kind);
  FLD(CUpti_ActivityExternalCorrelation, e, externalKind);
  FLD(CUpti_ActivityExternalCorrelation, e, externalId);
  FLD(CUpti_ActivityExternalCorrelation, e, correlationId);

  const char *o = "CUpti_ActivityOverhead3";
  FLD(CUpti_ActivityOverhead3, o, kind);
  FLD(CUpti_ActivityOverhead3, o, overheadKind);
  FLD(CUpti_ActivityOverhead3, o, objectKind);
  FLD(CUpti_ActivityOverhead3, o, objectId.dcs.deviceId);
  FLD(CUpti_ActivityOverhead3, o, objectId.dcs.contextId);
  FLD(CUpti_ActivityOverhead3, o, objectId.dcs.streamId);
  FLD(CUpti_ActivityOverhead3, o, start);
  FLD(CUpti_ActivityOverhead3, o, end);
  FLD(CUpti_ActivityOverhead3, o, correlationId);
  FLD(CUpti_ActivityOverhead3, o, overheadData);

  const char *g = "CUpti_ActivityGraphTrace2";
  FLD(CUpti_ActivityGraphTrace2, g, kind);
  FLD(CUpti_ActivityGraphTrace2, g, correlationId);
  FLD(CUpti_ActivityGraphTrace2, g, start);
  FLD(CUpti_ActivityGraphTrace2, g, end);
  FLD(CUpti_ActivityGraphTrace2, g, deviceId);
  FLD(CUpti_ActivityGraphTrace2, g, graphId);
  FLD(CUpti_ActivityGraphTrace2, g, contextId);
  FLD(CUpti_ActivityGraphTrace2, g, streamId);
  FLD(CUpti_ActivityGraphTrace2, g, endDeviceId);
  FLD(CUpti_ActivityGraphTrace2, g, endContextId);

  const char *i = "CUpti_ActivityInstructionExecution";
  FLD(CUpti_ActivityInstructionExecution, i, kind);
  FLD(CUpti_ActivityInstructionExecution, i, flags);
  FLD(CUpti_ActivityInstructionExecution, i, sourceLocatorId);
  FLD(CUpti_ActivityInstructionExecution, i, correlationId);
  FLD(CUpti_ActivityInstructionExecution, i, functionId);
  FLD(CUpti_ActivityInstructionExecution, i, pcOffset);
  FLD(CUpti_ActivityInstructionExecution, i, threadsExecuted);
  FLD(CUpti_ActivityInstructionExecution, i, notPredOffThreadsExecuted);
  FLD(CUpti_ActivityInstructionExecution, i, executed);
}

/* ---------------------------------------------------------------- buffers */

static uint8_t g_buf[1 << 16] __attribute__((aligned(8)));
static size_t g_len;
static FILE *g_out; /* where record lines go */
static void *g_recs[256];
static int g_nrecs;

/* Reserves the next record of `size` bytes (zeroed) and returns it. CUPTI records are 8-byte
 * aligned and each struct's size is a multiple of 8, so records follow each other directly. */
static void *next_record(size_t size) {
  if (g_len + size > sizeof g_buf) {
    fprintf(stderr, "buffer full\n");
    exit(2);
  }
  void *r = g_buf + g_len;
  memset(r, 0, size);
  g_len += size;
  if (g_nrecs < (int)(sizeof g_recs / sizeof g_recs[0])) g_recs[g_nrecs++] = r;
  return r;
}

static size_t off(const void *r) { return (size_t)((const uint8_t *)r - g_buf); }

static void pu(const char *n, unsigned long long v) { fprintf(g_out, " %s=%llu", n, v); }
static void pi(const char *n, long long v) { fprintf(g_out, " %s=%lld", n, v); }
static void puuid(const char *n, const CUuuid *u) {
  fprintf(g_out, " %s=", n);
  for (int i = 0; i < 16; i++) fprintf(g_out, "%02x", (unsigned)(uint8_t)u->bytes[i]);
}
#define U(r, f) pu(#f, (unsigned long long)(r)->f)
#define UN(r, n, f) pu(n, (unsigned long long)(r)->f)
#define I(r, f) pi(#f, (long long)(r)->f)
#define PTR(r, f) pu(#f, (unsigned long long)(uintptr_t)(r)->f)

static const uint64_t T0 = 1752826085000000000ULL; /* 2025-07-18T08:08:05Z */

static void kernel(CUpti_ActivityKind kind, uint32_t n) {
  KernelT *r = next_record(sizeof *r);
  r->kind = kind;
  r->registersPerThread = (uint16_t)(40 + n);
  r->start = T0 + 1000 * n;
  r->end = T0 + 1000 * n + 700 + n;
  r->completed = r->end + 3;
  r->deviceId = 0;
  r->contextId = 1;
  r->streamId = 7 + n;
  r->gridX = 264 + (int32_t)n;
  r->gridY = 2;
  r->gridZ = 1;
  r->blockX = 128;
  r->blockY = 1;
  r->blockZ = 1;
  r->staticSharedMemory = 4096;
  r->dynamicSharedMemory = 49152 + (int32_t)n;
  r->localMemoryPerThread = 16;
  r->correlationId = 100 + n;
  r->gridId = 9000000000LL + n;
  r->name = (const char *)(uintptr_t)(0x7f0000001000ULL + n);
  r->queued = T0 - 500;
  r->submitted = T0 - 200;
  r->launchType = 0;
  r->sharedMemoryExecuted = 102400;
  r->graphNodeId = n == 1 ? 0x1122334455ULL : 0;
  r->graphId = n == 1 ? 77 : 0;
  r->clusterX = 1;
  r->clusterY = 1;
  r->clusterZ = 1;
#if V13
  r->isDeviceLaunched = (uint8_t)(n & 1);
#endif
}

static void memcpy_rec(uint8_t copy_kind, uint32_t n) {
  MemcpyT *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  r->copyKind = copy_kind;
  r->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  r->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
  r->bytes = 1048576ULL * (n + 1) + n;
  r->start = T0 + 5000 + 100 * n;
  r->end = r->start + 2240;
  r->deviceId = 0;
  r->contextId = 1;
  r->streamId = 13;
  r->correlationId = 200 + n;
  r->runtimeCorrelationId = 300 + n;
  r->graphNodeId = 0;
  r->graphId = 0;
  r->copyCount = 1;
#if V13
  r->isDeviceLaunched = (uint8_t)(n == 2);
#endif
}

static void memcpy2_rec(void) {
  CUpti_ActivityMemcpyPtoP4 *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  r->copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  r->srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->flags = 0;
  r->bytes = 268435456ULL + 5;
  r->start = T0 + 9000;
  r->end = T0 + 9000 + 31000;
  r->deviceId = 0;
  r->contextId = 1;
  r->streamId = 14;
  r->srcDeviceId = 0;
  r->srcContextId = 1;
  r->dstDeviceId = 1;
  r->dstContextId = 2;
  r->correlationId = 250;
  r->graphNodeId = 0x99;
  r->graphId = 5;
}

static void memset_rec(void) {
  MemsetT *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_MEMSET;
  r->value = 0xAB;
  r->bytes = 4096 * 3 + 1;
  r->start = T0 + 12000;
  r->end = T0 + 12000 + 640;
  r->deviceId = 0;
  r->contextId = 1;
  r->streamId = 15;
  r->correlationId = 260;
  r->flags = CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC;
  r->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->graphNodeId = 0;
  r->graphId = 0;
#if V13
  r->isDeviceLaunched = 1;
#endif
}

static void memory2_rec(CUpti_ActivityMemoryOperationType op, uint32_t n) {
  CUpti_ActivityMemory4 *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  r->memoryOperationType = op;
  r->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r->correlationId = 270 + n;
  r->address = 0x7f1200000000ULL + 0x1000 * n;
  r->bytes = 8388608 + n;
  r->timestamp = T0 + 100 + 10000 * n;
  r->PC = 0x4000 + n;
  r->processId = 4242;
  r->deviceId = 0;
  r->contextId = 1;
  r->streamId = 0;
  r->name = (const char *)(uintptr_t)(0x7f0000002000ULL + n);
  r->isAsync = n;
  r->memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  r->memoryPoolConfig.address = 0x7f1300000000ULL;
  r->memoryPoolConfig.releaseThreshold = 1ULL << 30;
  r->memoryPoolConfig.pool.size = 1ULL << 31;
  r->memoryPoolConfig.utilizedSize = 1ULL << 24;
  r->source = (const char *)(uintptr_t)(0x7f0000003000ULL);
}

static void device_rec(void) {
  DeviceT *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_DEVICE;
  r->flags = CUPTI_ACTIVITY_FLAG_NONE;
  r->globalMemoryBandwidth = 3352000000ULL;
  r->globalMemorySize = 85520809984ULL;
  r->constantMemorySize = 65536;
  r->l2CacheSize = 52428800;
  r->numThreadsPerWarp = 32;
  r->coreClockRate = 1980000;
  r->numMemcpyEngines = 5;
  r->numMultiprocessors = 132;
  r->maxIPC = 4;
  r->maxWarpsPerMultiprocessor = 64;
  r->maxBlocksPerMultiprocessor = 32;
  r->maxSharedMemoryPerMultiprocessor = 233472;
  r->maxRegistersPerMultiprocessor = 65536;
  r->maxRegistersPerBlock = 65536;
  r->maxSharedMemoryPerBlock = 49152;
  r->maxThreadsPerBlock = 1024;
  r->maxBlockDimX = 1024;
  r->maxBlockDimY = 1024;
  r->maxBlockDimZ = 64;
  r->maxGridDimX = 2147483647;
  r->maxGridDimY = 65535;
  r->maxGridDimZ = 65535;
  r->computeCapabilityMajor = 9;
  r->computeCapabilityMinor = 0;
  r->id = 0;
  r->eccEnabled = 1;
  static const uint8_t uuid[16] = {0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09,
                                   0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff, 0x6f, 0x88};
  memcpy(r->uuid.bytes, uuid, 16);
  r->name = (const char *)(uintptr_t)0x7f0000000100ULL;
  r->isCudaVisible = 1;
  r->isMigEnabled = 0;
  r->gpuInstanceId = 0xFFFFFFFFu;
  r->computeInstanceId = 0xFFFFFFFFu;
  r->isNumaNode = 0;
  r->numaId = 0xFFFFFFFFu;
#if V13_4
  r->numTpcs = 66;
#endif
}

static void context_rec(void) {
  ContextT *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  r->contextId = 1;
  r->deviceId = 0;
  r->computeApiKind = CUPTI_ACTIVITY_COMPUTE_API_CUDA;
  r->nullStreamId = 7;
  r->parentContextId = 0;
  r->isGreenContext = 1;
  r->numMultiprocessors = 66;
  r->cigMode = CUPTI_CONTEXT_CIG_MODE_NONE;
#if V13_4
  r->processId = 4242;
#endif
}

static void api_rec(CUpti_ActivityKind kind, uint32_t corr, uint32_t pid, uint32_t cbid) {
  CUpti_ActivityAPI *r = next_record(sizeof *r);
  r->kind = kind;
  r->cbid = cbid;
  r->start = T0 - 1000 + corr;
  r->end = T0 - 900 + corr;
  r->processId = pid;
  r->threadId = 0x5000 + corr;
  r->correlationId = corr;
  r->returnValue = 0;
}

static void external_rec(CUpti_ExternalCorrelationKind ek, uint64_t id, uint32_t corr) {
  CUpti_ActivityExternalCorrelation *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  r->externalKind = ek;
  r->externalId = id;
  r->correlationId = corr;
}

static void overhead_rec(void) {
  CUpti_ActivityOverhead3 *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  r->overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  r->objectKind = CUPTI_ACTIVITY_OBJECT_DEVICE;
  r->objectId.dcs.deviceId = 0;
  r->objectId.dcs.contextId = 1;
  r->objectId.dcs.streamId = 3;
  r->start = T0 + 50000;
  r->end = T0 + 50900;
  r->correlationId = 0;
  r->overheadData = (void *)(uintptr_t)0x7f0000004000ULL;
}

static void graph_rec(void) {
  CUpti_ActivityGraphTrace2 *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
  r->correlationId = 280;
  r->start = T0 + 60000;
  r->end = T0 + 61500;
  r->deviceId = 0;
  r->graphId = 77;
  r->contextId = 1;
  r->streamId = 7;
  r->endDeviceId = 0;
  r->endContextId = 1;
}

static void instr_rec(void) {
  CUpti_ActivityInstructionExecution *r = next_record(sizeof *r);
  r->kind = CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION;
  r->flags = CUPTI_ACTIVITY_FLAG_INSTRUCTION_VALUE_INVALID;
  r->sourceLocatorId = 11;
  r->correlationId = 100;
  r->functionId = 12;
  r->pcOffset = 0x1f0;
  r->threadsExecuted = 1ULL << 33;
  r->notPredOffThreadsExecuted = (1ULL << 33) - 5;
  r->executed = 1 << 28;
}

/* A zero-filled record of a kind gpumeter does not decode: only kind and offset are checked. */
static void other_rec(CUpti_ActivityKind kind, size_t size) {
  uint32_t *r = next_record(size);
  *r = (uint32_t)kind;
}

static void print_kernel(const KernelT *r) {
  U(r, registersPerThread); U(r, start); U(r, end); U(r, completed); U(r, deviceId);
  U(r, contextId); U(r, streamId); I(r, gridX); I(r, gridY); I(r, gridZ); I(r, blockX);
  I(r, blockY); I(r, blockZ); I(r, staticSharedMemory); I(r, dynamicSharedMemory);
  U(r, localMemoryPerThread); U(r, correlationId); I(r, gridId); PTR(r, name); U(r, queued);
  U(r, submitted); U(r, launchType); U(r, sharedMemoryExecuted); U(r, graphNodeId);
  U(r, graphId); U(r, clusterX); U(r, clusterY); U(r, clusterZ);
#if V13
  U(r, isDeviceLaunched);
#endif
}

static void print_memcpy(const MemcpyT *r) {
  U(r, copyKind); U(r, srcKind); U(r, dstKind); U(r, flags); U(r, bytes); U(r, start);
  U(r, end); U(r, deviceId); U(r, contextId); U(r, streamId); U(r, correlationId);
  U(r, runtimeCorrelationId); U(r, graphNodeId); U(r, graphId); U(r, copyCount);
#if V13
  U(r, isDeviceLaunched);
#endif
}

static void print_memcpy2(const CUpti_ActivityMemcpyPtoP4 *r) {
  U(r, copyKind); U(r, srcKind); U(r, dstKind); U(r, flags); U(r, bytes); U(r, start);
  U(r, end); U(r, deviceId); U(r, contextId); U(r, streamId); U(r, srcDeviceId);
  U(r, srcContextId); U(r, dstDeviceId); U(r, dstContextId); U(r, correlationId);
  U(r, graphNodeId); U(r, graphId);
}

static void print_memset(const MemsetT *r) {
  U(r, value); U(r, bytes); U(r, start); U(r, end); U(r, deviceId); U(r, contextId);
  U(r, streamId); U(r, correlationId); U(r, flags); U(r, memoryKind); U(r, graphNodeId);
  U(r, graphId);
#if V13
  U(r, isDeviceLaunched);
#endif
}

static void print_memory2(const CUpti_ActivityMemory4 *r) {
  U(r, memoryOperationType); U(r, memoryKind); U(r, correlationId); U(r, address); U(r, bytes);
  U(r, timestamp); U(r, PC); U(r, processId); U(r, deviceId); U(r, contextId); U(r, streamId);
  PTR(r, name); U(r, isAsync);
  UN(r, "memoryPoolConfig.memoryPoolType", memoryPoolConfig.memoryPoolType);
  UN(r, "memoryPoolConfig.address", memoryPoolConfig.address);
  UN(r, "memoryPoolConfig.releaseThreshold", memoryPoolConfig.releaseThreshold);
  UN(r, "memoryPoolConfig.pool.size", memoryPoolConfig.pool.size);
  UN(r, "memoryPoolConfig.utilizedSize", memoryPoolConfig.utilizedSize);
  PTR(r, source);
}

static void print_device(const DeviceT *r) {
  U(r, flags); U(r, globalMemoryBandwidth); U(r, globalMemorySize); U(r, constantMemorySize);
  U(r, l2CacheSize); U(r, numThreadsPerWarp); U(r, coreClockRate); U(r, numMemcpyEngines);
  U(r, numMultiprocessors); U(r, maxIPC); U(r, maxWarpsPerMultiprocessor);
  U(r, maxBlocksPerMultiprocessor); U(r, maxSharedMemoryPerMultiprocessor);
  U(r, maxRegistersPerMultiprocessor); U(r, maxRegistersPerBlock); U(r, maxSharedMemoryPerBlock);
  U(r, maxThreadsPerBlock); U(r, computeCapabilityMajor); U(r, computeCapabilityMinor);
  U(r, id); U(r, eccEnabled); puuid("uuid", &r->uuid); PTR(r, name); U(r, isCudaVisible);
  U(r, isMigEnabled); U(r, gpuInstanceId); U(r, computeInstanceId); puuid("migUuid", &r->migUuid);
  U(r, isNumaNode); U(r, numaId);
#if V13_4
  U(r, numTpcs);
#endif
}

static void print_context(const ContextT *r) {
  U(r, contextId); U(r, deviceId); U(r, computeApiKind); U(r, nullStreamId);
  U(r, parentContextId); U(r, isGreenContext); U(r, numMultiprocessors); U(r, cigMode);
#if V13_4
  U(r, processId);
#endif
}

static void print_api(const CUpti_ActivityAPI *r) {
  U(r, cbid); U(r, start); U(r, end); U(r, processId); U(r, threadId); U(r, correlationId);
  U(r, returnValue);
}

static void print_external(const CUpti_ActivityExternalCorrelation *r) {
  U(r, externalKind); U(r, externalId); U(r, correlationId);
}

static void print_overhead(const CUpti_ActivityOverhead3 *r) {
  U(r, overheadKind); U(r, objectKind);
  UN(r, "objectId.dcs.deviceId", objectId.dcs.deviceId);
  UN(r, "objectId.dcs.contextId", objectId.dcs.contextId);
  UN(r, "objectId.dcs.streamId", objectId.dcs.streamId);
  U(r, start); U(r, end); U(r, correlationId); PTR(r, overheadData);
}

static void print_graph(const CUpti_ActivityGraphTrace2 *r) {
  U(r, correlationId); U(r, start); U(r, end); U(r, deviceId); U(r, graphId); U(r, contextId);
  U(r, streamId); U(r, endDeviceId); U(r, endContextId);
}

static void print_instr(const CUpti_ActivityInstructionExecution *r) {
  U(r, flags); U(r, sourceLocatorId); U(r, correlationId); U(r, functionId); U(r, pcOffset);
  U(r, threadsExecuted); U(r, notPredOffThreadsExecuted); U(r, executed);
}

/* One line per record: `TAG kind=K offset=O name=value ...`, the key fields read through the
 * header struct of the record's kind. Used for the expected values (records as built) and for
 * libcupti's walk (records where cuptiActivityGetNextRecord says they are). */
static void print_record(const char *tag, const void *p) {
  int kind = (int)((const CUpti_Activity *)p)->kind;
  fprintf(g_out, "%s kind=%d offset=%zu", tag, kind, off(p));
  switch (kind) {
  case CUPTI_ACTIVITY_KIND_KERNEL:
  case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    print_kernel(p);
    break;
  case CUPTI_ACTIVITY_KIND_MEMCPY:
    print_memcpy(p);
    break;
  case CUPTI_ACTIVITY_KIND_MEMCPY2:
    print_memcpy2(p);
    break;
  case CUPTI_ACTIVITY_KIND_MEMSET:
    print_memset(p);
    break;
  case CUPTI_ACTIVITY_KIND_MEMORY2:
    print_memory2(p);
    break;
  case CUPTI_ACTIVITY_KIND_DEVICE:
    print_device(p);
    break;
  case CUPTI_ACTIVITY_KIND_CONTEXT:
    print_context(p);
    break;
  case CUPTI_ACTIVITY_KIND_DRIVER:
  case CUPTI_ACTIVITY_KIND_RUNTIME:
  case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API:
    print_api(p);
    break;
  case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
    print_external(p);
    break;
  case CUPTI_ACTIVITY_KIND_OVERHEAD:
    print_overhead(p);
    break;
  case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
    print_graph(p);
    break;
  case CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION:
    print_instr(p);
    break;
  default:
    break;
  }
  fputc('\n', g_out);
}

static int write_file(const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(g_buf, 1, g_len, f) != g_len || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  return 0;
}

static int make_buffer(const char *out, const char *expected) {
  g_out = fopen(expected, "w");
  if (!g_out) {
    perror(expected);
    return 1;
  }
  fprintf(g_out, "api %d\n", (int)CUPTI_API_VERSION);
  device_rec();
  context_rec();
  api_rec(CUPTI_ACTIVITY_KIND_RUNTIME, 100, 4242, 211 /* cudaLaunchKernel_v7000 */);
  api_rec(CUPTI_ACTIVITY_KIND_DRIVER, 101, 4243, 307 /* cuLaunchKernel */);
  api_rec(CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API, 102, 4244, 0);
  external_rec(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 7002, 100);
  external_rec(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1001, 100);
  external_rec(CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC, 55, 101);
  kernel(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0);
  kernel(CUPTI_ACTIVITY_KIND_KERNEL, 1);
  other_rec(CUPTI_ACTIVITY_KIND_MARKER, sizeof(CUpti_ActivityMarker2));
  memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 0);
  memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 1);
  memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, 2);
  memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, 3);
  memcpy2_rec();
  memset_rec();
  memory2_rec(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0);
  memory2_rec(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, 1);
  other_rec(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, sizeof(CUpti_ActivitySynchronization2));
  overhead_rec();
  graph_rec();
  instr_rec();
  other_rec(CUPTI_ACTIVITY_KIND_JIT, sizeof(CUpti_ActivityJit2));
  other_rec(CUPTI_ACTIVITY_KIND_NAME, sizeof(CUpti_ActivityName));
  for (int i = 0; i < g_nrecs; i++) print_record("record", g_recs[i]);
  if (fclose(g_out) != 0) {
    perror(expected);
    return 1;
  }
  return write_file(out);
}

/* Sizes of every kind in this release, for `allkinds`: the `size` lines of `layouts`. */
static int make_allkinds(const char *out) {
  /* print_sizes into a memory stream, parsed back: one list of kinds and structs. */
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return 1;
  print_sizes(mem);
  fclose(mem);
  char *save = NULL;
  for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    int kind;
    char sname[128];
    size_t size;
    if (sscanf(l, "size %d %127s %zu", &kind, sname, &size) == 3) {
      uint32_t *r = next_record(size);
      *r = (uint32_t)kind;
    }
  }
  free(text);
  return write_file(out);
}

typedef CUptiResult (*next_fn)(uint8_t *, size_t, CUpti_Activity **);

static int walk(const char *lib, const char *path) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 3;
  }
  next_fn next = (next_fn)dlsym(h, "cuptiActivityGetNextRecord");
  if (!next) {
    fprintf(stderr, "dlsym cuptiActivityGetNextRecord: %s\n", dlerror());
    return 3;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 1;
  }
  g_len = fread(g_buf, 1, sizeof g_buf, f);
  fclose(f);
  CUpti_Activity *rec = NULL;
  CUptiResult st;
  g_out = stdout;
  while ((st = next(g_buf, g_len, &rec)) == CUPTI_SUCCESS) print_record("walk", rec);
  printf("end status=%d\n", (int)st);
  return 0;
}

static int steps(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 3;
  }
  next_fn next = (next_fn)dlsym(h, "cuptiActivityGetNextRecord");
  if (!next) {
    fprintf(stderr, "dlsym cuptiActivityGetNextRecord: %s\n", dlerror());
    return 3;
  }
  const size_t len = 4096; /* larger than any record */
  for (uint32_t k = 1; k <= (uint32_t)CUPTI_ACTIVITY_KIND_COUNT + 3; k++) {
    memset(g_buf, 0, len);
    const uint32_t runtime = CUPTI_ACTIVITY_KIND_RUNTIME;
    for (size_t o = 8; o + sizeof(CUpti_ActivityAPI) <= len; o += 8) memcpy(g_buf + o, &runtime, 4);
    memcpy(g_buf, &k, 4);
    CUpti_Activity *rec = NULL;
    CUptiResult st = next(g_buf, len, &rec);
    if (st == CUPTI_SUCCESS && (uint8_t *)rec != g_buf) {
      fprintf(stderr, "kind %u: first record not at offset 0\n", k);
      return 1;
    }
    if (st == CUPTI_SUCCESS) st = next(g_buf, len, &rec);
    if (st == CUPTI_SUCCESS)
      printf("step %u %zu\n", k, (size_t)((uint8_t *)rec - g_buf));
    else
      printf("step %u refused %d\n", k, (int)st);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "layouts") == 0) {
    printf("api %d\n", (int)CUPTI_API_VERSION);
    print_sizes(stdout);
    print_fields();
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "buffer") == 0) return make_buffer(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "allkinds") == 0) return make_allkinds(argv[2]);
  if (argc == 4 && strcmp(argv[1], "walk") == 0) return walk(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "steps") == 0) return steps(argv[2]);
  fprintf(stderr,
          "usage: %s layouts | buffer OUT EXPECTED | allkinds OUT | walk LIB BUFFER | steps LIB\n",
          argv[0]);
  return 2;
}
