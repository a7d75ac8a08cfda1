// UCX context and worker creation.
#include "transport/ucx/ucx_handles.h"

namespace weightsync::detail {

std::string ucx_error(const char* what, ucs_status_t status) {
  return std::string(what) + ": " + ucs_status_string(status);
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
  stack.context.reset(context);
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
