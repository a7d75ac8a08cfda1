// Zorplex: every expectation here comes from the spec (/work/shared/zorplex-spec.md:
// its check values, its table, its rules) or, where the spec gives no number, from
// CPython 3.11's random.Random and hashlib run on the original algorithm; never from
// the code under test. Comments say which.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "zorplex/zorplex.h"

using namespace zorplex;

namespace {

// The spec's table for seed 42, in word order.
const std::vector<int> kSeed42Table = {82, 15, 4,  95, 36, 32, 29, 18, 95, 14, 87, 95, 70,
                                       12, 76, 55, 5,  4,  12, 28, 30, 65, 78, 4,  72, 26};

int spec_value(const std::string& word) {
  return kSeed42Table[*word_index(word)];
}

ExecutedCall executed(const std::string& name, const std::string& argument, ToolResult result) {
  return ExecutedCall{ToolCall{name, argument}, std::move(result)};
}

std::optional<std::int64_t> extracted_value(const Extraction& extraction) {
  if (!extraction.answer) return std::nullopt;
  return extraction.answer->value;
}

}  // namespace

// ---- Python-compatible random numbers ----

TEST_CASE("python_random: the first five MT19937 outputs for seed 42 are the spec's", "[rl][random]") {
  PythonRandom rng(42);
  CHECK(rng.next_u32() == 2746317213U);
  CHECK(rng.next_u32() == 478163327U);
  CHECK(rng.next_u32() == 107420369U);
  CHECK(rng.next_u32() == 3184935163U);
  CHECK(rng.next_u32() == 1181241943U);
}

TEST_CASE("python_random: seeding as CPython for zero, negative and two-word seeds", "[rl][random]") {
  // CPython: Random(0), Random(-42) (uses |seed|), Random(2**40 + 5) (key of two words).
  PythonRandom zero(0);
  CHECK(zero.next_u32() == 3626764237U);
  CHECK(zero.next_u32() == 1654615998U);
  PythonRandom negative(-42);
  CHECK(negative.next_u32() == 2746317213U);
  CHECK(negative.next_u32() == 478163327U);
  PythonRandom big((std::int64_t{1} << 40) + 5);
  CHECK(big.next_u32() == 2166296868U);
  CHECK(big.next_u32() == 2220160828U);
  CHECK(big.next_u32() == 1153647273U);
}

TEST_CASE("python_random: getrandbits, randbelow, randint and choice draw as CPython", "[rl][random]") {
  // CPython, Random(7): _randbelow(26) x5 = 10 4 12 20 1.
  PythonRandom a(7);
  std::vector<std::uint64_t> below;
  for (int i = 0; i < 5; ++i) below.push_back(a.randbelow(26));
  CHECK(below == std::vector<std::uint64_t>{10, 4, 12, 20, 1});
  // Random(7): getrandbits(1), getrandbits(7), getrandbits(32) = 0, 121, 647892279.
  PythonRandom b(7);
  CHECK(b.getrandbits(1) == 0U);
  CHECK(b.getrandbits(7) == 121U);
  CHECK(b.getrandbits(32) == 647892279U);
  // Random(7): randint(1, 100) x3 = 42 20 51; choice(['only']) still draws, so the
  // next getrandbits(32) is 311111475.
  PythonRandom c(7);
  CHECK(c.randint(1, 100) == 42);
  CHECK(c.randint(1, 100) == 20);
  CHECK(c.randint(1, 100) == 51);
  CHECK(c.choice(std::vector<std::string>{"only"}) == "only");
  CHECK(c.getrandbits(32) == 311111475U);
  // Random(7): _randbelow(2**40 + 3) = 868231286071 (more than 32 bits).
  PythonRandom d(7);
  CHECK(d.randbelow((std::uint64_t{1} << 40) + 3) == 868231286071ULL);
}

