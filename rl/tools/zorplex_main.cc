// zorplex: the Zorplex task environment from the command line.
//
//   zorplex tasks --kind K [--difficulty D] --seed S --count N   tasks as JSON lines
//   zorplex tool  --kind K [--difficulty D] --seed S 'CALL[arg]'  one tool call's result
//   zorplex score --kind K --seed S --answer N [--shaping ...]    score a transcript on stdin
//   zorplex table --seed S                                        the value table
//
// Exit codes: 0 success, 2 bad usage (unknown kind, difficulty or shaping,
// unparsable tool call, bad option), 1 an unexpected internal error.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "zorplex/zorplex.h"

namespace {

using Json = nlohmann::ordered_json;

constexpr int kUsageError = 2;

struct KindOptions {
  std::string kind;
  std::string difficulty = "easy";
  std::int64_t seed = 0;
};

void add_kind_options(CLI::App* command, KindOptions* options) {
  command->add_option("--kind", options->kind, "Task kind: " + zorplex::valid_kind_names())->required();
  command
      ->add_option(
          "--difficulty", options->difficulty,
          "Compositional difficulty: " + zorplex::valid_difficulty_names() + " (other kinds ignore it)")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Seed of the value table and of the task generator")
      ->required();
}

// The generator for the options, or an error message on stderr and nullopt.
std::optional<zorplex::TaskGenerator> make_generator(const KindOptions& options) {
  zorplex::Result<zorplex::TaskKind> kind = zorplex::parse_kind(options.kind);
  if (!kind) {
    std::cerr << "zorplex: " << kind.error().message << "\n";
    return std::nullopt;
  }
  zorplex::Result<zorplex::Difficulty> difficulty = zorplex::parse_difficulty(options.difficulty);
  if (!difficulty) {
    std::cerr << "zorplex: " << difficulty.error().message << "\n";
    return std::nullopt;
  }
  return zorplex::TaskGenerator(kind.value(), difficulty.value(), options.seed);
}

Json task_json(const zorplex::Task& task, long long index) {
  Json out;
  out["index"] = index;
  out["kind"] = zorplex::kind_name(task.kind);
  out["difficulty"] = task.kind == zorplex::TaskKind::kCompositional
                          ? Json(zorplex::difficulty_name(task.difficulty))
                          : Json();
  out["question"] = task.question;
  out["answer"] = task.answer ? Json(*task.answer) : Json();
  if (task.kind == zorplex::TaskKind::kCompositional) {
    out["words"] = task.words;
    out["op"] = std::string(1, task.op);
  } else {
    out["word"] = task.words.empty() ? std::string() : task.words.front();
  }
  if (task.kind == zorplex::TaskKind::kMultiStep) out["key"] = task.key;
  if (task.kind == zorplex::TaskKind::kRecursive) out["chain"] = task.chain;
  return out;
}

int run_tasks(const KindOptions& options, long long count) {
  std::optional<zorplex::TaskGenerator> generator = make_generator(options);
  if (!generator) return kUsageError;
  for (long long i = 0; i < count; ++i) std::cout << task_json(generator->next(), i).dump() << "\n";
  return 0;
}

int run_tool(const KindOptions& options, const std::string& call_text) {
  std::optional<zorplex::TaskGenerator> generator = make_generator(options);
  if (!generator) return kUsageError;
  std::vector<zorplex::ToolCall> calls = zorplex::parse_tool_calls(call_text);
  if (calls.size() != 1) {
    std::cerr
        << "zorplex: expected exactly one tool call (LOOKUP[word], GETKEY[word] or FETCH[ZK_...]), found "
        << calls.size() << " in '" << call_text << "'\n";
    return kUsageError;
  }
  std::cout << generator->tools().execute(calls.front()).text << "\n";
  return 0;
}

Json answer_json(const zorplex::Extraction& extraction) {
  if (!extraction.answer) return Json();
  // A number too long for 64 bits is reported as its decimal string.
  if (extraction.answer->value) return Json(*extraction.answer->value);
  return Json(extraction.answer->decimal);
}

int run_score(const KindOptions& options, std::int64_t answer, const std::string& shaping_text) {
  std::optional<zorplex::TaskGenerator> generator = make_generator(options);
  if (!generator) return kUsageError;
  zorplex::Result<zorplex::Shaping> shaping = zorplex::parse_shaping(shaping_text);
  if (!shaping) {
    std::cerr << "zorplex: " << shaping.error().message << "\n";
    return kUsageError;
  }
  const std::string transcript((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const zorplex::Score score =
      zorplex::score_transcript(generator->tools(), answer, transcript, shaping.value());
  Json out;
  out["kind"] = zorplex::kind_name(generator->kind());
  out["extracted_answer"] = answer_json(score.extraction);
  out["extraction_rule"] = zorplex::extraction_rule_name(score.extraction.rule);
  out["correct"] = score.correct;
  out["failure_mode"] = zorplex::failure_mode_name(score.failure_mode);
  out["reward"] = score.reward;
  out["shaping"] = zorplex::shaping_name(shaping.value());
  out["tool_calls"] = score.tool_calls;
  out["has_answer_tag"] = score.has_answer_tag;
  std::cout << out.dump() << "\n";
  return 0;
}

int run_table(std::int64_t seed) {
  const zorplex::ValueTable table(seed);
  for (std::size_t i = 0; i < zorplex::words().size(); ++i) {
    std::cout << zorplex::words()[i] << " " << table.value_at(i) << "\n";
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"Zorplex, a small tool-use task environment: generate tasks, run tools, score transcripts."};
  app.require_subcommand(1);

  KindOptions tasks_options;
  long long count = 0;
  CLI::App* tasks = app.add_subcommand("tasks",
                                       "Print tasks as JSON lines (index, kind, difficulty, question, "
                                       "answer, and the words/op, key or chain)");
  add_kind_options(tasks, &tasks_options);
  tasks->add_option("--count", count, "How many tasks, from the first")
      ->required()
      ->check(CLI::Range(0LL, 10000000LL));

  KindOptions tool_options;
  std::string call_text;
  CLI::App* tool =
      app.add_subcommand("tool", "Run one tool call, e.g. 'GETKEY[apple]', and print its result");
  add_kind_options(tool, &tool_options);
  tool->add_option("call", call_text, "The call: LOOKUP[word], GETKEY[word] or FETCH[ZK_...]")->required();

  KindOptions score_options;
  std::int64_t answer = 0;
  std::string shaping = "original";
  CLI::App* score = app.add_subcommand(
      "score",
      "Score a transcript (model text plus injected results) read from stdin; print one JSON object");
  add_kind_options(score, &score_options);
  score->add_option("--answer", answer, "The task's correct answer")->required();
  score->add_option("--shaping", shaping, "Reward shaping: original or tag_needs_correct")
      ->capture_default_str();

  std::int64_t table_seed = 0;
  CLI::App* table = app.add_subcommand("table", "Print the value table: one 'word value' per line");
  table->add_option("--seed", table_seed, "Seed of the value table")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  if (tasks->parsed()) return run_tasks(tasks_options, count);
  if (tool->parsed()) return run_tool(tool_options, call_text);
  if (score->parsed()) return run_score(score_options, answer, shaping);
  return run_table(table_seed);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "zorplex: internal error: " << e.what() << "\n";
    return 1;
  }
}
