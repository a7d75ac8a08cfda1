/* weightsync-mpi-bcast: the MPI_Bcast baseline of `weightsync-bench fanout`.
 * Broadcasts BYTES from rank 0 to every rank REPS times (after one warm-up),
 * each after an MPI_Barrier, and prints on rank 0, per measured repetition:
 *   BCAST <rep> <bytes> <seconds> <wtime_seconds>
 * seconds: the last rank's end of MPI_Bcast minus rank 0's start of it, both
 * CLOCK_MONOTONIC (the ranks of the fanout bench share one kernel, so their
 * clocks are one clock); wtime_seconds: the max over ranks of each rank's own
 * MPI_Wtime() around its MPI_Bcast (after the barrier). Every rank checks the
 * repetition's marks at both ends of the buffer, and aborts if they are wrong.
 * Usage: weightsync-mpi-bcast BYTES REPS */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "usage: weightsync-mpi-bcast BYTES REPS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const long long bytes = atoll(argv[1]);
  const int reps = atoi(argv[2]);
  if (bytes < 16 || bytes > (1LL << 40) || reps < 1 || reps > 1000) MPI_Abort(MPI_COMM_WORLD, 2);
  unsigned char* buffer = malloc((size_t)bytes);
  if (!buffer) MPI_Abort(MPI_COMM_WORLD, 3);
  memset(buffer, 0x5a, (size_t)bytes); /* fault it in */
  if (rank == 0) {
    printf("RANKS %d\n", size);
    fflush(stdout);
  }
  for (int rep = 0; rep <= reps; ++rep) { /* rep 0: the warm-up */
    const uint64_t head = 0x6d70690000000000ull + (uint64_t)rep, tail = ~head;
    if (rank == 0) {
      memcpy(buffer, &head, 8);
      memcpy(buffer + bytes - 8, &tail, 8);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double w0 = MPI_Wtime();
    int64_t start = monotonic_ns();
    /* MPI_Bcast takes an int count: move it in pieces of at most 1 GiB. */
    for (long long off = 0; off < bytes; off += (1LL << 30)) {
      const long long n = bytes - off < (1LL << 30) ? bytes - off : (1LL << 30);
      MPI_Bcast(buffer + off, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    int64_t end = monotonic_ns();
    double wtime = MPI_Wtime() - w0;
    uint64_t got_head = 0, got_tail = 0;
    memcpy(&got_head, buffer, 8);
    memcpy(&got_tail, buffer + bytes - 8, 8);
    if (got_head != head || got_tail != tail) {
      fprintf(stderr, "weightsync-mpi-bcast: rank %d: repetition %d arrived without its marks\n", rank, rep);
      MPI_Abort(MPI_COMM_WORLD, 4);
    }
    int64_t last_end = 0, root_start = start;
    double max_wtime = 0;
    MPI_Bcast(&root_start, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Reduce(&end, &last_end, 1, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wtime, &max_wtime, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && rep > 0) {
      printf("BCAST %d %lld %.6f %.6f\n", rep, bytes, (double)(last_end - root_start) * 1e-9, max_wtime);
      fflush(stdout);
    }
  }
  free(buffer);
  MPI_Finalize();
  return 0;
}