TEST_CASE("python_random: sample and shuffle draw as CPython", "[rl][random]") {
  // CPython, one Random(7): sample(range(26), 3), sample(range(20), 5) (pool branch),
  // sample(range(100), 10) (set branch).
  PythonRandom rng(7);
  CHECK(rng.sample_indices(26, 3) == std::vector<std::size_t>{10, 4, 12});
  CHECK(rng.sample_indices(20, 5) == std::vector<std::size_t>{1, 2, 17, 3, 11});
  CHECK(rng.sample_indices(100, 10) == std::vector<std::size_t>{74, 7, 64, 27, 4, 11, 55, 53, 8, 30});
  CHECK(rng.sample_indices(3, 4).empty());
  // Random(7).shuffle(list(range(10))).
  PythonRandom shuffler(7);
  std::vector<int> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  shuffler.shuffle(x);
  CHECK(x == std::vector<int>{8, 3, 1, 4, 7, 0, 9, 6, 2, 5});
}

// ---- the value table ----

TEST_CASE("value table: seed 42 gives the spec's 26 values", "[rl][table]") {
  REQUIRE(words().size() == 26);
  CHECK(words().front() == "apple");
  CHECK(words().back() == "zebra");
  const ValueTable table(42);
  for (std::size_t i = 0; i < words().size(); ++i) {
    INFO(words()[i]);
    CHECK(table.value_at(i) == kSeed42Table[i]);
  }
  CHECK(table.value_of("apple") == 82);
  CHECK_FALSE(table.value_of("aardvark").has_value());
}

// ---- tasks ----

TEST_CASE("tasks: the first ten easy compositional tasks for seed 42 are the spec's", "[rl][tasks]") {
  struct Expected {
    const char* w1;
    const char* w2;
    int answer;
  };
  const std::vector<Expected> expected = {
      {"umbrella", "dog", 125}, {"xray", "ice", 99},    {"house", "elephant", 54}, {"violet", "xray", 69},
      {"sun", "night", 24},     {"apple", "cat", 86},   {"house", "queen", 23},    {"river", "grape", 33},
      {"house", "ocean", 94},   {"zebra", "apple", 108}};
  TaskGenerator generator(TaskKind::kCompositional, Difficulty::kEasy, 42);
  for (const Expected& e : expected) {
    const Task task = generator.next();
    CHECK(task.words == std::vector<std::string>{e.w1, e.w2});
    CHECK(task.op == '+');
    CHECK(task.answer == e.answer);
    CHECK(task.question == std::string("What is zorplex('") + e.w1 + "') + zorplex('" + e.w2 + "')?");
  }
}

TEST_CASE("tasks: medium draws one of + - * for two words", "[rl][tasks]") {
  // Words and operators: CPython running the original generator (medium, seed 42);
  // answers: the spec's table.
  TaskGenerator generator(TaskKind::kCompositional, Difficulty::kMedium, 42);
  std::vector<Task> tasks;
  for (int i = 0; i < 10; ++i) tasks.push_back(generator.next());
  CHECK(tasks[0].question == "What is zorplex('umbrella') + zorplex('dog')?");
  CHECK(tasks[2].question == "What is zorplex('house') * zorplex('elephant')?");
  CHECK(tasks[2].answer == spec_value("house") * spec_value("elephant"));
  CHECK(tasks[3].question == "What is zorplex('dog') * zorplex('violet')?");
  CHECK(tasks[3].answer == 95 * 65);
  CHECK(tasks[5].question == "What is zorplex('night') + zorplex('banana')?");
  CHECK(tasks[5].answer == 12 + 15);
  for (const Task& task : tasks) CHECK(task.words.size() == 2);
}

TEST_CASE("tasks: hard uses three words and one operator twice, left to right", "[rl][tasks]") {
  // Words and operators: CPython (hard, seed 42); answers: the spec's table.
  TaskGenerator generator(TaskKind::kCompositional, Difficulty::kHard, 42);
  std::vector<Task> tasks;
  for (int i = 0; i < 8; ++i) tasks.push_back(generator.next());
  CHECK(tasks[0].question == "What is zorplex('umbrella') * zorplex('dog') * zorplex('apple')?");
  CHECK(tasks[0].answer == 30 * 95 * 82);
  CHECK(tasks[3].question == "What is zorplex('cat') + zorplex('sun') + zorplex('night')?");
  CHECK(tasks[3].answer == 4 + 12 + 12);
  // (river - night) - house = (4 - 12) - 18 = -26; right to left would be 10.
  CHECK(tasks[7].question == "What is zorplex('river') - zorplex('night') - zorplex('house')?");
  CHECK(tasks[7].answer == -26);
  CHECK(tasks[7].op == '-');
  for (const Task& task : tasks) {
    REQUIRE(task.words.size() == 3);
    CHECK(task.words[0] != task.words[1]);
    CHECK(task.words[1] != task.words[2]);
    CHECK(task.words[0] != task.words[2]);
  }
}

