// gpumeter model-vs-hardware suite (issue 16, scripts/gpu-truth.sh; docs/METERING.md "Model
// against hardware (PM sampling)"). One program, one kernel class per run:
//
//   truth CLASS     CLASS: full | tail | tiny | single | copy | streams | green | all
//
//   full     compute-bound kernels of k x SMs blocks, one block per SM at a time (the dynamic
//            shared memory of a block is more than half an SM's): k full waves, no tail
//   tail     the same kernel with 1.5 x SMs blocks: a full wave, then a half wave while the
//            other half of the SMs idle
//   tiny     many kernels shorter than 5 us (SMs blocks, a few hundred cycles each)
//   single   one block: one SM busy, the rest idle
//   copy     a streaming copy of N bytes (default 4 GiB, far above the 50 MB L2 of an H200),
//            R times: each rep reads N and writes N bytes of DRAM; the source is never
//            initialised (its values do not matter), so the only DRAM traffic besides the
//            copies is CUDA's own set-up
//   streams  the compute kernel on 4 streams at once, each kernel with SMs / 2 blocks of the
//            small (no shared memory) configuration: the model caps their sum at the device
//   green    the compute kernel with many blocks in a green context of 16 SMs
//            (cuDevSmResourceSplitByCount + cuGreenCtxCreate, CUDA 12.4+; the program needs
//            CUDA 12.5+ to build: it finds the driver API through the runtime, not -lcuda)
//   all      every class above, in that order, in one process (the suite's recording): a
//            line per class, then an "all" line with the sums
//
// Prints one JSON line on standard output (per class): class, launches, blocks (per launch), threads (per
// block), sm_count (the device's), green_sms (the green context's, else null), bytes_each_way
// and dram_bytes_expected (copy only, else 0), wall_ns (the timed phase, CLOCK_REALTIME, after
// a warm-up: set-up excluded), phase_start_unix_ns / phase_end_unix_ns (its bounds).
// Environment: TRUTH_COPY_BYTES (N, default 4294967296), TRUTH_COPY_REPS (default 20),
// TRUTH_WAVES (k, default 4), TRUTH_TINY_LAUNCHES (default 20000), TRUTH_ROUNDS (the compute
// kernel's loop, default 2000000: about 4 ms per block on an H200). Exit status: 0 ok, 2 bad arguments, 3 a CUDA call failed.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "truth: %s: %s\n", #call, cudaGetErrorString(e_));          \
      exit(3);                                                                    \
    }                                                                             \
  } while (0)

// The driver API the green context needs, looked up through the runtime
// (cudaGetDriverEntryPointByVersion, CUDA 12.5+) rather than linked: the program needs no
// libcuda.so at link time (NVIDIA's pip wheels have none), only the driver at run time. Each
// pointer has the type of the header's declaration; the ABI asked for is the older of the
// header's and the driver's CUDA version, so it matches that declaration.
struct Driver {
  decltype(&cuGetErrorString) GetErrorString;
  decltype(&cuCtxGetCurrent) CtxGetCurrent;
  decltype(&cuCtxSetCurrent) CtxSetCurrent;
  decltype(&cuDeviceGet) DeviceGet;
  decltype(&cuDeviceGetDevResource) DeviceGetDevResource;
  decltype(&cuDevSmResourceSplitByCount) DevSmResourceSplitByCount;
  decltype(&cuDevResourceGenerateDesc) DevResourceGenerateDesc;
  decltype(&cuGreenCtxCreate) GreenCtxCreate;
  decltype(&cuCtxFromGreenCtx) CtxFromGreenCtx;
  decltype(&cuGreenCtxStreamCreate) GreenCtxStreamCreate;
  decltype(&cuStreamDestroy) StreamDestroy;
  decltype(&cuGreenCtxDestroy) GreenCtxDestroy;
};
static Driver drv;

template <typename F>
static void lookup(F &fn, const char *symbol, unsigned int version) {
  void *p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
    fprintf(stderr, "truth: driver entry point %s (CUDA %u): %s, query result %d\n", symbol,
            version, cudaGetErrorString(e), (int)q);
    exit(3);
  }
  fn = reinterpret_cast<F>(p);
}

static void load_driver() {
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  const unsigned int v = (unsigned int)(driver < CUDA_VERSION ? driver : CUDA_VERSION);
  lookup(drv.GetErrorString, "cuGetErrorString", v);
  lookup(drv.CtxGetCurrent, "cuCtxGetCurrent", v);
  lookup(drv.CtxSetCurrent, "cuCtxSetCurrent", v);
  lookup(drv.DeviceGet, "cuDeviceGet", v);
  lookup(drv.DeviceGetDevResource, "cuDeviceGetDevResource", v);
  lookup(drv.DevSmResourceSplitByCount, "cuDevSmResourceSplitByCount", v);
  lookup(drv.DevResourceGenerateDesc, "cuDevResourceGenerateDesc", v);
  lookup(drv.GreenCtxCreate, "cuGreenCtxCreate", v);
  lookup(drv.CtxFromGreenCtx, "cuCtxFromGreenCtx", v);
  lookup(drv.GreenCtxStreamCreate, "cuGreenCtxStreamCreate", v);
  lookup(drv.StreamDestroy, "cuStreamDestroy", v);
  lookup(drv.GreenCtxDestroy, "cuGreenCtxDestroy", v);
}

