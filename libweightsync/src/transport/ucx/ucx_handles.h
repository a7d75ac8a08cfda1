// RAII owners of UCX handles and the context/worker pair both sides use.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "weightsync/status.h"

namespace weightsync::detail {

std::string ucx_error(const std::string& what, ucs_status_t status);

struct UcxContextDeleter {
  void operator()(ucp_context_h c) const { ucp_cleanup(c); }
};
struct UcxWorkerDeleter {
  void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); }
};
// Shared: memory UCX allocated (UcxSlotMemory) keeps its context alive.
using UcxContext = std::shared_ptr<std::remove_pointer_t<ucp_context_h>>;
using UcxWorker = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, UcxWorkerDeleter>;

struct UcxEndpointStack {
  UcxContext context;  // released last
  UcxWorker worker;
};

// Empty when UCX_TLS restricts UCX to transports with native one-sided
// access; else why UCX would emulate RMA in software. UCX 1.13's emulation
// aborts the target process (ucs_fatal in ucp_get_req_handler) when a reader
// dies mid-read, so a publisher must not offer it unless the operator sets
// WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1.
std::string ucx_emulated_rma_risk();

// Whether UCX_TLS names one of UCX's shared-memory transports (posix, sysv,
// sm, shm, mm). Those give a peer one-sided access only to memory UCX
// allocated itself; registered memory falls back to emulated (slow) reads.
bool ucx_tls_has_shared_memory();

// Whether UCX_TLS lists only same-host transports (shared memory, cma, knem,
// xpmem, self), none of which detects peer failure in UCX 1.13.
bool ucx_tls_is_same_host_only();

// ucp_mem_map of existing memory; the error names `what` ("a slot", ...).
Result<ucp_mem_h> ucx_register(ucp_context_h context, void* address, std::size_t length,
                               const std::string& what);

// A context with RMA (and wakeup when asked) and one single-threaded worker.
// UCX reads its own UCX_* environment (UCX_TLS selects its transports).
Result<UcxEndpointStack> make_ucx_stack(const char* name, bool wakeup);

}  // namespace weightsync::detail
