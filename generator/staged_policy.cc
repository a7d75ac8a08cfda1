#include "generator/staged_policy.h"

#include <torch/cuda.h>

#include <cstdio>
#include <utility>

#include "loop/policy_weights.h"

namespace generator {

zorplex::Result<std::unique_ptr<StagedPolicy>> StagedPolicy::create(
    std::unique_ptr<weightsync::Subscriber> subscriber, const policy::Transformer& starting_model,
    std::uint32_t generator_id, loop::JsonlFile* metrics, loop::Timeline* timeline) {
  auto own_layout = loop::policy_weight_layout(starting_model.config());
  if (!own_layout) return own_layout.error();
  if (!(subscriber->layout() == own_layout.value())) {
    return zorplex::Error{"staged updates need the policy's own float32 layout in flight (got " +
                          std::string(loop::wire_dtype_name(loop::offered_wire_dtype(subscriber->layout()))) +
                          ")"};
  }
  std::unique_ptr<StagedPolicy> out(new StagedPolicy());
  out->starting_ = &starting_model;
  out->cuda_ = starting_model.device().is_cuda();
  out->id_ = generator_id;
  out->metrics_ = metrics;
  out->timeline_ = timeline;
  weightsync::StagedUpdatesOptions options;
  options.mode = weightsync::InstallMode::kSwap;
  options.memory = out->cuda_ ? weightsync::MemoryKind::kCuda : weightsync::MemoryKind::kHost;
  // Verified against the trainer's checksum when it computes one.
  options.require_checksum = subscriber->publisher_checksums();
  auto staged = weightsync::StagedUpdates::create(std::move(subscriber), options);
  if (!staged.ok()) return zorplex::Error{"staged updates: " + staged.status().to_string()};
  out->staged_ = std::move(staged).value();
  // Both buffers, one after the other, are the live one: a model over each.
  const std::int64_t numel = static_cast<std::int64_t>(out->staged_->live_bytes() / sizeof(float));
  const auto tensor_options = torch::TensorOptions().dtype(torch::kFloat32).device(starting_model.device());
  for (int i = 0; i < 2; ++i) {
    void* data = out->staged_->buffer_data(static_cast<std::size_t>(i));
    auto wrapped =
        policy::Transformer::wrap(starting_model.config(), torch::from_blob(data, {numel}, tensor_options));
    if (!wrapped) return wrapped.error();
    out->over_buffer_[i] = std::make_unique<policy::Transformer>(std::move(wrapped).value());
  }
  return out;
}

const policy::Transformer& StagedPolicy::model() const {
  if (staged_->live_version() == 0) return *starting_;
  void* live = staged_->live_data();
  return over_buffer_[0]->flat_parameters().data_ptr() == live ? *over_buffer_[0] : *over_buffer_[1];
}

std::uint64_t StagedPolicy::newest_known() const {
  return std::max(staged_->staged_version(), staged_->live_version());
}

zorplex::Result<bool> StagedPolicy::install_if_staged() {
  if (staged_->staged_version() == 0) return false;
  // The device may still run kernels reading the buffer about to be staged into.
  if (cuda_) torch::cuda::synchronize();
  auto installed = staged_->install();
  if (!installed.ok()) {
    if (installed.status().code() == weightsync::ErrorCode::kNotReady) return false;
    return zorplex::Error{"installing the staged weights failed: " + installed.status().to_string()};
  }
  log_install(installed.value(), loop::wall_clock_seconds());
  return true;
}

zorplex::Result<bool> StagedPolicy::wait_and_install(std::chrono::milliseconds wait) {
  auto staged = staged_->wait_staged(wait);
  if (!staged.ok()) return false;  // nothing yet, or the source is lost: status() says which
  return install_if_staged();
}

policy::StepHook StagedPolicy::hook() {
  return [this]() -> policy::ModelAtStep {
    // An error here (a CUDA failure) surfaces on the next round's install.
    (void)install_if_staged();
    return policy::ModelAtStep{&model(), version()};
  };
}

weightsync::Status StagedPolicy::reconnect(std::unique_ptr<weightsync::Subscriber> subscriber) {
  // A restarted trainer republishes from its checkpoint's version, which may
  // be older than the live one: take its newest, as a new connection does.
  return staged_->reconnect(std::move(subscriber), /*accept_older=*/true);
}

void StagedPolicy::log_install(const weightsync::InstallResult& installed, double end) {
  const weightsync::PullResult& pull = installed.pull;
  if (timeline_ != nullptr) {
    timeline_->span("pull", end - installed.staged_seconds - pull.seconds, end - installed.staged_seconds,
                    {{"version", pull.version}, {"bytes", pull.bytes}, {"background", true}});
    timeline_->span("blocked", end - installed.blocked_seconds, end, {{"version", installed.version}});
  }
  if (metrics_ == nullptr) return;
  // The bytes' hash: the trainer's checksum they were verified against, or
  // (a publisher without checksums) the hash of the live buffer.
  char verified[17];
  std::snprintf(verified, sizeof verified, "%016llx", static_cast<unsigned long long>(pull.checksum));
  const std::string xxh3 = pull.checksum_verified ? std::string(verified) : loop::weights_digest(model());
  metrics_->write({{"event", "pull"},
                   {"generator", id_},
                   {"version", pull.version},
                   {"bytes", pull.bytes},
                   {"seconds", pull.seconds},
                   {"wait_seconds", pull.wait_seconds},
                   {"retries", pull.retries},
                   {"transport", staged_->transport()},
                   {"staged", pull.staged},
                   {"wire_dtype", "fp32"},
                   {"delta", pull.delta},
                   {"signed", pull.signature_verified},
                   {"wire_bytes", pull.wire_bytes},
                   {"background", true},
                   {"xxh3", xxh3},
                   {"time", end}});
  metrics_->write({{"event", "install"},
                   {"generator", id_},
                   {"version", installed.version},
                   {"previous", installed.previous},
                   {"mode", weightsync::to_string(installed.mode)},
                   {"blocked_seconds", installed.blocked_seconds},
                   {"staged_seconds", installed.staged_seconds},
                   {"pull_seconds", pull.seconds},
                   {"time", end}});
}

}  // namespace generator