TEST_CASE("tasks: simple and multi_step draw one word by choice", "[rl][tasks]") {
  // CPython: Random(42).choice(words) x5 = umbrella dog apple xray ice.
  const std::vector<std::string> expected = {"umbrella", "dog", "apple", "xray", "ice"};
  TaskGenerator simple(TaskKind::kSimple, Difficulty::kEasy, 42);
  TaskGenerator multi(TaskKind::kMultiStep, Difficulty::kEasy, 42);
  for (const std::string& word : expected) {
    const Task s = simple.next();
    const Task m = multi.next();
    CHECK(s.question == "What is the zorplex value of '" + word + "'?");
    CHECK(s.answer == spec_value(word));
    CHECK(m.question == s.question);
    CHECK(m.answer == s.answer);
  }
  // Seed 7, CPython: kite 8, elephant 7, moon 28.
  TaskGenerator seven(TaskKind::kSimple, Difficulty::kEasy, 7);
  CHECK(seven.next().answer == 8);
  CHECK(seven.next().words == std::vector<std::string>{"elephant"});
}

TEST_CASE("tasks: the recursive first task for seed 42 is elephant -> xray -> grape, 29", "[rl][tasks]") {
  TaskGenerator generator(TaskKind::kRecursive, Difficulty::kEasy, 42);
  const Task first = generator.next();
  CHECK(first.question == "What is the zorplex value of 'elephant'?");
  CHECK(first.chain == std::vector<std::string>{"elephant", "xray", "grape"});
  CHECK(first.answer == 29);
  CHECK(first.answer == spec_value("grape"));
  // The next nine, CPython running the original set-up (answers: the spec's table).
  const std::vector<std::pair<std::string, std::string>> rest = {
      {"xray", "grape"}, {"house", "piano"}, {"river", "banana"}, {"apple", "tree"}, {"ice", "tree"},
      {"cat", "fish"},   {"ice", "tree"},    {"night", "banana"}, {"dog", "piano"}};
  for (const auto& [word, terminal] : rest) {
    const Task task = generator.next();
    CHECK(task.words == std::vector<std::string>{word});
    CHECK(task.chain.back() == terminal);
    CHECK(task.answer == spec_value(terminal));
  }
}

TEST_CASE("tasks: the recursive map keeps insertion order, terminals first", "[rl][tasks]") {
  // CPython, original set-up at seed 42: the dict's keys in order.
  const std::vector<std::string> expected_order = {
      "queen", "moon",     "jungle", "zebra",  "tree",  "grape", "fish",   "kite",    "piano",
      "water", "lemon",    "sun",    "banana", "ocean", "xray",  "yellow", "night",   "river",
      "cat",   "elephant", "violet", "house",  "ice",   "apple", "dog",    "umbrella"};
  PythonRandom rng(42);
  const RedirectMap map = RedirectMap::build(ValueTable(42), rng);
  std::vector<std::string> order;
  for (const RedirectEntry& entry : map.entries()) order.push_back(entry.word);
  CHECK(order == expected_order);
  CHECK(map.redirect_words().size() == 13);
  REQUIRE(map.find("elephant") != nullptr);
  CHECK(map.find("elephant")->target == "xray");
  CHECK(map.find("dog")->target == "ocean");
  CHECK_FALSE(map.find("queen")->is_redirect);
  CHECK(map.find("queen")->value == 5);
}

// ---- tools ----

