/* A two-rank Open MPI job for distributed_test.sh: STEPS rounds of a point-to-point exchange and
 * an all-reduce, with a sleep per round so that a checkpoint lands mid-run.
 *
 *   mpirun -np 2 mpi_job STEPS SLEEP_MS
 *
 * Round n: each rank fills a 64 KiB buffer with a pattern of (n, rank), sends it to the other
 * rank and checks the one it receives byte for byte; then the ranks all-reduce (sum) an integer
 * that depends on n and the rank, and add it to a running total. Rank 0 prints "step N TOTAL"
 * each round and at the end "final TOTAL expected EXPECTED" (the closed form of the sum), or
 * "BAD ..." at the first mismatch, and the job exits non-zero. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kWords = 16384 };

static uint32_t Pattern(long round, int rank, int i) {
  return (uint32_t)(round * 2654435761u) ^ (uint32_t)(rank * 40503u) ^ (uint32_t)i;
}

static long long Contribution(long round, int rank) { return round * round + 7LL * rank; }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 3 || size != 2) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpi_job STEPS SLEEP_MS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long steps = atol(argv[1]);
  long sleep_ms = atol(argv[2]);
  static uint32_t out[kWords], in[kWords];
  int peer = 1 - rank;
  long long total = 0;
  for (long n = 1; n <= steps; ++n) {
    for (int i = 0; i < kWords; ++i) out[i] = Pattern(n, rank, i);
    MPI_Sendrecv(out, kWords, MPI_UINT32_T, peer, (int)n, in, kWords, MPI_UINT32_T, peer, (int)n,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < kWords; ++i) {
      if (in[i] != Pattern(n, peer, i)) {
        printf("BAD rank %d round %ld word %d: %u\n", rank, n, i, in[i]);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    long long mine = Contribution(n, rank), sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    total += sum;
    if (rank == 0) {
      printf("step %ld %lld\n", n, total);
      fflush(stdout);
    }
    struct timespec pause = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
  }
  /* sum over n of (2 n^2 + 7) */
  long long expected = 2 * (steps * (steps + 1) * (2 * steps + 1) / 6) + 7 * steps;
  if (rank == 0) {
    printf("final %lld expected %lld\n", total, expected);
    fflush(stdout);
  }
  MPI_Finalize();
  return total == expected ? 0 : 1;
}
