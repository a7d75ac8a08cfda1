// UCX context and worker creation.
#include "transport/ucx/ucx_handles.h"

#include <cstdlib>
#include <vector>

namespace weightsync::detail {

std::string ucx_error(const std::string& what, ucs_status_t status) {
  return what + ": " + ucs_status_string(status);
}

std::string ucx_emulated_rma_risk() {
  const char* allow = std::getenv("WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA");
  if (allow != nullptr && std::string(allow) == "1") return "";
  const char* tls = std::getenv("UCX_TLS");
  const std::string why =
      " would let UCX emulate one-sided reads over its tcp transport, and UCX 1.13's emulation aborts the "
      "publisher when a subscriber dies mid-read. Set UCX_TLS to transports with native RMA (e.g. "
      "posix,sysv,cma,self "
      "on one host; rc,sm,self or dc,sm,self on InfiniBand/RoCE), or WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1 to "
      "accept "
      "the risk; the built-in tcp transport serves meanwhile";
  if (tls == nullptr || *tls == '\0') return "UCX_TLS is unset (UCX's default includes tcp), which" + why;
  std::string list = tls;
  if (list[0] == '^') return "UCX_TLS=" + list + " (an exclusion list)" + why;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string tl = list.substr(start, end - start);
    if (tl == "all" || tl == "tcp" || tl == "ud" || tl == "ud_v" || tl == "ud_x" || tl == "sockcm") {
      return "UCX_TLS=" + list + " includes " + tl + ", which" + why;
    }
    start = end + 1;
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

bool ucx_tls_has_shared_memory() {
  for (const std::string& tl : ucx_tls_entries()) {
    if (is_ucx_shared_memory_tl(tl)) return true;
  }
  return false;
}

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

Result<UcxEndpointStack> make_ucx_stack(const char* name, bool wakeup) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("reading the UCX configuration", st));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | (wakeup ? UCP_FEATURE_WAKEUP : 0);
  params.name = name;
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return Status(ErrorCode::kInvalidConfig, ucx_error("ucp_init", st));
  UcxEndpointStack stack;
  stack.context = UcxContext(context, UcxContextDeleter());
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
