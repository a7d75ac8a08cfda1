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

// Empty when UCX_TLS restricts UCX to transports with native one-sided
// access; else why UCX would emulate RMA in software. UCX 1.13's emulation
// aborts the target process (ucs_fatal in ucp_get_req_handler) when a reader
// dies mid-read, so a publisher must not offer it unless the operator sets
// WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1.
std::string ucx_emulated_rma_risk();

// A context with RMA (and wakeup when asked) and one single-threaded worker.
// UCX reads its own UCX_* environment (UCX_TLS selects its transports).
Result<UcxEndpointStack> make_ucx_stack(const char* name, bool wakeup);

}  // namespace weightsync::detail
