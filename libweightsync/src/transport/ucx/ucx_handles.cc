// UCX context and worker creation.
#include "transport/ucx/ucx_handles.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

namespace weightsync::detail {

std::string ucx_error(const std::string& what, ucs_status_t status) {
  return what + ": " + ucs_status_string(status);
}

bool ucx_insecure_override() {
  const char* allow = std::getenv("WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA");
  return allow != nullptr && std::string(allow) == "1";
}

namespace {
// Memory domain components (UCX 1.13 names) whose one-sided access the
// hardware or kernel bounds to memory registered or allocated for it: ib (MR
// keys), posix and sysv (only segments UCX allocated are mapped), knem
// (registered regions), self (reachable from the same worker only), and the
// GPU memory domains. Everything else counts as unbounded.
bool is_bounded_md_component(const std::string& component) {
  static const char* const kBounded[] = {"self",     "posix",    "sysv",     "ib",
                                         "knem",     "cuda_cpy", "cuda_ipc", "gdr_copy",
                                         "rocm_cpy", "rocm_ipc", "rocm_gdr"};
  for (const char* name : kBounded) {
    if (component == name) return true;
  }
  return false;
}

// The words of one line of ucp_context_print_info ("#", "md", "1", ":", ...).
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}
}  // namespace

std::string ucx_unbounded_resources(ucp_context_h context) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return "cannot list UCX's resources (open_memstream failed)";
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  const std::string info(text, size);
  std::free(text);
  // "#  md 1  :  component 3  posix" and "#  resource 1  :  md 1  dev 1  flags -- posix/memory".
  std::map<std::string, std::string> md_component;
  std::vector<std::pair<std::string, std::string>> resources;  // (transport/device, md index)
  std::size_t start = 0;
  while (start < info.size()) {
    std::size_t end = info.find('\n', start);
    if (end == std::string::npos) end = info.size();
    const auto w = words(info.substr(start, end - start));
    start = end + 1;
    if (w.size() >= 7 && w[0] == "#" && w[1] == "md" && w[3] == ":" && w[4] == "component") {
      md_component[w[2]] = w[6];
    } else if (w.size() >= 6 && w[0] == "#" && w[1] == "resource" && w[3] == ":" && w[4] == "md") {
      resources.emplace_back(w.back(), w[5]);
    }
  }
  if (resources.empty()) return "UCX listed no resources (ucp_context_print_info gave none)";
  for (const auto& [resource, md] : resources) {
    auto it = md_component.find(md);
    const std::string component = it == md_component.end() ? "unknown" : it->second;
    if (!is_bounded_md_component(component)) {
      return "UCX selected " + resource + " (memory domain " + component +
             "), whose one-sided access is not bounded to registered memory: a peer could read and write "
             "any address of this process through it";
    }
  }
  return "";
}

namespace {
// The entries of UCX_TLS; empty when unset or an exclusion list.
std::vector<std::string> ucx_tls_entries() {
  std::vector<std::string> out;
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0' || *tls == '^') return out;
  const std::string list = tls;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
bool is_ucx_shared_memory_tl(const std::string& tl) {
  return tl == "posix" || tl == "sysv" || tl == "sm" || tl == "shm" || tl == "mm";
}
}  // namespace

bool ucx_tls_is_same_host_only() {
  const auto entries = ucx_tls_entries();
  for (const std::string& tl : entries) {
    if (!is_ucx_shared_memory_tl(tl) && tl != "self" && tl != "cma" && tl != "knem" && tl != "xpmem")
      return false;
  }
  return !entries.empty();
}

Result<ucp_mem_h> ucx_register(ucp_context_h context, void* address, std::size_t length,
                               const std::string& what) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = length;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context, &params, &memh);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("registering " + what, st));
  return memh;
}

Result<UcxEndpointStack> make_ucx_stack(const char* name, UcxRole role, bool loopback_only) {
  const bool insecure = ucx_insecure_override();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("reading the UCX configuration", st));
  if (loopback_only) {
    // Network transports on the loopback device only: a publisher bound to
    // loopback must not have UCX listening on other interfaces.
    st = ucp_config_modify(config, "NET_DEVICES", "lo");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status(ErrorCode::kInvalidConfig, ucx_error("restricting UCX to the loopback device", st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  // The publisher is only ever the target of one-sided reads; without
  // UCP_FEATURE_RMA its worker has no handler for UCX's emulated get/put.
  params.features = role == UcxRole::kSubscriber ? UCP_FEATURE_RMA
                    : insecure                   ? UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP
                                                 : UCP_FEATURE_WAKEUP;
  params.name = name;
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_init", st));
  UcxEndpointStack stack;
  stack.context = UcxContext(context, UcxContextDeleter());
  if (!insecure) {
    // Before any worker exists: a worker opens the transports' listeners.
    if (const std::string why = ucx_unbounded_resources(context); !why.empty()) {
      return Status(ErrorCode::kInvalidConfig,
                    why +
                        ". Set UCX_TLS to transports whose one-sided access the hardware or kernel bounds "
                        "(rc, dc with UCX-allocated slots; see docs/transports.md), or "
                        "WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1 to let any peer read and write the "
                        "publisher's memory; the shm and tcp transports serve meanwhile");
    }
  }
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  st = ucp_worker_create(context, &wparams, &worker);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_worker_create", st));
  stack.worker.reset(worker);
  return stack;
}

}  // namespace weightsync::detail
