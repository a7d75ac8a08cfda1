// policy/cpu_threads.h: sets up CPU threading for libtorch on a small host.
//
// Contract
// - configure_cpu_threads(n) sets torch's intra-op threads to n (n <= 0:
//   the number of online CPUs) and, when the process has OpenBLAS loaded
//   (Debian's libtorch calls it for matmuls), makes OpenBLAS single-threaded
//   through openblas_set_num_threads, found at run time with dlsym, so its
//   own threads do not fight torch's (2-3x slower otherwise on 2 cores,
//   docs/policy.md). Returns the torch thread count it set. Nothing fails:
//   without OpenBLAS only the torch part is done.
// - Call it once at start-up from the main thread, before any torch work.
#pragma once

namespace policy {

int configure_cpu_threads(int threads);

// Whether openblas_set_num_threads was found by the last configure call.
bool openblas_configured();

}  // namespace policy
