// zorplex/zorplex.h: the whole Zorplex task environment in one include.
//
// Zorplex is a small tool-use benchmark (docs/zorplex.md): look up made-up
// "zorplex values" of common words with a tool, combine them, and answer as
// "[ANSWER] <integer>". This library reproduces the original Python tasks
// for the same seed and scores transcripts the same way, with the original's
// answer-truncation defect fixed. It depends on nothing but OpenSSL (MD5).
//
// Contract: see each header. In short: TaskGenerator (tasks.h) is one
// thread's object; Toolbox, ValueTable and RedirectMap are immutable and
// shareable; Episode borrows a Toolbox; parsing, stop rule, extraction and
// scoring are pure functions. Bad names come back as Error values; nothing
// throws on bad input.
#pragma once

#include "zorplex/episode.h"
#include "zorplex/extraction.h"
#include "zorplex/keys.h"
#include "zorplex/kinds.h"
#include "zorplex/patterns.h"
#include "zorplex/protocol.h"
#include "zorplex/python_random.h"
#include "zorplex/redirect_map.h"
#include "zorplex/result.h"
#include "zorplex/scoring.h"
#include "zorplex/tasks.h"
#include "zorplex/text_scan.h"
#include "zorplex/tools.h"
#include "zorplex/value_table.h"
