// The factory of a one-sided transport whose library this build lacks (ucx,
// verbs): listed, never viable, and every call says "not built" and how to
// build it. It refuses encryption as the real one does, so a subscriber that
// asks for it under encryption is told why (one_sided.h). Stateless.
#pragma once

#include "transport/one_sided.h"
#include "transport/transport.h"

namespace weightsync::detail {

class UnavailableOneSidedFactory final : public TransportFactory {
 public:
  UnavailableOneSidedFactory(const char* name, const char* description, const char* not_built)
      : name_(name), description_(description), not_built_(not_built) {}
  const char* name() const override { return name_; }
  TransportInfo probe() const override { return TransportInfo{name_, description_, false, not_built_}; }
  Result<std::unique_ptr<ServedTransport>> serve(const ServeSettings&) const override {
    return Status(ErrorCode::kInvalidConfig, not_built_);
  }
  Status usable(const ChannelParams& params) const override { return one_sided_use_refusal(params); }
  Result<std::unique_ptr<DataChannel>> open(const std::vector<std::uint8_t>&,
                                            const ChannelParams&) const override {
    return Status(ErrorCode::kInvalidConfig, not_built_);
  }

 private:
  const char* name_;
  const char* description_;
  const char* not_built_;
};

}  // namespace weightsync::detail
