// resolve_subscriber_settings(): Subscriber::connect()'s settings, from the table.
#include "subscriber/subscriber_settings.h"

namespace weightsync::detail {

SubscriberSettings resolve_subscriber_settings(const SubscriberOptions& options,
                                               std::vector<SettingProblem>* problems_out) {
  std::vector<SettingProblem>& problems = *problems_out;
  SubscriberSettings s;
  s.secret = resolve_or_default(SettingId::kSecret, options.secret, problems);
  s.connect_timeout_ms = resolve_or_default(SettingId::kConnectTimeout, options.connect_timeout_ms, problems);
  s.io_timeout_ms = resolve_or_default(SettingId::kIoTimeout, options.io_timeout_ms, problems);
  s.transport = resolve_or_default(SettingId::kTransport, options.transport, problems);
  s.integrity = resolve_or_default(SettingId::kIntegrity, options.integrity, problems);
  s.encryption = resolve_or_default(SettingId::kEncryption, options.encryption, problems);
  s.trusted_key = resolve_or_default(SettingId::kTrustedKey, options.trusted_key, problems);

  if (!s.trusted_key.value.empty()) {
    auto loaded = VerifyKey::load_pem_file(s.trusted_key.value);
    if (loaded.ok()) {
      s.verify_key = std::move(*loaded);
    } else {
      problems.push_back(SettingProblem{
          SettingId::kTrustedKey, Status(loaded.status().code(), loaded.status().message() + " (from " +
                                                                     to_string(s.trusted_key.source) + ")")});
    }
  }
  if (s.encryption.value && !s.integrity.value) {
    s.integrity = s.encryption;  // encryption implies the integrity layer
  }
  if (s.integrity.value && s.secret.value.empty()) {
    problems.push_back(SettingProblem{
        s.encryption.value ? SettingId::kEncryption : SettingId::kIntegrity,
        Status(ErrorCode::kInvalidConfig, std::string(s.encryption.value ? "encryption" : "integrity") +
                                              " (from " + to_string(s.integrity.source) +
                                              ") needs a secret: set WEIGHTSYNC_SECRET on both sides")});
  }
  if (options.staging_chunks < 2 || options.staging_chunk_bytes < (64u << 10)) {
    problems.push_back(SettingProblem{
        std::nullopt,
        Status(ErrorCode::kInvalidConfig, "staging needs at least 2 chunks of at least 64 KiB (got " +
                                              std::to_string(options.staging_chunks) + " x " +
                                              std::to_string(options.staging_chunk_bytes) + " bytes)")});
  }
  return s;
}

Result<SubscriberSettings> resolve_subscriber_settings(const SubscriberOptions& options) {
  std::vector<SettingProblem> problems;
  SubscriberSettings settings = resolve_subscriber_settings(options, &problems);
  if (!problems.empty()) return problems.front().status;
  return settings;
}

std::vector<SettingReport> SubscriberSettings::reports() const {
  std::vector<SettingReport> out;
  for (const SettingRow& row : setting_table()) {
    switch (row.id) {
      case SettingId::kSecret: out.push_back(report_setting(row.id, secret)); break;
      case SettingId::kIoTimeout: out.push_back(report_setting(row.id, io_timeout_ms)); break;
      case SettingId::kConnectTimeout: out.push_back(report_setting(row.id, connect_timeout_ms)); break;
      case SettingId::kTransport: out.push_back(report_setting(row.id, transport)); break;
      case SettingId::kIntegrity: out.push_back(report_setting(row.id, integrity)); break;
      case SettingId::kEncryption: out.push_back(report_setting(row.id, encryption)); break;
      case SettingId::kTrustedKey: out.push_back(report_setting(row.id, trusted_key)); break;
      default: break;  // a publisher's row, or one read where it is used
    }
  }
  return out;
}

}  // namespace weightsync::detail
