// describe_settings(): the resolution used by Publisher and Subscriber, reported.
#include "weightsync/settings.h"

#include <cstdlib>
#include <string>

#include "common/env.h"
#include "common/host_identity.h"
#include "weightsync/log.h"

namespace weightsync {
namespace {

template <typename T, typename Render>
SettingReport report(const char* name, const char* env, const Result<detail::Setting<T>>& resolved,
                     T fallback, Render render) {
  SettingReport r{name, env, "", "", ""};
  if (resolved.ok()) {
    r.value = render(resolved->value);
    r.source = detail::to_string(resolved->source);
  } else {
    r.value = render(fallback);
    r.source = "default";
    r.error = resolved.status().message();
  }
  return r;
}

std::string as_is(const std::string& s) {
  return s;
}
std::string millis(int ms) {
  return std::to_string(ms) + " ms";
}
std::string on_off(bool b) {
  return b ? "on" : "off";
}

}  // namespace

std::vector<SettingReport> describe_settings(const PublisherOptions& p, const SubscriberOptions& s) {
  std::vector<SettingReport> out;
  try {
    const std::optional<std::string>& secret_option = p.secret ? p.secret : s.secret;
    out.push_back(report("secret", "WEIGHTSYNC_SECRET",
                         detail::resolve_string(secret_option, "WEIGHTSYNC_SECRET", ""), std::string(),
                         [](const std::string& v) {
                           return v.empty() ? std::string("(none: publishers listen on loopback only)")
                                            : "(set, " + std::to_string(v.size()) + " bytes)";
                         }));
    out.push_back(report("bind_address", "WEIGHTSYNC_BIND",
                         detail::resolve_string(p.bind_address, "WEIGHTSYNC_BIND", "127.0.0.1"),
                         std::string("127.0.0.1"), as_is));
    out.push_back(report("io_timeout_ms", "WEIGHTSYNC_TIMEOUT_MS",
                         detail::resolve_millis(p.io_timeout_ms ? p.io_timeout_ms : s.io_timeout_ms,
                                                "WEIGHTSYNC_TIMEOUT_MS", 10000),
                         10000, millis));
    out.push_back(
        report("handshake_timeout_ms", "WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS",
               detail::resolve_millis(p.handshake_timeout_ms, "WEIGHTSYNC_HANDSHAKE_TIMEOUT_MS", 2000), 2000,
               millis));
    out.push_back(report("idle_timeout_ms", "WEIGHTSYNC_IDLE_TIMEOUT_MS",
                         detail::resolve_millis(p.idle_timeout_ms, "WEIGHTSYNC_IDLE_TIMEOUT_MS", 0,
                                                /*zero_allowed=*/true),
                         0, millis));
    out.push_back(report("lease_timeout_ms", "WEIGHTSYNC_LEASE_TIMEOUT_MS",
                         detail::resolve_millis(p.lease_timeout_ms, "WEIGHTSYNC_LEASE_TIMEOUT_MS", 60000),
                         60000, millis));
    out.push_back(report("connect_timeout_ms", "WEIGHTSYNC_CONNECT_TIMEOUT_MS",
                         detail::resolve_millis(s.connect_timeout_ms, "WEIGHTSYNC_CONNECT_TIMEOUT_MS", 5000),
                         5000, millis));
    out.push_back(report("transport", "WEIGHTSYNC_TRANSPORT",
                         detail::resolve_string(s.transport, "WEIGHTSYNC_TRANSPORT", "auto"),
                         std::string("auto"), as_is));
    out.push_back(report("checksum", "WEIGHTSYNC_CHECKSUM",
                         detail::resolve_bool(p.checksum, "WEIGHTSYNC_CHECKSUM", false), false, on_off));
    out.push_back(report("deltas", "WEIGHTSYNC_DELTAS",
                         detail::resolve_bool(p.deltas, "WEIGHTSYNC_DELTAS", false), false, on_off));
    out.push_back(report("integrity", "WEIGHTSYNC_INTEGRITY",
                         detail::resolve_bool(p.integrity ? p.integrity : s.integrity, "WEIGHTSYNC_INTEGRITY", false),
                         false, on_off));
    out.push_back(report("encryption", "WEIGHTSYNC_ENCRYPTION",
                         detail::resolve_bool(p.encryption ? p.encryption : s.encryption, "WEIGHTSYNC_ENCRYPTION",
                                              false),
                         false, on_off));
    auto key_file = [](const char* none) {
      return [none](const std::string& v) { return v.empty() ? std::string(none) : v; };
    };
    out.push_back(report("signing_key", "WEIGHTSYNC_SIGNING_KEY",
                         detail::resolve_string(p.signing_key, "WEIGHTSYNC_SIGNING_KEY", ""), std::string(),
                         key_file("(none: publishers sign nothing)")));
    out.push_back(report("trusted_key", "WEIGHTSYNC_TRUSTED_KEY",
                         detail::resolve_string(s.trusted_key, "WEIGHTSYNC_TRUSTED_KEY", ""), std::string(),
                         key_file("(none: subscribers do not check signatures)")));
    out.push_back(report("slot_allocator", "WEIGHTSYNC_SLOT_ALLOCATOR",
                         detail::resolve_string(p.slot_allocator, "WEIGHTSYNC_SLOT_ALLOCATOR", "auto"),
                         std::string("auto"), as_is));
    if (out.back().error.empty() && out.back().value != "auto" && out.back().value != "memfd" &&
        out.back().value != "ucx") {
      out.back().error =
          "WEIGHTSYNC_SLOT_ALLOCATOR='" + out.back().value + "' is not one of auto, memfd, ucx";
    }
    {
      // Which host this process counts as for shm/cuda_ipc (common/host_identity.h).
      auto host = detail::host_identity();
      const char* raw = std::getenv("WEIGHTSYNC_HOST_ID");
      const bool set = raw != nullptr && *raw != '\0';
      SettingReport r{"host_id", "WEIGHTSYNC_HOST_ID", "", set ? "environment" : "default", ""};
      if (!host.ok()) {
        r.value = "(boot id:network namespace inode)";
        r.source = "default";
        r.error = host.status().message();
      } else {
        r.value = host->empty() ? "(unknown: procfs unreadable, so no peer counts as same-host)" : *host;
      }
      out.push_back(r);
    }
    auto informational = [&](const char* name, const char* env, const char* fallback) {
      const char* raw = std::getenv(env);
      const bool set = raw != nullptr && *raw != '\0';
      out.push_back(SettingReport{name, env, set ? raw : fallback, set ? "environment" : "default", ""});
    };
    informational("verbs_device", "WEIGHTSYNC_VERBS_DEVICE", "(first with an active port)");
    informational("ucx_allow_emulated_rma", "WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA", "0");
    informational("ucx_transports", "UCX_TLS", "(UCX default: all)");
    SettingReport level{"log_level", "WEIGHTSYNC_LOG_LEVEL", to_string(log_level()), "default", ""};
    if (const char* raw = std::getenv("WEIGHTSYNC_LOG_LEVEL"); raw != nullptr && *raw != '\0') {
      if (detail::parse_log_level(raw)) {
        level.source = "environment";
      } else {
        level.error =
            std::string("WEIGHTSYNC_LOG_LEVEL='") + raw + "' is not one of error, warn, info, debug, trace";
      }
    }
    out.push_back(level);
  } catch (...) {
  }
  return out;
}

}  // namespace weightsync
