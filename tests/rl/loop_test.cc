// What the trainer and generator share (rl/loop): the policy as a weightsync
// layout (offsets equal to the flat buffer's, a publish -> pull round trip
// over a real Publisher/Subscriber landing bit-exact in another model's
// buffer), and the RL checkpoint (exact resume of weights, optimizer and
// baseline; a pair from different steps refused; metadata carried over).
// --device: cpu always, cuda refused with the reason where no GPU is usable;
// where one is, the device publish -> staged pull round trip and a checkpoint
// loaded onto the device (those cases only warn and return without a GPU).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <unistd.h>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loop/device.h"
#include "loop/policy_weights.h"
#include "loop/rl_checkpoint.h"
#include "policy/safetensors.h"
#include "training/rl_update.h"
#include "weightsync/cuda.h"

namespace {

policy::ModelConfig tiny_config() {
  policy::ModelConfig c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_ff = 64;
  c.max_seq_len = 64;
  return c;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/ws_loop_test_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("policy layout: one tensor per parameter at the flat buffer's byte offsets, no padding",
          "[rl][loop]") {
  const policy::ModelConfig config = tiny_config();
  auto layout = loop::policy_weight_layout(config);
  REQUIRE(layout);
  const auto specs = policy::parameter_specs(config);
  REQUIRE(layout.value().tensors().size() == specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CHECK(layout.value().tensors()[i].spec.name == specs[i].name);
    CHECK(layout.value().tensors()[i].offset == static_cast<std::uint64_t>(specs[i].byte_offset));
  }
  CHECK(layout.value().total_bytes() == static_cast<std::uint64_t>(policy::parameter_count(config)) * 4);
  CHECK(loop::layout_mismatch(layout.value(), config).empty());
  policy::ModelConfig other = config;
  other.d_ff = 128;
  CHECK(loop::layout_mismatch(layout.value(), other).find("not the trainer's model") != std::string::npos);
}

TEST_CASE("policy weights: published by one model, pulled bit-exact into another's flat buffer",
          "[rl][loop]") {
  auto trainer_model = policy::Transformer::create(tiny_config(), 1);
  auto generator_model = policy::Transformer::create(tiny_config(), 2);
  REQUIRE(trainer_model);
  REQUIRE(generator_model);
  REQUIRE(loop::weights_digest(trainer_model.value()) != loop::weights_digest(generator_model.value()));
  auto publisher = weightsync::Publisher::create(loop::policy_weight_layout(tiny_config()).value());
  REQUIRE(publisher.ok());
  REQUIRE(loop::publish_policy(*publisher.value(), 7, trainer_model.value()));
  weightsync::SubscriberOptions options;
  options.transport = "tcp";
  auto subscriber = weightsync::Subscriber::connect(publisher.value()->address(), options);
  REQUIRE(subscriber.ok());
  auto pulled = subscriber.value()->pull(loop::policy_destination(generator_model.value()));
  REQUIRE(pulled.ok());
  CHECK(pulled.value().version == 7);
  CHECK(torch::equal(trainer_model.value().flat_parameters(), generator_model.value().flat_parameters()));
  CHECK(loop::weights_digest(trainer_model.value()) == loop::weights_digest(generator_model.value()));
}

TEST_CASE("device: cpu is the CPU, an unknown name is refused, cuda says why it cannot be used",
          "[rl][loop]") {
  auto cpu = loop::select_device("cpu");
  REQUIRE(cpu);
  CHECK(cpu.value() == torch::Device(torch::kCPU));
  CHECK(loop::publish_stream(cpu.value()) == nullptr);
  auto gpu = loop::select_device("gpu");
  REQUIRE_FALSE(gpu);
  CHECK(gpu.error().message.find("expected cpu or cuda") != std::string::npos);
  auto cuda = loop::select_device("cuda");
  if (torch::cuda::is_available() && weightsync::cuda_info().usable) {
    REQUIRE(cuda);
    CHECK(cuda.value().is_cuda());
  } else {
    REQUIRE_FALSE(cuda);
    INFO(cuda.error().message);
    CHECK(cuda.error().message.find("--device cuda: no usable GPU: ") == 0);
    CHECK(cuda.error().message.find("(use --device cpu)") != std::string::npos);
  }
}

TEST_CASE("policy weights: a CPU model is a host destination and cannot be published from the device",
          "[rl][loop]") {
  auto model = policy::Transformer::create(tiny_config(), 1);
  REQUIRE(model);
  CHECK(loop::policy_destination(model.value()).memory_kind() == weightsync::MemoryKind::kHost);
  auto publisher = weightsync::Publisher::create(loop::policy_weight_layout(tiny_config()).value());
  REQUIRE(publisher.ok());
  auto enqueued = loop::publish_policy_from_device(*publisher.value(), 1, model.value(), nullptr);
  REQUIRE_FALSE(enqueued);
  CHECK(enqueued.error().message.find("the policy is on cpu") != std::string::npos);
}

TEST_CASE("policy weights on a GPU: published from device memory, pulled bit-exact into another GPU model",
          "[rl][loop][cuda]") {
  auto device = loop::select_device("cuda");
  if (!device) {
    WARN("not run: " << device.error().message);
    return;
  }
  auto trainer_model = policy::Transformer::create(tiny_config(), 1, device.value());
  auto generator_model = policy::Transformer::create(tiny_config(), 2, device.value());
  auto host_model = policy::Transformer::create(tiny_config(), 1);
  REQUIRE(trainer_model);
  REQUIRE(generator_model);
  REQUIRE(host_model);
  // Same seed, same bytes: the digest of a CUDA buffer is the host one's.
  CHECK(loop::weights_digest(trainer_model.value()) == loop::weights_digest(host_model.value()));
  CHECK(loop::policy_destination(generator_model.value()).memory_kind() == weightsync::MemoryKind::kCuda);
  auto publisher = weightsync::Publisher::create(loop::policy_weight_layout(tiny_config()).value());
  REQUIRE(publisher.ok());
  auto enqueued = loop::publish_policy_from_device(*publisher.value(), 3, trainer_model.value(),
                                                   loop::publish_stream(device.value()));
  REQUIRE(enqueued);
  CHECK(enqueued.value().version == 3);
  auto committed = publisher.value()->flush_device_publishes();
  REQUIRE(committed.ok());
  CHECK(committed.value().version == 3);
  weightsync::SubscriberOptions options;
  options.transport = "tcp";
  auto subscriber = weightsync::Subscriber::connect(publisher.value()->address(), options);
  REQUIRE(subscriber.ok());
  auto pulled = subscriber.value()->pull(loop::policy_destination(generator_model.value()));
  REQUIRE(pulled.ok());
  CHECK(pulled.value().version == 3);
  CHECK(pulled.value().staged);  // tcp cannot write device memory itself
  CHECK(torch::equal(trainer_model.value().flat_parameters(), generator_model.value().flat_parameters()));
  CHECK(loop::weights_digest(generator_model.value()) == loop::weights_digest(host_model.value()));
}

TEST_CASE("policy checkpoint on a GPU: saved from device memory, loaded back onto the device bit-exact",
          "[rl][loop][cuda]") {
  auto device = loop::select_device("cuda");
  if (!device) {
    WARN("not run: " << device.error().message);
    return;
  }
  auto model = policy::Transformer::create(tiny_config(), 5, device.value());
  REQUIRE(model);
  const std::string dir = temp_dir("cuda_checkpoint");
  REQUIRE(policy::save_model(dir + "/policy.safetensors", model.value()));
  auto loaded = policy::load_model(dir + "/policy.safetensors", device.value());
  REQUIRE(loaded);
  CHECK(loaded.value().device().is_cuda());
  CHECK(torch::equal(loaded.value().flat_parameters(), model.value().flat_parameters()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("RL checkpoint: resume restores weights, optimizer and baseline, and refuses a mixed pair",
          "[rl][loop]") {
  const std::string dir = temp_dir("checkpoint");
  auto model = policy::Transformer::create(tiny_config(), 3);
  REQUIRE(model);
  training::RlUpdateOptions options;
  options.baseline = training::BaselineKind::kRunningMean;
  training::RlUpdater updater(model.value(), options);
  // Give the optimizer and baseline a state worth restoring.
  for (torch::Tensor p : model.value().parameters()) p.mutable_grad() = torch::full_like(p, 0.01f);
  updater.optimizer().step(1e-3);
  updater.baseline().update({0.25, 0.75});
  const policy::Metadata carried{{"sft.step", "12"}, {"rl.step", "99"}, {"format", "x"}};
  REQUIRE(loop::save_rl_checkpoint(dir, model.value(), updater, {5, 4}, "{\"lr\":1}", carried));
  REQUIRE(loop::has_rl_checkpoint(dir));

  auto file = policy::read_safetensors(loop::rl_policy_file(dir));
  REQUIRE(file);
  const policy::Metadata& meta = file.value().metadata;
  CHECK(meta.at("sft.step") == "12");  // carried over
  CHECK(meta.at("rl.step") == "4");    // ours, not the carried one
  CHECK(meta.at("rl.options") == "{\"lr\":1}");
  auto progress = loop::read_rl_progress(meta);
  REQUIRE(progress);
  CHECK(progress.value().version == 5);
  CHECK(progress.value().step == 4);

  auto loaded = policy::load_model(loop::rl_policy_file(dir));
  REQUIRE(loaded);
  CHECK(torch::equal(loaded.value().flat_parameters(), model.value().flat_parameters()));
  training::RlUpdater restored(loaded.value(), options);
  REQUIRE(loop::restore_rl_optimizer(dir, restored, progress.value()));
  CHECK(torch::equal(restored.optimizer().state().exp_avg, updater.optimizer().state().exp_avg));
  CHECK(torch::equal(restored.optimizer().state().exp_avg_sq, updater.optimizer().state().exp_avg_sq));
  CHECK(restored.optimizer().state().step == updater.optimizer().state().step);
  CHECK(restored.baseline().value() == updater.baseline().value());
  CHECK(restored.baseline().initialized());

  // A second save removes the older optimizer file; a policy that names a
  // step whose optimizer file is gone (or another step's) is refused.
  REQUIRE(loop::save_rl_checkpoint(dir, model.value(), updater, {6, 5}, "{}", carried));
  CHECK(!std::filesystem::exists(loop::rl_optimizer_file(dir, 4)));
  CHECK(std::filesystem::exists(loop::rl_optimizer_file(dir, 5)));
  auto stale = loop::restore_rl_optimizer(dir, restored, {5, 4});
  REQUIRE(!stale);
  std::filesystem::copy_file(loop::rl_optimizer_file(dir, 5), loop::rl_optimizer_file(dir, 4));
  auto mixed = loop::restore_rl_optimizer(dir, restored, {5, 4});
  REQUIRE(!mixed);
  CHECK(mixed.error().message.find("differ") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("policy weights, --wire-dtype fp8: quantized by the trainer, dequantized by the generator, exactly",
          "[rl][loop][fp8]") {
  auto wire = loop::parse_wire_dtype("fp8");
  REQUIRE(wire);
  CHECK(wire.value() == weightsync::DType::kFloat8E4M3);
  CHECK(std::string(loop::wire_dtype_name(wire.value())) == "fp8");
  auto trainer_model = policy::Transformer::create(tiny_config(), 1);
  auto generator_model = policy::Transformer::create(tiny_config(), 2);
  REQUIRE(trainer_model);
  REQUIRE(generator_model);
  const auto wide = loop::policy_weight_layout(tiny_config()).value();
  auto fp8 = loop::policy_wire_layout(tiny_config(), wire.value());
  REQUIRE(fp8);
  CHECK(loop::offered_wire_dtype(fp8.value()) == weightsync::DType::kFloat8E4M3);
  CHECK(loop::layout_mismatch(fp8.value(), tiny_config()).empty());
  policy::ModelConfig other = tiny_config();
  other.d_ff = 128;
  CHECK(loop::layout_mismatch(fp8.value(), other).find("not the trainer's model") != std::string::npos);

  auto publisher = weightsync::Fp8Publisher::create(wide);
  REQUIRE(publisher.ok());
  CHECK(publisher.value()->publisher().layout() == fp8.value());
  REQUIRE(loop::publish_policy_narrow(*publisher.value(), 7, trainer_model.value()));
  REQUIRE(publisher.value()->flush().ok());
  weightsync::SubscriberOptions options;
  options.transport = "tcp";
  auto subscriber = weightsync::Subscriber::connect(publisher.value()->publisher().address(), options);
  REQUIRE(subscriber.ok());
  auto target = loop::PolicyPullTarget::create(subscriber.value()->layout(), generator_model.value());
  REQUIRE(target);
  CHECK(target.value()->wire_dtype() == weightsync::DType::kFloat8E4M3);
  auto pulled = subscriber.value()->pull(target.value()->destination(generator_model.value()));
  REQUIRE(pulled.ok());
  CHECK(pulled.value().version == 7);
  REQUIRE(target.value()->finish(generator_model.value()));
  // Exactly dequantize(quantize(x)) of the trainer's float32 weights, element by element.
  const torch::Tensor source = trainer_model.value().flat_parameters().contiguous();
  std::vector<unsigned char> q(fp8.value().total_bytes());
  REQUIRE(weightsync::quantize_image(wide, source.data_ptr<float>(), fp8.value(), q.data()).ok());
  torch::Tensor want = torch::empty_like(source);
  REQUIRE(weightsync::dequantize_image(fp8.value(), q.data(), wide, want.data_ptr<float>()).ok());
  CHECK(torch::equal(generator_model.value().flat_parameters(), want));
  CHECK_FALSE(torch::equal(want, source));  // fp8 is lossy: the generator holds the dequantized weights
  CHECK((want - source).abs().max().item<float>() <= source.abs().max().item<float>() / 16.0f);
}
