/*
 * fake_cupti.c: a stand-in libcupti (CUPTI 12.8 ABI, CUPTI_API_VERSION 26) for testing the
 * collector, the injection library and `gpumeter record` end to end on a machine without a
 * GPU. It implements the functions the collector calls and produces real CUPTI 12.8 records
 * (the header structs of the 12.8 wheel) when flushed: one DEVICE record and FAKE_CUPTI_KERNELS
 * CONCURRENT_KERNEL records whose `name` points to this library's own strings, split over two
 * buffers completed from a second thread, as CUPTI's worker thread would. Like CUPTI 13.0 on a
 * real GPU, the completion callback gets a non-NULL context and a non-zero stream value (both
 * documented as always NULL): the collector must ignore them.
 *
 * Environment: FAKE_CUPTI_KERNELS (default 10), FAKE_CUPTI_DROPPED (reported once, default 0),
 * FAKE_CUPTI_SUBSCRIBE_RC (cuptiSubscribe's result, default 0; 39 =
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), FAKE_CUPTI_ENABLE_RC (cuptiActivityEnable's
 * result, default 0; 15 = CUPTI_ERROR_NOT_INITIALIZED).
 *
 * PM sampling: enabling the callback of context creation calls it at once with a fake context
 * of device 0 (chip "GH100"); the PM sampling and profiler host calls check every parameter
 * struct's size against the header's STRUCT_SIZE (abort on a mismatch) and decode
 * FAKE_CUPTI_PM_SAMPLES samples (default 3) on the first decode, with the hardware-buffer
 * overflow flag when FAKE_CUPTI_PM_OVERFLOW=1. Evaluated values per sample i: sm active
 * 500*(i+1), sm elapsed 1000, DRAM read 4096, DRAM write 2048 except -1 for i = 2.
 * FAKE_CUPTI_PM_ENABLE_RC is cuptiPmSamplingEnable's result (35 =
 * CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); FAKE_CUPTI_PM_INTERVAL, when set, is the sampling
 * interval SetConfig must get (abort otherwise).
 *
 * FLOP counters (range profiler): a host object of type range profiler lists the nine SASS op
 * counters and one tensor-path total (with its sparsity part, which the collector must leave
 * out) and needs 2 passes; cuptiRangeProfilerEnable on the fake context (FAKE_CUPTI_RANGE_ENABLE_RC
 * is its result), SetConfig checked for auto range, kernel replay and one nesting level. When
 * the runtime's cudaLaunchKernel callback is enabled, the first forced flush first plays
 * FAKE_CUPTI_KERNELS launches through it (entry and exit, correlation ids 1, 2, ..., the ids of
 * the kernel records), each one auto range. Evaluated values of range r (from 0): the SASS
 * counter k of the nine (dadd, dmul, dfma, fadd, fmul, ffma, hadd, hmul, hfma) is (k+1)*(r+1);
 * the tensor total 100*(r+1). FAKE_CUPTI_FAILED_LAUNCH=k makes launch k return an error at its
 * exit callback (functionReturnValue nonzero) and make no range (its kernel record stays).
 *
 * Streaming mode (FAKE_CUPTI_STREAM_MS=<ms>, default 0 = off): once the buffer callbacks are
 * registered and CONCURRENT_KERNEL is enabled, a background thread completes one buffer every
 * <ms> ms, as CUPTI does with a flush period, each holding FAKE_CUPTI_STREAM_KERNELS (default 5)
 * CONCURRENT_KERNEL records taken from the real clock (CLOCK_REALTIME, as cuptiGetTimestamp)
 * when the buffer is made: kernel i of n starts at now - (n - i) * step and lasts
 * FAKE_CUPTI_KERNEL_NS (default 2000) ns, step = 100 us (or the duration + 1 us when longer),
 * so every kernel has ended by the buffer's completion and the kernels of a process are in
 * time order (a start never earlier than the previous one's plus the step). The first buffer
 * made carries the DEVICE record (the same UUID in every process: processes share one GPU). A
 * non-forced cuptiActivityFlushAll completes one such buffer at once; the forced flush at exit
 * stops the thread (joined: no callback after it returns) and completes one last buffer.
 * FAKE_CUPTI_KERNELS and the launch callbacks of the FLOP counters apply only when streaming
 * is off, which keeps the behaviour above unchanged. The fake's shared state is behind a mutex:
 * the collector's callbacks may run on any thread.
 *
 * Build: cc -shared -fPIC -Ibindings/cupti/shim -I"$CUPTI12_INCLUDE" -I"$CUDA12_INCLUDE" -o libcupti.so.12
 *        fake_cupti.c -lpthread
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#if CUPTI_API_VERSION != 26
#error "fake_cupti.c is built against the CUPTI 12.8 headers (CUPTI_API_VERSION 26)"
#endif

static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
/* Guards g_dropped_reported, g_next_correlation and the streaming state below; never held
 * while a callback of the collector runs. */
