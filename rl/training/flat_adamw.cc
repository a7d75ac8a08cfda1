// training/flat_adamw.cc: see flat_adamw.h.
#include "training/flat_adamw.h"

#include <cmath>

namespace training {

FlatAdamW::FlatAdamW(policy::Transformer& model, AdamWOptions options) : model_(&model), options_(options) {
  const torch::Tensor flat = model.flat_parameters();
  state_.exp_avg = torch::zeros_like(flat);
  state_.exp_avg_sq = torch::zeros_like(flat);
  decay_mask_ = torch::zeros_like(flat);
  for (const policy::ParamSpec& spec : model.specs()) {
    if (spec.shape.size() >= 2) decay_mask_.narrow(0, spec.offset, spec.numel).fill_(1.0);
  }
}

torch::Tensor FlatAdamW::flat_gradient() const {
  torch::Tensor grad = torch::zeros_like(model_->flat_parameters());
  const auto& params = model_->parameters();
  const auto& specs = model_->specs();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& g = params[i].grad();
    if (g.defined()) grad.narrow(0, specs[i].offset, specs[i].numel).copy_(g.reshape({-1}));
  }
  return grad;
}

StepResult FlatAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  StepResult result;
  torch::Tensor grad = flat_gradient();
  result.grad_norm = grad.norm().item<double>();
  if (!std::isfinite(result.grad_norm)) {
    result.applied = false;
    return result;
  }
  if (options_.max_grad_norm > 0.0 && result.grad_norm > options_.max_grad_norm) {
    grad.mul_(options_.max_grad_norm / (result.grad_norm + 1e-6));
  }
  state_.step += 1;
  const double t = static_cast<double>(state_.step);
  const double bias1 = 1.0 - std::pow(options_.beta1, t);
  const double bias2 = 1.0 - std::pow(options_.beta2, t);
  state_.exp_avg.mul_(options_.beta1).add_(grad, 1.0 - options_.beta1);
  state_.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
  torch::Tensor flat = model_->flat_parameters();
  // Decoupled weight decay first (as torch.optim.AdamW), then the Adam step.
  if (options_.weight_decay > 0.0) flat.sub_(flat * decay_mask_ * (lr * options_.weight_decay));
  const torch::Tensor denom = (state_.exp_avg_sq / bias2).sqrt_().add_(options_.eps);
  flat.addcdiv_(state_.exp_avg, denom, -lr / bias1);
  return result;
}

zorplex::Result<bool> FlatAdamW::load_state(const AdamWState& state) {
  const std::int64_t n = model_->flat_parameters().numel();
  if (!state.exp_avg.defined() || !state.exp_avg_sq.defined() || state.exp_avg.numel() != n ||
      state.exp_avg_sq.numel() != n) {
    return zorplex::Error{"optimizer state has the wrong size for this model (expected " + std::to_string(n) +
                          " elements per moment)"};
  }
  if (state.step < 0) return zorplex::Error{"optimizer state has a negative step count"};
  state_.exp_avg.copy_(state.exp_avg.reshape({-1}));
  state_.exp_avg_sq.copy_(state.exp_avg_sq.reshape({-1}));
  state_.step = state.step;
  return true;
}

}  // namespace training
