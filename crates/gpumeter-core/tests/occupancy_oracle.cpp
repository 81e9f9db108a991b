// Oracle for tests/occupancy.rs: CUDA's header-only occupancy calculator (cuda_occupancy.h).
// stdin lines: "major minor block_threads regs smem_bytes optin(0|1)"
// stdout lines: activeBlocksPerMultiprocessor, or -1 when the calculator reports an error.
// Device properties: the Programming Guide's "Technical Specifications per Compute Capability"
// values (and cudaDeviceProp of real parts: H100 233472/232448, A100 167936/166912 bytes).
#include <cstdio>
#include <cuda_occupancy.h>

static bool props_for(int major, int minor, cudaOccDeviceProp *p) {
    int warps = 0;
    size_t smem_kib = 0, optin_kib = 0;
    switch (major * 10 + minor) {
        case 70: case 72: warps = 64; smem_kib = 96;  optin_kib = 96;  break;
        case 75:          warps = 32; smem_kib = 64;  optin_kib = 64;  break;
        case 80: case 87: warps = (minor == 0 ? 64 : 48); smem_kib = 164; optin_kib = 163; break;
        case 86: case 89: warps = 48; smem_kib = 100; optin_kib = 99;  break;
        case 90: case 100: case 103: warps = 64; smem_kib = 228; optin_kib = 227; break;
        case 110:         warps = 48; smem_kib = 228; optin_kib = 227; break;
        case 120: case 121: warps = 48; smem_kib = 100; optin_kib = 99; break;
        default: return false;
    }
    p->computeMajor = major;
    p->computeMinor = minor;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsPerMultiprocessor = warps * 32;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerMultiprocessor = smem_kib * 1024;
    p->numSms = 100;
    p->sharedMemPerBlockOptin = optin_kib * 1024;
    p->reservedSharedMemPerBlock = major >= 8 ? 1024 : 0;
    return true;
}

int main() {
    int major, minor, block, regs, optin;
    unsigned long long smem;
    while (std::scanf("%d %d %d %d %llu %d", &major, &minor, &block, &regs, &smem, &optin) == 6) {
        cudaOccDeviceProp prop;
        if (!props_for(major, minor, &prop)) { std::printf("-2\n"); continue; }
        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = 1 << 30;
        attr.numRegs = regs;
        attr.sharedSizeBytes = 0;
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        attr.numBlockBarriers = 1;
        if (optin) {
            attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
            attr.maxDynamicSharedSizeBytes = prop.sharedMemPerBlockOptin;
        } else {
            attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT;
            attr.maxDynamicSharedSizeBytes = 0;
        }
        cudaOccDeviceState state;
        cudaOccResult result;
        cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&result, &prop, &attr, &state, block, (size_t)smem);
        std::printf("%d\n", err == CUDA_OCC_SUCCESS ? result.activeBlocksPerMultiprocessor : -1);
    }
    return 0;
}