static pthread_mutex_t g_state_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_dropped_reported;
static uint32_t g_next_correlation = 1;

static const char *const KERNEL_NAMES[] = {"fake_kernel_add", "fake_kernel_scale"};
static const char DEVICE_NAME[] = "NVIDIA H200";

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

CUptiResult cuptiGetVersion(uint32_t *version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR_FAKE";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetErrorMessage(CUptiResult result, const char **str) {
  return cuptiGetResultString(result, str);
}

CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = now_ns();
  return CUPTI_SUCCESS;
}

static CUpti_CallbackFunc g_callback;
static void *g_userdata;

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                           void *userdata) {
  g_callback = callback;
  g_userdata = userdata;
  long rc = env_long("FAKE_CUPTI_SUBSCRIBE_RC", 0);
  if (rc != 0) return (CUptiResult)rc;
  *subscriber = (CUpti_SubscriberHandle)(uintptr_t)0x5a0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  (void)subscriber;
  return CUPTI_SUCCESS;
}

static void stream_start(void);

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  long rc = env_long("FAKE_CUPTI_ENABLE_RC", 0);
  if (rc == 0 && kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) stream_start();
  return (CUptiResult)rc;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  (void)kind;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushPeriod(uint32_t ms) {
  (void)ms;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                   uint64_t id) {
  (void)kind;
  (void)id;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                  uint64_t *last) {
  (void)kind;
  if (last) *last = 77;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped) {
  if (ctx != NULL || stream != 0) {
    fprintf(stderr, "fake_cupti: dropped count asked for a context/stream, not the global queue\n");
    abort();
  }
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_state_lock);
  *dropped = g_dropped_reported ? 0 : (size_t)env_long("FAKE_CUPTI_DROPPED", 0);
  g_dropped_reported = 1;
  pthread_mutex_unlock(&g_state_lock);
  return CUPTI_SUCCESS;
}

/* One buffer holding `n` kernel records (and a DEVICE record first when `with_device`). */
struct job {
  uint8_t *buf;
  size_t size;
  size_t valid;
};

/* A buffer from the collector, checked: 8-byte aligned and zeroed. */
static struct job request_buffer(void) {
  struct job j = {0};
  size_t max = 0;
  g_request(&j.buf, &j.size, &max);
  if (!j.buf || ((uintptr_t)j.buf & 7) != 0) {
    fprintf(stderr, "fake_cupti: got a NULL or misaligned buffer\n");
    abort();
  }
  for (size_t i = 0; i < j.size; i++) {
    if (j.buf[i] != 0) {
      fprintf(stderr, "fake_cupti: buffer not zeroed at byte %zu\n", i);
      abort();
    }
  }
  return j;
}

