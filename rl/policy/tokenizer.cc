// policy/tokenizer.cc: see tokenizer.h.
#include "policy/tokenizer.h"

namespace policy {

const char* const kDefaultSystemPrompt =
    "Use LOOKUP[word] to get a zorplex value. Answer with [ANSWER] <number>.";

std::vector<TokenId> encode(std::string_view text) {
  std::vector<TokenId> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<TokenId>(static_cast<unsigned char>(c)));
  return ids;
}

std::string decode(const std::vector<TokenId>& ids) {
  std::string text;
  text.reserve(ids.size());
  for (TokenId id : ids) {
    if (is_byte(id)) text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

const char* special_token_text(TokenId id) {
  switch (id) {
    case kPad: return "<|pad|>";
    case kSystem: return "<|system|>";
    case kUser: return "<|user|>";
    case kAssistant: return "<|assistant|>";
    case kEos: return "<|eos|>";
    default: return "";
  }
}

std::string render(const std::vector<TokenId>& ids) {
  std::string text;
  text.reserve(ids.size());
  for (TokenId id : ids) {
    if (is_byte(id)) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (is_special(id)) {
      text += special_token_text(id);
    } else {
      text += "<|?" + std::to_string(id) + "|>";
    }
  }
  return text;
}

std::vector<TokenId> encode_prompt(const PromptFormat& format, std::string_view question) {
  std::vector<TokenId> ids;
  ids.reserve(format.system_prompt.size() + question.size() + 3);
  if (format.include_system) {
    ids.push_back(kSystem);
    for (char c : format.system_prompt) ids.push_back(static_cast<TokenId>(static_cast<unsigned char>(c)));
  }
  ids.push_back(kUser);
  for (char c : question) ids.push_back(static_cast<TokenId>(static_cast<unsigned char>(c)));
  ids.push_back(kAssistant);
  return ids;
}

}  // namespace policy
