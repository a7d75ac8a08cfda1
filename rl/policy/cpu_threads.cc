// policy/cpu_threads.cc: see cpu_threads.h.
#include "policy/cpu_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>
#include <unistd.h>

namespace policy {
namespace {

bool g_openblas = false;

}  // namespace

int configure_cpu_threads(int threads) {
  using SetThreads = void (*)(int);
  auto* set_openblas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  g_openblas = set_openblas != nullptr;
  if (set_openblas != nullptr) set_openblas(1);
  if (threads <= 0) threads = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  torch::set_num_threads(threads);
  return threads;
}

bool openblas_configured() {
  return g_openblas;
}

}  // namespace policy