/* Appends the DEVICE record of the one fake GPU (device 0, an H200 with a fixed UUID). */
static void put_device(struct job *j) {
  CUpti_ActivityDevice5 d;
  memset(&d, 0, sizeof d);
  d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  d.id = 0;
  d.name = DEVICE_NAME;
  d.numMultiprocessors = 132;
  d.computeCapabilityMajor = 9;
  d.computeCapabilityMinor = 0;
  d.numThreadsPerWarp = 32;
  d.maxWarpsPerMultiprocessor = 64;
  d.maxBlocksPerMultiprocessor = 32;
  d.maxRegistersPerMultiprocessor = 65536;
  d.maxRegistersPerBlock = 65536;
  d.maxSharedMemoryPerMultiprocessor = 233472;
  d.maxSharedMemoryPerBlock = 49152;
  for (int b = 0; b < 16; b++) d.uuid.bytes[b] = (char)(0xa0 + b);
  memcpy(j->buf + j->valid, &d, sizeof d);
  j->valid += sizeof d;
}

static uint32_t next_correlation(void) {
  pthread_mutex_lock(&g_state_lock);
  uint32_t id = g_next_correlation++;
  pthread_mutex_unlock(&g_state_lock);
  return id;
}

/* Appends a kernel record of [start, end) ns; 0 when the buffer is full. */
static int put_kernel(struct job *j, uint64_t start, uint64_t end) {
  CUpti_ActivityKernel9 k;
  memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.contextId = 1;
  k.streamId = 7;
  k.correlationId = next_correlation();
  k.gridX = 264;
  k.gridY = 1;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 32;
  k.name = KERNEL_NAMES[k.correlationId % 2];
  if (j->valid + sizeof k > j->size) return 0;
  memcpy(j->buf + j->valid, &k, sizeof k);
  j->valid += sizeof k;
  return 1;
}

static struct job make_buffer(long n, int with_device, uint64_t *t) {
  struct job j = request_buffer();
  if (with_device) put_device(&j);
  for (long i = 0; i < n; i++) {
    uint64_t start = *t;
    *t += 3000;
    if (!put_kernel(&j, start, start + 2000)) break;
  }
  return j;
}

static void *complete_on_worker(void *arg) {
  struct job *j = arg;
  /* Garbage context and stream, as seen from CUPTI 13.0: must be ignored. */
  g_complete((CUcontext)(uintptr_t)0xdead0, 2248755008u, j->buf, j->size, j->valid);
  return NULL;
}

static int g_launch_callback;
static void play_launches(long n);

/* ---- streaming mode (FAKE_CUPTI_STREAM_MS) ---- */

/* One stream buffer is made and completed at a time (held across the completion callback;
 * the callback never takes it). */
static pthread_mutex_t g_produce_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_stream_wake = PTHREAD_COND_INITIALIZER;
/* Under g_state_lock: */
static int g_stream_started, g_stream_stop, g_stream_device_sent;
static uint64_t g_stream_last_start;
static pthread_t g_stream_thread;

static long stream_ms(void) { return env_long("FAKE_CUPTI_STREAM_MS", 0); }

/* Makes and completes one buffer of FAKE_CUPTI_STREAM_KERNELS kernels that ended by now. */
static void stream_buffer(void) {
  long n = env_long("FAKE_CUPTI_STREAM_KERNELS", 5);
  uint64_t dur = (uint64_t)env_long("FAKE_CUPTI_KERNEL_NS", 2000);
  uint64_t step = dur < 100000 ? 100000 : dur + 1000;
  pthread_mutex_lock(&g_produce_lock);
  pthread_mutex_lock(&g_state_lock);
  int with_device = !g_stream_device_sent;
  g_stream_device_sent = 1;
  pthread_mutex_unlock(&g_state_lock);
  struct job j = request_buffer();
  if (with_device) put_device(&j);
  uint64_t now = now_ns();
  for (long i = 0; i < n; i++) {
    uint64_t start = now - (uint64_t)(n - i) * step;
    pthread_mutex_lock(&g_state_lock);
    if (g_stream_last_start != 0 && start < g_stream_last_start + step)
      start = g_stream_last_start + step;
    g_stream_last_start = start;
    pthread_mutex_unlock(&g_state_lock);
    if (!put_kernel(&j, start, start + dur)) break;
  }
  complete_on_worker(&j);
  pthread_mutex_unlock(&g_produce_lock);
}

