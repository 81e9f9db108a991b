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
 * Build: cc -shared -fPIC -I"$CUPTI12_INCLUDE" -I"$CUDA12_INCLUDE" -o libcupti.so.12
 *        fake_cupti.c -lpthread
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#if CUPTI_API_VERSION != 26
#error "fake_cupti.c is built against the CUPTI 12.8 headers (CUPTI_API_VERSION 26)"
#endif

static CUpti_BuffersCallbackRequestFunc g_request;
static CUpti_BuffersCallbackCompleteFunc g_complete;
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

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                           void *userdata) {
  (void)callback;
  (void)userdata;
  long rc = env_long("FAKE_CUPTI_SUBSCRIBE_RC", 0);
  if (rc != 0) return (CUptiResult)rc;
  *subscriber = (CUpti_SubscriberHandle)(uintptr_t)0x5a0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  (void)subscriber;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  g_request = request;
  g_complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  (void)kind;
  return (CUptiResult)env_long("FAKE_CUPTI_ENABLE_RC", 0);
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
  *dropped = g_dropped_reported ? 0 : (size_t)env_long("FAKE_CUPTI_DROPPED", 0);
  g_dropped_reported = 1;
  return CUPTI_SUCCESS;
}

/* One buffer holding `n` kernel records (and a DEVICE record first when `with_device`). */
struct job {
  uint8_t *buf;
  size_t size;
  size_t valid;
};

static struct job make_buffer(long n, int with_device, uint64_t *t) {
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
  if (with_device) {
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
    memcpy(j.buf + j.valid, &d, sizeof d);
    j.valid += sizeof d;
  }
  for (long i = 0; i < n; i++) {
    CUpti_ActivityKernel9 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = *t;
    k.end = *t + 2000;
    *t += 3000;
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = 7;
    k.correlationId = g_next_correlation++;
    k.gridX = 264;
    k.gridY = 1;
    k.gridZ = 1;
    k.blockX = 256;
    k.blockY = 1;
    k.blockZ = 1;
    k.registersPerThread = 32;
    k.name = KERNEL_NAMES[k.correlationId % 2];
    if (j.valid + sizeof k > j.size) break;
    memcpy(j.buf + j.valid, &k, sizeof k);
    j.valid += sizeof k;
  }
  return j;
}

static void *complete_on_worker(void *arg) {
  struct job *j = arg;
  /* Garbage context and stream, as seen from CUPTI 13.0: must be ignored. */
  g_complete((CUcontext)(uintptr_t)0xdead0, 2248755008u, j->buf, j->size, j->valid);
  return NULL;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  static int flushed;
  if (flushed || !g_request || !g_complete) return CUPTI_SUCCESS;
  flushed = 1;
  long n = env_long("FAKE_CUPTI_KERNELS", 10);
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
