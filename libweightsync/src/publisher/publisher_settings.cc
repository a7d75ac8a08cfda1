// resolve_publisher_settings(): Publisher::create()'s settings, from the table.
#include "publisher/publisher_settings.h"

#include "cuda/cuda_runtime.h"
#include "net/socket.h"

namespace weightsync::detail {

PublisherSettings resolve_publisher_settings(const PublisherOptions& options,
                                             std::vector<SettingProblem>* problems_out) {
  std::vector<SettingProblem>& problems = *problems_out;
  auto problem = [&](std::optional<SettingId> row, ErrorCode code, std::string message) {
    problems.push_back(SettingProblem{row, Status(code, std::move(message))});
  };
  PublisherSettings s;
  s.cuda_slots = options.slot_memory == MemoryKind::kCuda;
  if (s.cuda_slots) {
    if (Status ready = cuda_ready(); !ready.ok()) {
      problem(std::nullopt, ErrorCode::kInvalidConfig,
              "PublisherOptions::slot_memory = kCuda: " + ready.message() + "; use host slots (kHost)");
    }
  } else if (options.slot_memory != MemoryKind::kHost) {
    problem(std::nullopt, ErrorCode::kInvalidConfig,
            "unknown slot memory kind " + std::to_string(static_cast<int>(options.slot_memory)));
  }
  s.secret = resolve_or_default(SettingId::kSecret, options.secret, problems);
  s.bind_address = resolve_or_default(SettingId::kBindAddress, options.bind_address, problems);
  s.io_timeout_ms = resolve_or_default(SettingId::kIoTimeout, options.io_timeout_ms, problems);
  s.checksum = resolve_or_default(SettingId::kChecksum, options.checksum, problems);
  s.slot_allocator = resolve_or_default(SettingId::kSlotAllocator, options.slot_allocator, problems);
  s.handshake_timeout_ms =
      resolve_or_default(SettingId::kHandshakeTimeout, options.handshake_timeout_ms, problems);
  s.idle_timeout_ms = resolve_or_default(SettingId::kIdleTimeout, options.idle_timeout_ms, problems);
  s.lease_timeout_ms = resolve_or_default(SettingId::kLeaseTimeout, options.lease_timeout_ms, problems);
  s.deltas = resolve_or_default(SettingId::kDeltas, options.deltas, problems);
  s.integrity = resolve_or_default(SettingId::kIntegrity, options.integrity, problems);
  s.encryption = resolve_or_default(SettingId::kEncryption, options.encryption, problems);
  s.signing_key = resolve_or_default(SettingId::kSigningKey, options.signing_key, problems);

  if (s.encryption.value && s.secret.value.empty()) {
    problem(SettingId::kEncryption, ErrorCode::kInvalidConfig,
            std::string("encryption (from ") + to_string(s.encryption.source) +
                ") needs a secret: set WEIGHTSYNC_SECRET (or PublisherOptions::secret)");
  }
  if (s.encryption.value && !s.integrity.value) {
    s.integrity = s.encryption;  // encryption implies the integrity layer
  }
  if (options.max_connections == 0 || options.max_handshakes == 0 ||
      options.max_handshakes_per_address == 0) {
    problem(std::nullopt, ErrorCode::kInvalidConfig,
            "max_connections, max_handshakes and max_handshakes_per_address must each be at least 1");
  }
  if (s.bind_address.value == "localhost") s.bind_address.value = "127.0.0.1";
  if (s.secret.value.empty() && !is_loopback_host(s.bind_address.value)) {
    problem(SettingId::kBindAddress, ErrorCode::kInvalidConfig,
            "refusing to listen on non-loopback address '" + s.bind_address.value +
                "' without a secret: anyone on the network could read the weights. Set "
                "WEIGHTSYNC_SECRET (or PublisherOptions::secret) on the publisher and every subscriber");
  }
  if (s.integrity.value) {
    if (s.secret.value.empty() && !s.encryption.value) {  // with encryption: said above
      problem(SettingId::kIntegrity, ErrorCode::kInvalidConfig,
              std::string("integrity (from ") + to_string(s.integrity.source) +
                  ") needs a secret: set WEIGHTSYNC_SECRET (or PublisherOptions::secret)");
    }
    if (s.cuda_slots) {
      problem(SettingId::kIntegrity, ErrorCode::kInvalidConfig,
              "integrity needs host slots: the publisher computes its tags on the CPU");
    }
    if (!s.checksum.value) s.checksum = s.integrity;  // the tags are the checksums
  }
  if (s.cuda_slots && s.checksum.value && !s.integrity.value) {  // with integrity: said above
    problem(SettingId::kChecksum, ErrorCode::kInvalidConfig,
            std::string("checksums (from ") + to_string(s.checksum.source) +
                ") need host slots: the publisher hashes slot bytes on the CPU; "
                "turn checksums off or use slot_memory = kHost");
  }
  if (!s.signing_key.value.empty()) {
    if (s.cuda_slots) {
      problem(SettingId::kSigningKey, ErrorCode::kInvalidConfig,
              "signatures need host slots: the publisher digests slot bytes "
              "on the CPU (unset WEIGHTSYNC_SIGNING_KEY or use kHost slots)");
    } else if (auto loaded = SigningKey::load_pem_file(s.signing_key.value); loaded.ok()) {
      s.signer_key = std::make_shared<const SigningKey>(std::move(*loaded));
    } else {
      problem(SettingId::kSigningKey, loaded.status().code(),
              loaded.status().message() + " (from " + to_string(s.signing_key.source) + ")");
    }
  }
  return s;
}

Result<PublisherSettings> resolve_publisher_settings(const PublisherOptions& options) {
  std::vector<SettingProblem> problems;
  PublisherSettings settings = resolve_publisher_settings(options, &problems);
  if (!problems.empty()) return problems.front().status;
  return settings;
}

std::vector<SettingReport> PublisherSettings::reports() const {
  std::vector<SettingReport> out;
  for (const SettingRow& row : setting_table()) {
    switch (row.id) {
      case SettingId::kSecret: out.push_back(report_setting(row.id, secret)); break;
      case SettingId::kBindAddress: out.push_back(report_setting(row.id, bind_address)); break;
      case SettingId::kIoTimeout: out.push_back(report_setting(row.id, io_timeout_ms)); break;
      case SettingId::kHandshakeTimeout: out.push_back(report_setting(row.id, handshake_timeout_ms)); break;
      case SettingId::kIdleTimeout: out.push_back(report_setting(row.id, idle_timeout_ms)); break;
      case SettingId::kLeaseTimeout: out.push_back(report_setting(row.id, lease_timeout_ms)); break;
      case SettingId::kChecksum: out.push_back(report_setting(row.id, checksum)); break;
      case SettingId::kDeltas: out.push_back(report_setting(row.id, deltas)); break;
      case SettingId::kIntegrity: out.push_back(report_setting(row.id, integrity)); break;
      case SettingId::kEncryption: out.push_back(report_setting(row.id, encryption)); break;
      case SettingId::kSigningKey: out.push_back(report_setting(row.id, signing_key)); break;
      case SettingId::kSlotAllocator: out.push_back(report_setting(row.id, slot_allocator)); break;
      default: break;  // a subscriber's row, or one read where it is used
    }
  }
  return out;
}

}  // namespace weightsync::detail