static void *stream_main(void *arg) {
  long ms = (long)(intptr_t)arg;
  pthread_mutex_lock(&g_state_lock);
  while (!g_stream_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (!g_stream_stop && rc != ETIMEDOUT)
      rc = pthread_cond_timedwait(&g_stream_wake, &g_state_lock, &until);
    if (g_stream_stop) break;
    pthread_mutex_unlock(&g_state_lock);
    stream_buffer();
    pthread_mutex_lock(&g_state_lock);
  }
  pthread_mutex_unlock(&g_state_lock);
  return NULL;
}

/* Starts the stream thread once, when streaming is on and the callbacks are registered. */
static void stream_start(void) {
  long ms = stream_ms();
  if (ms <= 0 || !g_request || !g_complete) return;
  pthread_mutex_lock(&g_state_lock);
  int start = !g_stream_started;
  g_stream_started = 1;
  pthread_mutex_unlock(&g_state_lock);
  if (start && pthread_create(&g_stream_thread, NULL, stream_main, (void *)(intptr_t)ms) != 0) {
    fprintf(stderr, "fake_cupti: cannot start the stream thread\n");
    abort();
  }
}

/* Stops the stream thread and waits for it: no completion from it after this returns. */
static void stream_stop(void) {
  pthread_mutex_lock(&g_state_lock);
  int join = g_stream_started && !g_stream_stop;
  g_stream_stop = 1;
  pthread_cond_broadcast(&g_stream_wake);
  pthread_mutex_unlock(&g_state_lock);
  if (join) pthread_join(g_stream_thread, NULL);
}

/* cuptiActivityFlushAll in streaming mode: one buffer now; the forced flush stops the thread
 * first and completes the last buffer, once. */
static void stream_flush(uint32_t flag) {
  static int final_done;
  if (!g_request || !g_complete) return;
  if (!(flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)) {
    stream_buffer();
    return;
  }
  stream_stop();
  pthread_mutex_lock(&g_state_lock);
  int last = !final_done;
  final_done = 1;
  pthread_mutex_unlock(&g_state_lock);
  if (last) stream_buffer();
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  if (stream_ms() > 0) {
    stream_flush(flag);
    return CUPTI_SUCCESS;
  }
  static int flushed;
  if (flushed || !g_request || !g_complete) return CUPTI_SUCCESS;
  flushed = 1;
  long n = env_long("FAKE_CUPTI_KERNELS", 10);
  if (g_launch_callback) play_launches(n);
  uint64_t t = now_ns() - 1000000000ull;
  long first = n / 2;
  struct job a = make_buffer(first, 1, &t);
  struct job b = make_buffer(n - first, 0, &t);
  /* The second buffer completes first, on another thread. */
  pthread_t th;
  pthread_create(&th, NULL, complete_on_worker, &b);
  pthread_join(th, NULL);
  complete_on_worker(&a);
  return CUPTI_SUCCESS;
}

/* ---- PM sampling ---- */