TEST_CASE("tools: GETKEY[apple] for seed 42 is ZK_6368CC and FETCH reads it back", "[rl][tools]") {
  CHECK(make_key("apple", 42).value() == "ZK_6368CC");
  // CPython hashlib: banana at seed 7, apple at seed -3.
  CHECK(make_key("banana", 7).value() == "ZK_AFF89E");
  CHECK(make_key("apple", -3).value() == "ZK_96EB52");
  const TaskGenerator generator(TaskKind::kMultiStep, Difficulty::kEasy, 42);
  const Toolbox& tools = generator.tools();
  CHECK(tools.execute({"GETKEY", "apple"}).text == "ZK_6368CC");
  CHECK(tools.execute({"GETKEY", "APPLE"}).text == "ZK_6368CC");
  const ToolResult fetched = tools.execute({"FETCH", "zk_6368cc"});
  CHECK(fetched.number == 82);
  CHECK(fetched.text == "82");
  CHECK(tools.execute({"FETCH", "ZK_89B6A8"}).number == 15);  // banana's key (CPython)
}

TEST_CASE("tools: unknown words, keys and tools give the spec's strings", "[rl][tools]") {
  const TaskGenerator multi(TaskKind::kMultiStep, Difficulty::kEasy, 42);
  CHECK(multi.tools().execute({"GETKEY", "aardvark"}).text == "UNKNOWN_WORD");
  CHECK(multi.tools().execute({"FETCH", "ZK_000000"}).text == "INVALID_KEY");
  CHECK_FALSE(multi.tools().execute({"FETCH", "ZK_000000"}).is_integer());
  CHECK(multi.tools().execute({"LOOKUP", "apple"}).text == "UNKNOWN_TOOL");
  const TaskGenerator simple(TaskKind::kSimple, Difficulty::kEasy, 42);
  CHECK(simple.tools().execute({"LOOKUP", "Apple"}).number == 82);
  CHECK(simple.tools().execute({"LOOKUP", "aardvark"}).text == "UNKNOWN");
  CHECK(simple.tools().execute({"GETKEY", "apple"}).text == "UNKNOWN_TOOL");
  CHECK(simple.tools().execute({"SEARCH", "apple"}).text == "UNKNOWN_TOOL");
  const TaskGenerator recursive(TaskKind::kRecursive, Difficulty::kEasy, 42);
  CHECK(recursive.tools().execute({"LOOKUP", "elephant"}).text == "SEE: xray");
  CHECK_FALSE(recursive.tools().execute({"LOOKUP", "elephant"}).is_integer());
  CHECK(recursive.tools().execute({"LOOKUP", "xray"}).text == "SEE: grape");
  CHECK(recursive.tools().execute({"LOOKUP", "grape"}).number == 29);
  CHECK(recursive.tools().execute({"LOOKUP", "aardvark"}).text == "UNKNOWN");
}

// ---- protocol ----

TEST_CASE("protocol: tool calls parse in any case, with optional quotes, in text order", "[rl][protocol]") {
  const std::vector<ToolCall> calls = parse_tool_calls(
      "LOOKUP[apple] then lookup['Banana'] and Lookup[\"cat\"], FETCH[zk_6368cc] GETKEY[dog]");
  REQUIRE(calls.size() == 5);
  CHECK(calls[0].name == "LOOKUP");
  CHECK(calls[0].argument == "apple");
  CHECK(calls[1].name == "LOOKUP");
  CHECK(calls[1].argument == "Banana");
  CHECK(calls[2].argument == "cat");
  CHECK(calls[3].name == "FETCH");
  CHECK(calls[3].argument == "zk_6368cc");
  CHECK(calls[4].name == "GETKEY");
  CHECK(calls[4].argument == "dog");
}

TEST_CASE("protocol: what is not a tool call", "[rl][protocol]") {
  CHECK(parse_tool_calls("LOOKUP(apple) LOOKUP[] LOOKUP[two words] LOOKUP[apple").empty());
  CHECK(parse_tool_calls("FETCH[apple] FETCH[ZK_]").empty());  // a FETCH key starts with ZK_
  CHECK(parse_tool_calls("SEARCH[apple] [ANSWER] 5 [Result: 82]").empty());
}