#define CU(call)                                                                  \
  do {                                                                            \
    CUresult e_ = (call);                                                         \
    if (e_ != CUDA_SUCCESS) {                                                     \
      const char *m_ = "?";                                                       \
      drv.GetErrorString(e_, &m_);                                                \
      fprintf(stderr, "truth: %s: %s\n", #call, m_);                              \
      exit(3);                                                                    \
    }                                                                             \
  } while (0)

// Compute-bound: a dependent FMA chain per thread, `rounds` long. The dynamic shared memory a
// launch gives it is not used: it only bounds how many blocks an SM holds at once.
extern "C" __global__ void gm_truth_spin(float *out, int rounds) {
  float v = threadIdx.x * 1e-3f;
  for (int r = 0; r < rounds; r++) v = v * 1.0000001f + 1e-7f;
  if (v == 12345.678f) out[blockIdx.x] = v;  // never true; keeps the loop
}

// Streaming copy, 16 bytes per thread per step, grid-stride: every byte of src is read once
// and every byte of dst written once per launch (full 32-byte sectors: no read for ownership).
extern "C" __global__ void gm_truth_copy(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                         size_t n16) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride)
    dst[i] = src[i];
}

static long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long env_ll(const char *name, long long dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end = nullptr;
  long long v = strtoll(s, &end, 10);
  if (*end != '\0' || v <= 0) {
    fprintf(stderr, "truth: %s=%s is not a positive integer\n", name, s);
    exit(2);
  }
  return v;
}

static const char *const CLASSES[] = {"full", "tail", "tiny", "single", "copy", "streams", "green"};

// What one class did (the JSON line's fields).
struct Run {
  long long launches = 0, blocks = 0, threads = 256, bytes_each_way = 0, dram_expected = 0;
  long long green_sms = -1, t0 = 0, t1 = 0;
};

static void print_run(const char *cls, const Run &r, int sms) {
  char green_buf[32];
  if (r.green_sms >= 0)
    snprintf(green_buf, sizeof green_buf, "%lld", r.green_sms);
  else
    snprintf(green_buf, sizeof green_buf, "null");
  printf("{\"class\":\"%s\",\"launches\":%lld,\"blocks\":%lld,\"threads\":%lld,\"sm_count\":%d,"
         "\"green_sms\":%s,\"bytes_each_way\":%lld,\"dram_bytes_expected\":%lld,"
         "\"wall_ns\":%lld,\"phase_start_unix_ns\":%lld,\"phase_end_unix_ns\":%lld}\n",
         cls, r.launches, r.blocks, r.threads, sms, green_buf, r.bytes_each_way, r.dram_expected,
         r.t1 - r.t0, r.t0, r.t1);
  fflush(stdout);
}