#define FAKE_CTX ((CUcontext)(uintptr_t)0xc0ffee0)
#define CHECK_SIZE(p, T)                                                                 \
  do {                                                                                   \
    if (!(p) || (p)->structSize != T##_STRUCT_SIZE) {                                    \
      fprintf(stderr, "fake_cupti: %s: structSize %zu, expected %zu\n", #T,             \
              (p) ? (p)->structSize : 0, (size_t)T##_STRUCT_SIZE);                      \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

static CUpti_PmSampling_Object *const FAKE_SAMPLER = (CUpti_PmSampling_Object *)(uintptr_t)0x5100;
static CUpti_Profiler_Host_Object *const FAKE_HOST = (CUpti_Profiler_Host_Object *)(uintptr_t)0x4100;
static CUpti_Profiler_Host_Object *const FAKE_RANGE_HOST =
    (CUpti_Profiler_Host_Object *)(uintptr_t)0x4200;
#define IS_HOST(h) ((h) == FAKE_HOST || (h) == FAKE_RANGE_HOST)
static const char *const RANGE_BASE_METRICS[] = {
    "smsp__sass_thread_inst_executed_op_dadd_pred_on",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on",
    "sm__ops_path_tensor_src_fp16_dst_fp32",
    "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on",
    "sm__cycles_active"};
static size_t g_pm_completed;
static int g_pm_decoded;
static uint64_t g_pm_base;
static const char *const BASE_METRICS[] = {"sm__cycles_active", "sm__cycles_elapsed",
                                           "dram__bytes_read", "dram__bytes_write"};

CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  (void)subscriber;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
    g_launch_callback = (int)enable;
  if (enable && domain == CUPTI_CB_DOMAIN_RESOURCE &&
      cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED && g_callback) {
    CUpti_ResourceData data;
    memset(&data, 0, sizeof data);
    data.context = FAKE_CTX;
    g_callback(g_userdata, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &data);
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetDeviceId(CUcontext context, uint32_t *deviceId) {
  if (context != FAKE_CTX || !deviceId) return CUPTI_ERROR_INVALID_PARAMETER;
  *deviceId = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerInitialize(CUpti_Profiler_Initialize_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Initialize_Params);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiDeviceGetChipName(CUpti_Device_GetChipName_Params *p) {
  CHECK_SIZE(p, CUpti_Device_GetChipName_Params);
  if (p->deviceIndex != 0) return CUPTI_ERROR_INVALID_DEVICE;
  p->pChipName = "GH100";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingEnable(CUpti_PmSampling_Enable_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_Enable_Params);
  long rc = env_long("FAKE_CUPTI_PM_ENABLE_RC", 0);
  if (rc != 0) return (CUptiResult)rc;
  if (p->deviceIndex != 0) return CUPTI_ERROR_INVALID_DEVICE;
  p->pPmSamplingObject = FAKE_SAMPLER;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingGetCounterAvailability(CUpti_PmSampling_GetCounterAvailability_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_GetCounterAvailability_Params);
  if (!p->pCounterAvailabilityImage) {
    p->counterAvailabilityImageSize = 64;
    return CUPTI_SUCCESS;
  }
  if (p->counterAvailabilityImageSize != 64) return CUPTI_ERROR_INVALID_PARAMETER;
  memset(p->pCounterAvailabilityImage, 0xa5, 64);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_Initialize_Params);
  if (!p->pChipName || strcmp(p->pChipName, "GH100") != 0) return CUPTI_ERROR_INVALID_PARAMETER;
  if (p->pCounterAvailabilityImage && p->pCounterAvailabilityImage[0] != 0xa5) abort();
  if (p->profilerType == CUPTI_PROFILER_TYPE_RANGE_PROFILER) {
    p->pHostObject = FAKE_RANGE_HOST;
    return CUPTI_SUCCESS;
  }
  if (p->profilerType != CUPTI_PROFILER_TYPE_PM_SAMPLING) return CUPTI_ERROR_INVALID_PARAMETER;
  p->pHostObject = FAKE_HOST;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_Deinitialize_Params);
  return IS_HOST(p->pHostObject) ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult cuptiProfilerHostGetBaseMetrics(CUpti_Profiler_Host_GetBaseMetrics_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_GetBaseMetrics_Params);
  if (!IS_HOST(p->pHostObject)) return CUPTI_ERROR_INVALID_PARAMETER;
  if (p->metricType != CUPTI_METRIC_TYPE_COUNTER) {
    p->numMetrics = 0;
    return CUPTI_SUCCESS;
  }
  if (p->pHostObject == FAKE_RANGE_HOST) {
    p->ppMetricNames = (const char **)RANGE_BASE_METRICS;
    p->numMetrics = sizeof RANGE_BASE_METRICS / sizeof RANGE_BASE_METRICS[0];
    return CUPTI_SUCCESS;
  }
  p->ppMetricNames = (const char **)BASE_METRICS;
  p->numMetrics = 4;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_ConfigAddMetrics_Params);
  if (!IS_HOST(p->pHostObject) || p->numMetrics == 0) return CUPTI_ERROR_INVALID_PARAMETER;
  for (size_t m = 0; m < p->numMetrics && p->pHostObject == FAKE_RANGE_HOST; m++)
    if (strstr(p->ppMetricNames[m], "_sparsity_")) return CUPTI_ERROR_INVALID_PARAMETER;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_GetConfigImageSize_Params);
  p->configImageSize = 32;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_GetConfigImage_Params);
  if (p->configImageSize != 32 || !p->pConfigImage) return CUPTI_ERROR_INVALID_PARAMETER;
  memset(p->pConfigImage, 0x3c, 32);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingSetConfig(CUpti_PmSampling_SetConfig_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_SetConfig_Params);
  if (p->pPmSamplingObject != FAKE_SAMPLER || p->configSize != 32 || !p->pConfig ||
      p->pConfig[0] != 0x3c || p->hardwareBufferSize == 0)
    return CUPTI_ERROR_INVALID_PARAMETER;
  long want = env_long("FAKE_CUPTI_PM_INTERVAL", 0);
  if (want != 0 && p->samplingInterval != (uint64_t)want) {
    fprintf(stderr, "fake_cupti: sampling interval %llu, expected %ld\n",
            (unsigned long long)p->samplingInterval, want);
    abort();
  }
  if (p->triggerMode != CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL) abort();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingGetCounterDataSize(CUpti_PmSampling_GetCounterDataSize_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_GetCounterDataSize_Params);
  if (p->pPmSamplingObject != FAKE_SAMPLER || p->numMetrics != 4 || p->maxSamples == 0)
    return CUPTI_ERROR_INVALID_PARAMETER;
  p->counterDataSize = 4096;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingCounterDataImageInitialize(
    CUpti_PmSampling_CounterDataImage_Initialize_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_CounterDataImage_Initialize_Params);
  if (p->counterDataSize != 4096 || !p->pCounterData) return CUPTI_ERROR_INVALID_PARAMETER;
  g_pm_completed = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingStart(CUpti_PmSampling_Start_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_Start_Params);
  g_pm_base = now_ns();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingStop(CUpti_PmSampling_Stop_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_Stop_Params);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingDisable(CUpti_PmSampling_Disable_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_Disable_Params);
  return p->pPmSamplingObject == FAKE_SAMPLER ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult cuptiPmSamplingDecodeData(CUpti_PmSampling_DecodeData_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_DecodeData_Params);
  if (p->counterDataImageSize != 4096) return CUPTI_ERROR_INVALID_PARAMETER;
  p->decodeStopReason = CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
  p->overflow = 0;
  if (!g_pm_decoded) {
    g_pm_decoded = 1;
    g_pm_completed = (size_t)env_long("FAKE_CUPTI_PM_SAMPLES", 3);
    p->overflow = env_long("FAKE_CUPTI_PM_OVERFLOW", 0) ? 1 : 0;
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingGetCounterDataInfo(CUpti_PmSampling_GetCounterDataInfo_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_GetCounterDataInfo_Params);
  p->numTotalSamples = 64;
  p->numPopulatedSamples = g_pm_completed;
  p->numCompletedSamples = g_pm_completed;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiPmSamplingCounterDataGetSampleInfo(
    CUpti_PmSampling_CounterData_GetSampleInfo_Params *p) {
  CHECK_SIZE(p, CUpti_PmSampling_CounterData_GetSampleInfo_Params);
  if (p->sampleIndex >= g_pm_completed) return CUPTI_ERROR_INVALID_PARAMETER;
  p->startTimestamp = g_pm_base + p->sampleIndex * 1000;
  p->endTimestamp = p->startTimestamp + 1000;
  return CUPTI_SUCCESS;
}

/* ---- range profiler ---- */

static CUpti_RangeProfiler_Object *const FAKE_RANGER =
    (CUpti_RangeProfiler_Object *)(uintptr_t)0x5200;
static int g_range_started;
static size_t g_ranges_since_start;
static size_t g_ranges_decoded;
static uint8_t *g_range_image;

static void play_launches(long n) {
  long failed = env_long("FAKE_CUPTI_FAILED_LAUNCH", 0);
  for (long i = 0; i < n; i++) {
    int err = 1; /* cudaErrorInvalidValue */
    CUpti_CallbackData d;
    memset(&d, 0, sizeof d);
    d.functionName = "cudaLaunchKernel";
    d.context = FAKE_CTX;
    d.contextUid = 1;
    d.correlationId = (uint32_t)(i + 1);
    d.callbackSite = CUPTI_API_ENTER;
    g_callback(g_userdata, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
               &d);
    if (i + 1 == failed) {
      d.functionReturnValue = &err; /* the launch failed: no kernel, no range */
    } else if (g_range_started) {
      g_ranges_since_start++;
    }
    d.callbackSite = CUPTI_API_EXIT;
    g_callback(g_userdata, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
               &d);
  }
}

CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_GetNumOfPasses_Params);
  if (p->configImageSize != 32 || !p->pConfigImage) return CUPTI_ERROR_INVALID_PARAMETER;
  p->numOfPasses = 2;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerEnable(CUpti_RangeProfiler_Enable_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_Enable_Params);
  long rc = env_long("FAKE_CUPTI_RANGE_ENABLE_RC", 0);
  if (rc != 0) return (CUptiResult)rc;
  if (p->ctx != FAKE_CTX) return CUPTI_ERROR_INVALID_CONTEXT;
  p->pRangeProfilerObject = FAKE_RANGER;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerDisable(CUpti_RangeProfiler_Disable_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_Disable_Params);
  return p->pRangeProfilerObject == FAKE_RANGER ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult cuptiRangeProfilerGetCounterDataSize(CUpti_RangeProfiler_GetCounterDataSize_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_GetCounterDataSize_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER || p->numMetrics != 10 || p->maxNumOfRanges == 0 ||
      p->maxNumRangeTreeNodes < p->maxNumOfRanges)
    return CUPTI_ERROR_INVALID_PARAMETER;
  p->counterDataSize = 64;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerCounterDataImageInitialize(
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER || p->counterDataSize != 64 || !p->pCounterData)
    return CUPTI_ERROR_INVALID_PARAMETER;
  memset(p->pCounterData, 0, 64);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerSetConfig(CUpti_RangeProfiler_SetConfig_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_SetConfig_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER || p->configSize != 32 || !p->pConfig ||
      p->counterDataImageSize != 64 || !p->pCounterDataImage || p->range != CUPTI_AutoRange ||
      p->replayMode != CUPTI_KernelReplay || p->numNestingLevels != 1 || p->maxRangesPerPass == 0) {
    fprintf(stderr, "fake_cupti: cuptiRangeProfilerSetConfig: unexpected parameters\n");
    abort();
  }
  g_range_image = p->pCounterDataImage;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerStart(CUpti_RangeProfiler_Start_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_Start_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER) return CUPTI_ERROR_INVALID_PARAMETER;
  g_range_started = 1;
  g_ranges_since_start = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerStop(CUpti_RangeProfiler_Stop_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_Stop_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER) return CUPTI_ERROR_INVALID_PARAMETER;
  g_range_started = 0;
  p->passIndex = 0;
  p->targetNestingLevel = 1;
  p->isAllPassSubmitted = 1;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerDecodeData(CUpti_RangeProfiler_DecodeData_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_DecodeData_Params);
  if (p->pRangeProfilerObject != FAKE_RANGER) return CUPTI_ERROR_INVALID_PARAMETER;
  g_ranges_decoded = g_ranges_since_start;
  p->numOfRangeDropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiRangeProfilerGetCounterDataInfo(CUpti_RangeProfiler_GetCounterDataInfo_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_GetCounterDataInfo_Params);
  if (p->pCounterDataImage != g_range_image || p->counterDataImageSize != 64)
    return CUPTI_ERROR_INVALID_PARAMETER;
  p->numTotalRanges = g_ranges_decoded;
  return CUPTI_SUCCESS;
}

