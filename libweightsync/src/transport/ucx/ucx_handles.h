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

// WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA=1: the operator's override that lets
// any peer read and write the publisher's whole memory (docs/transports.md,
// "ucx", "Access"). Without it a publisher's context has no RMA feature (so
// UCX installs no handler for its software-emulated get/put, which serve any
// address: ucp_get_req_handler / ucp_put_handler in UCX 1.13's rma_sw.c) and
// both sides refuse UCX resources whose one-sided access is not bounded to
// registered memory (ucx_unbounded_resources()).
bool ucx_insecure_override();

// Empty when every resource (transport/device and its memory domain) UCX
// selected in `context` (ucp_context_print_info: UCX's own answer, after
// UCX_TLS, UCX_NET_DEVICES, ...) bounds a peer's one-sided access to memory
// that was registered or allocated for it; else why not, naming the resource.
// Unbounded in UCX 1.13: tcp (its put handler writes any address the peer
// names, uct_tcp_ep_handle_put_req; gets are emulated), cma
// (process_vm_readv/writev anywhere in the target), xpmem (exports the whole
// address space); a memory domain not known to be bounded counts as unbounded.
std::string ucx_unbounded_resources(ucp_context_h context);

// Whether UCX_TLS lists only same-host transports (shared memory, cma, knem,
// xpmem, self), none of which detects peer failure in UCX 1.13.
bool ucx_tls_is_same_host_only();

// ucp_mem_map of existing memory; the error names `what` ("a slot", ...).
Result<ucp_mem_h> ucx_register(ucp_context_h context, void* address, std::size_t length,
                               const std::string& what);

// Who a UCX stack is for. kPublisher: no RMA feature unless the insecure
// override is set (peers read the publisher's memory only where a transport
// does it natively, never through UCX's emulation); with `loopback_only`
// UCX's network transports are restricted to the loopback device
// (UCX_NET_DEVICES=lo), so no UCX socket listens beyond the host.
// kSubscriber: RMA. Both: without the override, a context whose resources
// ucx_unbounded_resources() rejects is refused before any worker (and so any
// listening socket) exists.
enum class UcxRole { kPublisher, kSubscriber };

// A context and one single-threaded worker (wakeup on the publisher).
// UCX reads its own UCX_* environment (UCX_TLS selects its transports).
Result<UcxEndpointStack> make_ucx_stack(const char* name, UcxRole role, bool loopback_only = false);

}  // namespace weightsync::detail