// Runs one class (a name of CLASSES) on device `dev`; exits on a CUDA failure.
static Run run_class(const char *cls, int dev, const cudaDeviceProp &prop, float *out) {
  const int sms = prop.multiProcessorCount;
  const int rounds = (int)env_ll("TRUTH_ROUNDS", 2000000);
  // One block per SM: more than half of an SM's shared memory per block.
  const size_t big_smem = prop.sharedMemPerMultiprocessor / 2 + 1024;
  Run r;
  long long &launches = r.launches, &blocks = r.blocks, &threads = r.threads;
  long long &bytes_each_way = r.bytes_each_way, &dram_expected = r.dram_expected;
  long long &green_sms = r.green_sms, &t0 = r.t0, &t1 = r.t1;

  if (!strcmp(cls, "full") || !strcmp(cls, "tail") || !strcmp(cls, "single")) {
    const long long waves = env_ll("TRUTH_WAVES", 4);
    blocks = !strcmp(cls, "full") ? waves * sms : !strcmp(cls, "tail") ? sms + sms / 2 : 1;
    const int reps = 5;
    t0 = now_ns();
    for (int i = 0; i < reps; i++) {
      gm_truth_spin<<<(unsigned)blocks, (unsigned)threads, big_smem>>>(out, rounds);
      launches++;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    t1 = now_ns();
  } else if (!strcmp(cls, "tiny")) {
    const long long n = env_ll("TRUTH_TINY_LAUNCHES", 20000);
    blocks = sms;
    threads = 128;
    t0 = now_ns();
    for (long long i = 0; i < n; i++) {
      gm_truth_spin<<<(unsigned)blocks, (unsigned)threads>>>(out, 200);
      launches++;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    t1 = now_ns();
  } else if (!strcmp(cls, "copy")) {
    bytes_each_way = env_ll("TRUTH_COPY_BYTES", 4294967296LL) / 16 * 16;
    const long long reps = env_ll("TRUTH_COPY_REPS", 20);
    void *src, *dst;
    CK(cudaMalloc(&src, (size_t)bytes_each_way));
    CK(cudaMalloc(&dst, (size_t)bytes_each_way));
    blocks = (long long)sms * 8;
    threads = 256;
    CK(cudaDeviceSynchronize());
    t0 = now_ns();
    for (long long i = 0; i < reps; i++) {
      gm_truth_copy<<<(unsigned)blocks, (unsigned)threads>>>(
          (const uint4 *)src, (uint4 *)dst, (size_t)bytes_each_way / 16);
      launches++;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    t1 = now_ns();
    dram_expected = 2 * bytes_each_way * reps;
    CK(cudaFree(src));
    CK(cudaFree(dst));
  } else if (!strcmp(cls, "streams")) {
    const int nstreams = 4, reps = 20;
    cudaStream_t s[nstreams];
    for (int i = 0; i < nstreams; i++) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    blocks = sms / 2 > 0 ? sms / 2 : 1;
    t0 = now_ns();
    for (int r = 0; r < reps; r++)
      for (int i = 0; i < nstreams; i++) {
        gm_truth_spin<<<(unsigned)blocks, (unsigned)threads, 0, s[i]>>>(out, rounds);
        launches++;
      }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    t1 = now_ns();
    for (int i = 0; i < nstreams; i++) CK(cudaStreamDestroy(s[i]));
  } else if (!strcmp(cls, "green")) {
    load_driver();
    CUcontext primary;
    CU(drv.CtxGetCurrent(&primary));
    CUdevice cudev;
    CU(drv.DeviceGet(&cudev, dev));
    CUdevResource sm, rest, group[1];
    unsigned int groups = 1;
    CU(drv.DeviceGetDevResource(cudev, &sm, CU_DEV_RESOURCE_TYPE_SM));
    CU(drv.DevSmResourceSplitByCount(group, &groups, &sm, &rest, 0, 16));
    CUdevResourceDesc desc;
    CU(drv.DevResourceGenerateDesc(&desc, group, 1));
    CUgreenCtx green;
    CU(drv.GreenCtxCreate(&green, desc, cudev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext ctx;
    CU(drv.CtxFromGreenCtx(&ctx, green));
    CU(drv.CtxSetCurrent(ctx));
    CUstream stream;
    CU(drv.GreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
    green_sms = group[0].sm.smCount;
    // Two rounds of 8 resident blocks per SM (256 threads each): the green context's SMs stay
    // full.
    blocks = 16LL * green_sms;
    const int reps = 5;
    t0 = now_ns();
    for (int i = 0; i < reps; i++) {
      gm_truth_spin<<<(unsigned)blocks, (unsigned)threads, 0, (cudaStream_t)stream>>>(out, rounds);
      launches++;
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize((cudaStream_t)stream));
    t1 = now_ns();
    CU(drv.StreamDestroy(stream));
    CU(drv.CtxSetCurrent(primary));
    CU(drv.GreenCtxDestroy(green));
  }
  return r;
}

int main(int argc, char **argv) {
  const int nclasses = (int)(sizeof CLASSES / sizeof CLASSES[0]);
  bool known = argc == 2 && !strcmp(argv[1], "all");
  for (int i = 0; argc == 2 && i < nclasses; i++) known = known || !strcmp(argv[1], CLASSES[i]);
  if (!known) {
    fprintf(stderr, "usage: truth full|tail|tiny|single|copy|streams|green|all\n");
    return 2;
  }
  const char *cls = argv[1];
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  float *out;
  CK(cudaMalloc(&out, 1 << 20));
  CK(cudaFuncSetAttribute(gm_truth_spin, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          (int)(prop.sharedMemPerMultiprocessor / 2 + 1024)));
  // Warm-up (module load, first launch), not timed.
  gm_truth_spin<<<1, 32>>>(out, 10);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (strcmp(cls, "all")) {
    print_run(cls, run_class(cls, dev, prop, out), prop.multiProcessorCount);
  } else {
    // Every class in one process (the suite's recording for examples/data/): a line per
    // class, then the sums in an "all" line (blocks and threads: the largest).
    Run sum;
    sum.threads = 0;
    for (int i = 0; i < nclasses; i++) {
      Run r = run_class(CLASSES[i], dev, prop, out);
      print_run(CLASSES[i], r, prop.multiProcessorCount);
      sum.launches += r.launches;
      sum.blocks = r.blocks > sum.blocks ? r.blocks : sum.blocks;
      sum.threads = r.threads > sum.threads ? r.threads : sum.threads;
      sum.bytes_each_way += r.bytes_each_way;
      sum.dram_expected += r.dram_expected;
      if (i == 0) sum.t0 = r.t0;
      sum.t1 = r.t1;
    }
    print_run("all", sum, prop.multiProcessorCount);
  }
  CK(cudaFree(out));
  return 0;
}