/* Present (the collector checks the whole API is there) but never called by it. */
CUptiResult cuptiRangeProfilerCounterDataGetRangeInfo(
    CUpti_RangeProfiler_CounterData_GetRangeInfo_Params *p) {
  CHECK_SIZE(p, CUpti_RangeProfiler_CounterData_GetRangeInfo_Params);
  return CUPTI_ERROR_NOT_SUPPORTED;
}

static CUptiResult evaluate_ranges(CUpti_Profiler_Host_EvaluateToGpuValues_Params *p) {
  if (p->rangeIndex >= g_ranges_decoded || !p->pMetricValues ||
      p->pCounterDataImage != g_range_image)
    return CUPTI_ERROR_INVALID_PARAMETER;
  double r = (double)(p->rangeIndex + 1);
  for (size_t m = 0; m < p->numMetrics; m++) {
    const char *n = p->ppMetricNames[m];
    double v = -7.0;
    for (size_t k = 0; k < 9; k++) {
      size_t len = strlen(RANGE_BASE_METRICS[k]);
      if (strncmp(n, RANGE_BASE_METRICS[k], len) == 0 && strcmp(n + len, ".sum") == 0)
        v = (double)(k + 1) * r;
    }
    if (strcmp(n, "sm__ops_path_tensor_src_fp16_dst_fp32.sum") == 0) v = 100.0 * r;
    p->pMetricValues[m] = v;
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiProfilerHostEvaluateToGpuValues(
    CUpti_Profiler_Host_EvaluateToGpuValues_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_EvaluateToGpuValues_Params);
  if (p->pHostObject == FAKE_RANGE_HOST) return evaluate_ranges(p);
  if (p->pHostObject != FAKE_HOST || p->rangeIndex >= g_pm_completed || !p->pMetricValues)
    return CUPTI_ERROR_INVALID_PARAMETER;
  for (size_t m = 0; m < p->numMetrics; m++) {
    const char *n = p->ppMetricNames[m];
    double v = -7.0;
    if (strcmp(n, "sm__cycles_active.sum") == 0) v = 500.0 * (double)(p->rangeIndex + 1);
    if (strcmp(n, "sm__cycles_elapsed.max") == 0) v = 1000.0;
    if (strcmp(n, "dram__bytes_read.sum") == 0) v = 4096.0;
    if (strcmp(n, "dram__bytes_write.sum") == 0) v = p->rangeIndex == 2 ? -1.0 : 2048.0;
    p->pMetricValues[m] = v;
  }
  return CUPTI_SUCCESS;
}

/* Present (the collector checks the whole API is there) but never called by it. */
CUptiResult cuptiProfilerHostGetMetricProperties(
    CUpti_Profiler_Host_GetMetricProperties_Params *p) {
  CHECK_SIZE(p, CUpti_Profiler_Host_GetMetricProperties_Params);
  return CUPTI_ERROR_NOT_SUPPORTED;
}