TEST_CASE("protocol: results are injected as newline, [Result: v], newline", "[rl][protocol]") {
  CHECK(result_injection({ToolResult::of_integer(30)}) == "\n[Result: 30]\n");
  CHECK(result_injection({ToolResult::of_integer(30), ToolResult::of_text("SEE: xray")}) ==
        "\n[Result: 30, SEE: xray]\n");
}

TEST_CASE("protocol: the turn stops at a complete tool call, end of sequence or the budget",
          "[rl][protocol]") {
  CHECK(check_turn_stop("Let me look", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("LOOKUP[apple", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("LOOKUP[apple]", false) == TurnStop::kToolCall);
  CHECK(check_turn_stop("getkey['apple']", false) == TurnStop::kToolCall);
  CHECK(check_turn_stop("no call here", true) == TurnStop::kEndOfSequence);
  CHECK(check_turn_stop("still going", false, 149) == TurnStop::kContinue);
  CHECK(check_turn_stop("still going", false, 150) == TurnStop::kTokenBudget);
}

TEST_CASE("protocol: a multi-digit answer is not cut short by the stop rule (defect fix)", "[rl][protocol]") {
  // The original stopped as soon as "[ANSWER]" was followed by one digit. Feed
  // "30 + 95 = 125. [ANSWER] 125." one character at a time, as a generator would.
  const std::string full = "30 + 95 = 125. [ANSWER] 125.";
  std::string turn;
  TurnStop stop = TurnStop::kContinue;
  for (char c : full) {
    turn += c;
    stop = check_turn_stop(turn, false);
    if (stop != TurnStop::kContinue) break;
  }
  CHECK(stop == TurnStop::kAnswer);
  CHECK(turn == full);
  CHECK(check_turn_stop("[ANSWER] 1", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("[ANSWER] 12", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("[ANSWER] 125\n", false) == TurnStop::kAnswer);
  CHECK(check_turn_stop("[ANSWER] 125", true) == TurnStop::kAnswer);
  CHECK(check_turn_stop("[ANSWER] -", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("[ANSWER] -26", false) == TurnStop::kContinue);
  CHECK(check_turn_stop("[ANSWER] -26 ", false) == TurnStop::kAnswer);
  // The stopped text extracts the whole number.
  CHECK(extracted_value(extract_answer(TaskKind::kCompositional, turn, {})) == 125);
}

TEST_CASE("protocol: an episode runs calls, injects results and ends on an answer", "[rl][protocol]") {
  const TaskGenerator generator(TaskKind::kCompositional, Difficulty::kEasy, 42);
  Episode episode(generator.tools());
  Episode::TurnOutcome first = episode.add_turn("LOOKUP[umbrella]");
  CHECK(first.end == EpisodeEnd::kNotOver);
  CHECK(first.injection == "\n[Result: 30]\n");
  CHECK(episode.add_turn("LOOKUP[dog]").injection == "\n[Result: 95]\n");
  const Episode::TurnOutcome last = episode.add_turn("30 + 95 = 125. [ANSWER] 125");
  CHECK(last.end == EpisodeEnd::kAnswered);
  CHECK(last.injection.empty());
  CHECK(episode.turns() == 3);
  CHECK(episode.transcript() ==
        "LOOKUP[umbrella]\n[Result: 30]\nLOOKUP[dog]\n[Result: 95]\n30 + 95 = 125. [ANSWER] 125");
  CHECK(episode.calls().size() == 2);
  // The injected results, where a trainer masks the loss: offsets 16 and 41.
  REQUIRE(episode.injected_spans().size() == 2);
  CHECK(episode.injected_spans()[0].offset == 16);
  CHECK(episode.transcript().substr(16, episode.injected_spans()[0].length) == "\n[Result: 30]\n");
  CHECK(episode.injected_spans()[1].offset == 16 + 14 + 11);
  CHECK(episode.transcript().substr(41, episode.injected_spans()[1].length) == "\n[Result: 95]\n");
  const Score score =
      score_episode(TaskKind::kCompositional, 125, episode.transcript(), episode.calls(), Shaping::kOriginal);
  CHECK(score.correct);
  CHECK(score.reward == Approx(1.2));
  // A finished episode ignores further turns.
  CHECK(episode.add_turn("LOOKUP[cat]").end == EpisodeEnd::kAnswered);
  CHECK(episode.calls().size() == 2);
}

TEST_CASE("protocol: an episode ends without a tool call or after five turns", "[rl][protocol]") {
  const TaskGenerator generator(TaskKind::kSimple, Difficulty::kEasy, 42);
  Episode quiet(generator.tools());
  CHECK(quiet.add_turn("I think it is 30.").end == EpisodeEnd::kNoToolCall);
  Episode busy(generator.tools());
  for (int i = 0; i < 4; ++i) CHECK(busy.add_turn("LOOKUP[cat]").end == EpisodeEnd::kNotOver);
  CHECK(busy.add_turn("LOOKUP[cat]").end == EpisodeEnd::kTurnLimit);
  CHECK(busy.calls().size() == 5);
  // A turn with a call and an answer ends the episode without running the call.
  Episode both(generator.tools());
  CHECK(both.add_turn("LOOKUP[cat] [ANSWER] 4").end == EpisodeEnd::kAnswered);
  CHECK(both.calls().empty());
}

// ---- extraction ----

TEST_CASE("extraction: compositional rules in order", "[rl][extraction]") {
  auto extract = [](const std::string& text) { return extract_answer(TaskKind::kCompositional, text, {}); };
  // 1. the last [ANSWER] <int>, minus allowed, over every later rule.
  Extraction e = extract("The answer is 5. [ANSWER] 3 then [ANSWER] -26 = 9");
  CHECK(e.rule == ExtractionRule::kAnswerTag);
  CHECK(extracted_value(e) == -26);
  // The tag is case-sensitive: "[answer]" falls through (here to the last integer).
  e = extract("[answer] 5 and 6");
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == 6);
  // 2. the last answer phrase, any case, over "=" and the last integer.
  e = extract("x = 3. The Answer is -8, and answer: 14 while 99 = 2");
  CHECK(e.rule == ExtractionRule::kAnswerPhrase);
  CHECK(extracted_value(e) == 14);
  CHECK(extracted_value(extract("so ANSWER IS 7 of 9")) == 7);
  // 3. "= <int>" at the very end, optionally with ".".
  e = extract("30 + 95 = 125.");
  CHECK(e.rule == ExtractionRule::kTrailingEquals);
  CHECK(extracted_value(e) == 125);
  CHECK(extracted_value(extract("4 - 12 - 18 = -26\n")) == -26);
  // "=" not at the end: the last integer, with its minus sign.
  e = extract("30 + 95 = 125 then -7 apples");
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == -7);
  // 4. the last integer can be an injected result.
  e = extract("LOOKUP[dog]\n[Result: 95]\n");
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == 95);
  // 5. nothing.
  e = extract("no idea");
  CHECK(e.rule == ExtractionRule::kNone);
  CHECK_FALSE(e.answer.has_value());
}

TEST_CASE("extraction: simple rules in order", "[rl][extraction]") {
  const std::vector<ExecutedCall> calls = {executed("LOOKUP", "aardvark", ToolResult::of_text("UNKNOWN")),
                                           executed("LOOKUP", "umbrella", ToolResult::of_integer(30)),
                                           executed("LOOKUP", "dog", ToolResult::of_integer(95))};
  Extraction e = extract_answer(TaskKind::kSimple, "[ANSWER] 31", calls);
  CHECK(e.rule == ExtractionRule::kAnswerTag);
  CHECK(extracted_value(e) == 31);
  // No minus sign in the tag: "[ANSWER] -5" is not a tag; the first integer result wins.
  e = extract_answer(TaskKind::kSimple, "[ANSWER] -5", calls);
  CHECK(e.rule == ExtractionRule::kFirstToolResult);
  CHECK(extracted_value(e) == 30);
  e = extract_answer(TaskKind::kSimple, "maybe 17 or -4", {calls[0]});
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == 4);
  CHECK(extract_answer(TaskKind::kSimple, "none", {}).rule == ExtractionRule::kNone);
}

TEST_CASE("extraction: multi_step rules in order", "[rl][extraction]") {
  const std::vector<ExecutedCall> calls = {executed("GETKEY", "apple", ToolResult::of_text("ZK_6368CC")),
                                           executed("LOOKUP", "x", ToolResult::of_integer(99)),
                                           executed("FETCH", "ZK_6368CC", ToolResult::of_integer(82)),
                                           executed("FETCH", "ZK_89B6A8", ToolResult::of_integer(15))};
  Extraction e = extract_answer(TaskKind::kMultiStep, "[ANSWER] 82 [ANSWER] 83", calls);
  CHECK(e.rule == ExtractionRule::kAnswerTag);
  CHECK(extracted_value(e) == 83);
  // Only FETCH results count, the first one.
  e = extract_answer(TaskKind::kMultiStep, "it is 7", calls);
  CHECK(e.rule == ExtractionRule::kFirstFetchResult);
  CHECK(extracted_value(e) == 82);
  e = extract_answer(TaskKind::kMultiStep, "ZK_6368CC then 7", {calls[0], calls[1]});
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == 7);
}

