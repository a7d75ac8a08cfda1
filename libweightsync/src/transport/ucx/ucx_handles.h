// RAII owners of UCX handles and the context/worker pair both sides use.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "weightsync/status.h"

namespace weightsync::detail {

std::string ucx_error(const char* what, ucs_status_t status);

struct UcxContextDeleter {
  void operator()(ucp_context_h c) const { ucp_cleanup(c); }
};
struct UcxWorkerDeleter {
  void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); }
};
using UcxContext = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, UcxContextDeleter>;
using UcxWorker = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, UcxWorkerDeleter>;

struct UcxEndpointStack {
  UcxContext context;  // destroyed last
  UcxWorker worker;
};

// A context with RMA (and wakeup when asked) and one single-threaded worker.
// UCX reads its own UCX_* environment (UCX_TLS selects its transports).
Result<UcxEndpointStack> make_ucx_stack(const char* name, bool wakeup);

}  // namespace weightsync::detail
