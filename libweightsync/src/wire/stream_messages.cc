// The named-stream messages (wire/stream_messages.h) and the name rule.
#include "wire/stream_messages.h"

#include "wire/message_codec.h"

namespace weightsync::detail {

namespace {
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}
}  // namespace

bool valid_stream_name(const std::string& name) noexcept {
  if (name.empty() || name.size() > kMaxStreamName) return false;
  for (char c : name) {
    if (!name_char(c)) return false;
  }
  return true;
}

std::string stream_name_problem(const std::string& name) {
  if (name.empty()) return "an adapter name must not be empty";
  if (name.size() > kMaxStreamName) {
    return "an adapter name has at most " + std::to_string(kMaxStreamName) + " bytes, not " +
           std::to_string(name.size());
  }
  if (!valid_stream_name(name)) return "an adapter name is made of [A-Za-z0-9._-] only";
  return "";
}

std::vector<std::uint8_t> SelectStreamMsg::encode() const {
  ByteWriter w;
  w.str16(name);
  return w.take();
}

Result<SelectStreamMsg> SelectStreamMsg::decode(const std::vector<std::uint8_t>& p) {
  ByteReader r(p.data(), p.size());
  SelectStreamMsg m;
  if (!r.str16(&m.name, kMaxStreamName) || !finish(r) || !valid_stream_name(m.name)) {
    return malformed("SELECT_STREAM");
  }
  return m;
}

}  // namespace weightsync::detail