TEST_CASE("extraction: recursive rules in order", "[rl][extraction]") {
  const std::vector<ExecutedCall> calls = {executed("LOOKUP", "elephant", ToolResult::of_text("SEE: xray")),
                                           executed("LOOKUP", "grape", ToolResult::of_integer(29)),
                                           executed("LOOKUP", "piano", ToolResult::of_integer(55))};
  Extraction e = extract_answer(TaskKind::kRecursive, "[ANSWER] 29", calls);
  CHECK(e.rule == ExtractionRule::kAnswerTag);
  // The LAST integer result.
  e = extract_answer(TaskKind::kRecursive, "the answer is 3", calls);
  CHECK(e.rule == ExtractionRule::kLastToolResult);
  CHECK(extracted_value(e) == 55);
  const std::vector<ExecutedCall> redirect_only = {calls[0]};
  // The answer phrase before "value of ... is".
  e = extract_answer(TaskKind::kRecursive, "The value of elephant is 30 so the answer is 29. Then 4",
                     redirect_only);
  CHECK(e.rule == ExtractionRule::kAnswerPhrase);
  CHECK(extracted_value(e) == 29);
  e = extract_answer(TaskKind::kRecursive, "The value of elephant is 29. Then 4", redirect_only);
  CHECK(e.rule == ExtractionRule::kValueOfPhrase);
  CHECK(extracted_value(e) == 29);
  // Greedy ".+": the last " is <int>" of the line.
  CHECK(extracted_value(extract_answer(TaskKind::kRecursive, "value of x is 1 and y is 2", {})) == 2);
  e = extract_answer(TaskKind::kRecursive, "SEE: xray, so 29 or maybe -30", redirect_only);
  CHECK(e.rule == ExtractionRule::kLastInteger);
  CHECK(extracted_value(e) == 30);
}

