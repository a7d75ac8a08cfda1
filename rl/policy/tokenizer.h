// policy/tokenizer.h: the byte-level tokenizer and the chat prompt format of
// the Zorplex policy.
//
// Contract
// - Token ids 0..255 are the bytes of the text (UTF-8 or anything else: the
//   tokenizer never looks at characters); 256..260 are the special tokens
//   PAD, SYSTEM, USER, ASSISTANT, EOS. The vocabulary has kVocabSize = 261
//   ids. encode() never produces a special token; decode() drops them (and
//   any id outside the vocabulary), so decode(encode(s)) == s for every s.
//   render() shows specials as <|pad|>, <|system|>, <|user|>, <|assistant|>,
//   <|eos|> and an id outside the vocabulary as <|?N|>, for debugging only.
// - A prompt is <|system|>system text<|user|>question<|assistant|> (without
//   the first two parts when include_system is false). The model's answer
//   follows, ended by EOS. The system text is configuration (PromptFormat),
//   not code; the default is a short one for a model trained from scratch.
// - Pure functions and plain values: safe from any thread. Nothing fails.
//   No libtorch here (static library ws_rl_text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace policy {

// Token ids are int64 so that a vector of them is a torch::kLong tensor as is.
using TokenId = std::int64_t;

constexpr TokenId kPad = 256;
constexpr TokenId kSystem = 257;
constexpr TokenId kUser = 258;
constexpr TokenId kAssistant = 259;
constexpr TokenId kEos = 260;
constexpr TokenId kVocabSize = 261;

// True for 0..255.
inline bool is_byte(TokenId id) {
  return id >= 0 && id < 256;
}
// True for PAD..EOS.
inline bool is_special(TokenId id) {
  return id >= kPad && id < kVocabSize;
}

// The bytes of text, one id each.
std::vector<TokenId> encode(std::string_view text);
// The bytes among ids, in order; special and out-of-range ids are dropped.
std::string decode(const std::vector<TokenId>& ids);
// Every id: bytes as themselves, specials as <|name|>, others as <|?N|>.
std::string render(const std::vector<TokenId>& ids);
// "<|pad|>" ... "<|eos|>" for a special id, "" for anything else.
const char* special_token_text(TokenId id);

// The default system prompt: short, for a model trained from scratch.
extern const char* const kDefaultSystemPrompt;

struct PromptFormat {
  std::string system_prompt = kDefaultSystemPrompt;
  bool include_system = true;
};

// <|system|>system_prompt<|user|>question<|assistant|> (the system part only
// when format.include_system).
std::vector<TokenId> encode_prompt(const PromptFormat& format, std::string_view question);

}  // namespace policy
