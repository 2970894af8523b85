// Holds GIB of GPU memory filled with a pattern that depends on a step counter, and every half
// second verifies it and advances the step. Prints "step N ok" (or "MISMATCH" and exits 1).
// Used by scripts/gpu_check_ckpt.sh to check GPU state across checkpoint -> kill -> restore.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

__global__ void Fill(unsigned int* data, size_t n, unsigned int step) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = static_cast<unsigned int>(i) * 2654435761u + step;
  }
}

__global__ void Check(const unsigned int* data, size_t n, unsigned int step, int* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (data[i] != static_cast<unsigned int>(i) * 2654435761u + step) atomicAdd(bad, 1);
  }
}

int main(int argc, char** argv) {
  const double gib = argc > 1 ? atof(argv[1]) : 4;
  const size_t n = static_cast<size_t>(gib * (1ull << 30)) / sizeof(unsigned int);
  unsigned int* data = nullptr;
  int* bad = nullptr;
  if (cudaMalloc(&data, n * sizeof(unsigned int)) != cudaSuccess ||
      cudaMallocManaged(&bad, sizeof(int)) != cudaSuccess) {
    printf("cannot allocate %.1f GiB\n", gib);
    return 1;
  }
  for (unsigned int step = 0;; ++step) {
    Fill<<<1024, 256>>>(data, n, step);
    *bad = 0;
    Check<<<1024, 256>>>(data, n, step, bad);
    if (cudaDeviceSynchronize() != cudaSuccess || *bad != 0) {
      printf("MISMATCH at step %u (%d words)\n", step, *bad);
      return 1;
    }
    printf("step %u ok\n", step);
    fflush(stdout);
    usleep(500 * 1000);
  }
}