TEST_CASE("extraction: integers read as Python's int() reads them", "[rl][extraction]") {
  CHECK(extracted_value(extract_answer(TaskKind::kCompositional, "[ANSWER] 007", {})) == 7);
  CHECK(extract_answer(TaskKind::kCompositional, "[ANSWER] -0", {}).answer->decimal == "0");
  const Extraction huge =
      extract_answer(TaskKind::kCompositional, "[ANSWER] 123456789012345678901234567890", {});
  REQUIRE(huge.answer.has_value());
  CHECK(huge.answer->decimal == "123456789012345678901234567890");
  CHECK_FALSE(huge.answer->value.has_value());
}

// ---- scoring ----

TEST_CASE("scoring: failure modes, first that applies", "[rl][scoring]") {
  CHECK(classify_failure(true, false, 9) == FailureMode::kSuccess);
  CHECK(classify_failure(false, false, 9) == FailureMode::kWrongFormat);
  CHECK(classify_failure(false, true, 4) == FailureMode::kToolSpam);
  CHECK(classify_failure(false, true, 3) == FailureMode::kWrongAnswer);
  CHECK(std::string(failure_mode_name(FailureMode::kToolSpam)) == "tool_spam");
}

TEST_CASE("scoring: the original shaping pays the tag even when wrong", "[rl][scoring]") {
  CHECK(shaped_reward(Shaping::kOriginal, true, true, 2) == Approx(1.2));
  CHECK(shaped_reward(Shaping::kOriginal, true, true, 4) == Approx(1.0));
  CHECK(shaped_reward(Shaping::kOriginal, true, false, 0) == Approx(1.0));
  CHECK(shaped_reward(Shaping::kOriginal, false, true, 0) == Approx(0.2));  // the farmable guess
  CHECK(shaped_reward(Shaping::kOriginal, false, false, 3) == Approx(-0.1));
}

