// The kernel suite of scripts/gpu-flops.sh (issue 17 item 3): kernels whose floating-point
// arithmetic is known exactly from their launch shape, so that `gpumeter record --flops`
// can be held against it.
//
//   flops CLASS      CLASS: fp64, fp32, fp16, tensor, or all (each of them in turn)
//
// Per launch it prints one line, `launch kernel=NAME grid=G block=T iters=N m=M n=N k=K`, from
// which scripts/gpu-flops/table.py computes what the kernel performs:
//   fma_fp64: each of G*T threads runs N dependent __fma_rn (one DFMA): 2*G*T*N fp64 FLOPs;
//   fma_fp32: the same with __fmaf_rn (one FFMA): 2*G*T*N fp32 FLOPs;
//   fma_fp16: the same with __hfma on scalar __half (one HFMA per iteration, one lane): 2*G*T*N
//             fp16 FLOPs. Packed __half2 (__hfma2) is deliberately NOT used: one HFMA2
//             instruction performs two FMAs but the SASS counter counts instructions per thread,
//             so packed half arithmetic would meter half its FLOPs (documented in
//             docs/COLLECTION.md);
//   gemm_wmma: C = A*B, A M×K and B K×N in fp16, C fp32, through nvcuda::wmma 16×16×16 tiles,
//             one warp per 16×16 tile of C: 2*M*N*K tensor FLOPs (M*N*K fused multiply-adds),
//             no other floating-point instruction.
// What nvcc 13.5 makes of it (cuobjdump -sass, sm_80 and sm_90; gpu-flops.sh keeps the dump):
// one DFMA / FFMA per iteration; scalar __hfma is an HFMA2 with one lane (`.H0_H0`: SASS has no
// scalar HFMA); the GEMM is HMMA.16816.F32 only. For sm_80 the compiler also materialises a
// constant with `HFMA2.MMA R, -RZ, RZ, ...` in fma_fp32 (a move on the FMA pipe, once per
// thread): if the hfma counter counts it, flops_fp16 of the fp32 class is 2 x threads, not 0,
// and the check says FAIL: that is a finding about the counter, not about this suite.
// Nothing else does floating-point arithmetic on the device: inputs are made on the host,
// indices are integers, results are only stored. Exit status 0, or 1 on a CUDA error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "flops: %s: %s\n", #x, cudaGetErrorString(e_));            \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

static long env_long(const char *name, long dflt) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : dflt;
}

__global__ void fma_fp64(double *x, const double *b, const double *c, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  double a = x[i], bb = b[i], cc = c[i];
  for (int k = 0; k < iters; k++) a = __fma_rn(a, bb, cc);
  x[i] = a;
}

__global__ void fma_fp32(float *x, const float *b, const float *c, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a = x[i], bb = b[i], cc = c[i];
  for (int k = 0; k < iters; k++) a = __fmaf_rn(a, bb, cc);
  x[i] = a;
}

__global__ void fma_fp16(__half *x, const __half *b, const __half *c, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half a = x[i], bb = b[i], cc = c[i];
  for (int k = 0; k < iters; k++) a = __hfma(a, bb, cc);
  x[i] = a;
}

// One warp (block) per 16×16 tile of C, block (x, y) the tile of column x, row y (a 2-D grid:
// no integer division, which the compiler would do with MUFU.RCP and conversions); A row-major
// M×K, B column-major K×N, C row-major M×N.
__global__ void gemm_wmma(const __half *a, const __half *b, float *c, int n, int k) {
  using namespace nvcuda;
  int tm = blockIdx.y, tn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::load_matrix_sync(fa, a + tm * 16 * k + kk, k);
    wmma::load_matrix_sync(fb, b + tn * 16 * k + kk, k);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c + tm * 16 * n + tn * 16, acc, n, wmma::mem_row_major);
}

template <typename T>
static T *device_copy(const std::vector<T> &h) {
  T *d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static void run_fma(const char *which) {
  const int grid = (int)env_long("FLOPS_GRID", 264), block = (int)env_long("FLOPS_BLOCK", 256);
  const int iters = (int)env_long("FLOPS_ITERS", 4096);
  const size_t n = (size_t)grid * (size_t)block;
  if (std::strcmp(which, "fp64") == 0) {
    double *x = device_copy(std::vector<double>(n, 1.0));
    double *b = device_copy(std::vector<double>(n, 0.999));
    double *c = device_copy(std::vector<double>(n, 0.001));
    fma_fp64<<<grid, block>>>(x, b, c, iters);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaFree(x), cudaFree(b), cudaFree(c);
    std::printf("launch kernel=fma_fp64 grid=%d block=%d iters=%d\n", grid, block, iters);
  } else if (std::strcmp(which, "fp32") == 0) {
    float *x = device_copy(std::vector<float>(n, 1.0f));
    float *b = device_copy(std::vector<float>(n, 0.999f));
    float *c = device_copy(std::vector<float>(n, 0.001f));
    fma_fp32<<<grid, block>>>(x, b, c, iters);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaFree(x), cudaFree(b), cudaFree(c);
    std::printf("launch kernel=fma_fp32 grid=%d block=%d iters=%d\n", grid, block, iters);
  } else {
    // Host-side conversions only (__float2half on the host).
    __half *x = device_copy(std::vector<__half>(n, __float2half(1.0f)));
    __half *b = device_copy(std::vector<__half>(n, __float2half(0.999f)));
    __half *c = device_copy(std::vector<__half>(n, __float2half(0.001f)));
    fma_fp16<<<grid, block>>>(x, b, c, iters);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaFree(x), cudaFree(b), cudaFree(c);
    std::printf("launch kernel=fma_fp16 grid=%d block=%d iters=%d\n", grid, block, iters);
  }
}

static void run_gemm() {
  const int m = (int)env_long("FLOPS_M", 1024), n = (int)env_long("FLOPS_N", 1024),
            k = (int)env_long("FLOPS_K", 1024);
  if (m % 16 || n % 16 || k % 16) {
    std::fprintf(stderr, "flops: FLOPS_M, FLOPS_N, FLOPS_K must be multiples of 16\n");
    std::exit(1);
  }
  __half *a = device_copy(std::vector<__half>((size_t)m * k, __float2half(0.5f)));
  __half *b = device_copy(std::vector<__half>((size_t)k * n, __float2half(0.25f)));
  float *c = nullptr;
  CHECK(cudaMalloc(&c, (size_t)m * n * sizeof(float)));
  const dim3 tiles(n / 16, m / 16);
  const int grid = (m / 16) * (n / 16), block = 32;
  gemm_wmma<<<tiles, block>>>(a, b, c, n, k);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  cudaFree(a), cudaFree(b), cudaFree(c);
  std::printf("launch kernel=gemm_wmma grid=%d block=%d m=%d n=%d k=%d\n", grid, block, m, n, k);
}

int main(int argc, char **argv) {
  const char *cls = argc > 1 ? argv[1] : "all";
  const char *all[] = {"fp64", "fp32", "fp16", "tensor"};
  for (const char *c : all) {
    if (std::strcmp(cls, "all") != 0 && std::strcmp(cls, c) != 0) continue;
    if (std::strcmp(c, "tensor") == 0)
      run_gemm();
    else
      run_fma(c);
  }
  std::fflush(stdout);
  return 0;
}