TEST_CASE("scoring: tag_needs_correct pays the tag only with a correct answer", "[rl][scoring]") {
  CHECK(shaped_reward(Shaping::kTagNeedsCorrect, true, true, 2) == Approx(1.2));
  CHECK(shaped_reward(Shaping::kTagNeedsCorrect, false, true, 0) == Approx(0.0));
  CHECK(shaped_reward(Shaping::kTagNeedsCorrect, false, true, 5) == Approx(-0.3));
  CHECK(shaped_reward(Shaping::kTagNeedsCorrect, true, false, 1) == Approx(1.0));
}

TEST_CASE("scoring: transcripts, negative answers and tool counts", "[rl][scoring]") {
  const TaskGenerator hard(TaskKind::kCompositional, Difficulty::kHard, 42);
  // (4 - 12) - 18 = -26 (the spec's table).
  const std::string text =
      "LOOKUP[river]\n[Result: 4]\nLOOKUP[night]\n[Result: 12]\nLOOKUP[house]\n[Result: 18]\n"
      "4 - 12 - 18 = -26. [ANSWER] -26";
  Score score = score_transcript(hard.tools(), -26, text, Shaping::kOriginal);
  CHECK(score.correct);
  CHECK(score.tool_calls == 3);
  CHECK(score.has_answer_tag);
  CHECK(score.failure_mode == FailureMode::kSuccess);
  CHECK(score.reward == Approx(1.1));
  // The same negative number is not a tag for simple, which reads no minus sign.
  const TaskGenerator simple(TaskKind::kSimple, Difficulty::kEasy, 42);
  score = score_transcript(simple.tools(), -26, "[ANSWER] -26", Shaping::kOriginal);
  CHECK_FALSE(score.correct);
  CHECK(score.failure_mode == FailureMode::kWrongAnswer);
  // Wrong, tagged, four calls: tool spam.
  score = score_transcript(simple.tools(), 30, "LOOKUP[a] LOOKUP[b] LOOKUP[c] LOOKUP[d] [ANSWER] 1",
                           Shaping::kTagNeedsCorrect);
  CHECK(score.tool_calls == 4);
  CHECK(score.failure_mode == FailureMode::kToolSpam);
  CHECK(score.reward == Approx(-0.2));
  // No answer at all is never correct, even for a task without an answer.
  score = score_episode(TaskKind::kSimple, std::nullopt, "nothing", {}, Shaping::kOriginal);
  CHECK_FALSE(score.correct);
  CHECK(score.failure_mode == FailureMode::kWrongFormat);
  CHECK(score.reward == Approx(0.0));
}

// ---- names ----

TEST_CASE("names: bad kinds, difficulties and shapings are errors naming the valid values", "[rl][names]") {
  CHECK(parse_kind("multi_step").value() == TaskKind::kMultiStep);
  const Result<TaskKind> kind = parse_kind("Simple");
  REQUIRE_FALSE(kind.ok());
  CHECK(kind.error().message ==
        "unknown task kind 'Simple': expected one of simple, compositional, multi_step, recursive");
  CHECK(parse_difficulty("hard").value() == Difficulty::kHard);
  REQUIRE_FALSE(parse_difficulty("extreme").ok());
  CHECK(parse_difficulty("extreme").error().message ==
        "unknown difficulty 'extreme': expected one of easy, medium, hard");
  CHECK(parse_shaping("tag_needs_correct").value() == Shaping::kTagNeedsCorrect);
  CHECK_FALSE(parse_shaping("").ok());
}
