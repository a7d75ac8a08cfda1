#!/usr/bin/env python3
"""Size limits of the library (issue 31; docs/CodeStyle.md, "Structure").

No library file over 600 lines, and no function over 100 lines: files small
enough to read in one sitting, functions short enough to name. A function that
is a command-line table may opt out with a comment `// size-limit: table` on
the line before it.

Usage: check_sizes.py ROOT [ROOT ...]   checks every .h/.cc under the roots
       check_sizes.py --self-test        plants violations in a temporary tree
                                         and fails unless each is caught
Exit 0 when within the limits, 1 naming every file and function over them.
"""
import os
import re
import sys
import tempfile

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
OPT_OUT = "size-limit: table"


def strip_code(line):
    """The line without comments, string and character literals."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return re.sub(r"//.*", "", line)


def long_functions(path, lines):
    """(length, first line, signature) of each function body over the limit.

    A function is a brace block opened outside any other function, class body
    excepted (so inline member functions count), namespace or extern "C".
    """
    found = []
    stack = []  # 'ns', 'cls', 'fn', 'in'
    start = None
    in_block_comment = False
    for number, raw in enumerate(lines, 1):
        line = raw
        if in_block_comment:
            end = line.find("*/")
            if end < 0:
                continue
            line = line[end + 2:]
            in_block_comment = False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line = line[: line.index("/*")]
            in_block_comment = True
        code = strip_code(line)
        for ch in code:
            if ch == "{":
                if re.match(r'\s*(namespace\b|extern\s+"C")', raw):
                    kind = "ns"
                elif "fn" in stack:
                    kind = "in"
                elif re.match(r"\s*(template\s*<.*>\s*)?(struct|class|union|enum)\b", raw):
                    kind = "cls"
                else:
                    kind = "fn"
                stack.append(kind)
                if kind == "fn" and start is None:
                    start = number
            elif ch == "}" and stack:
                kind = stack.pop()
                if kind == "fn" and start is not None and "fn" not in stack:
                    length = number - start + 1
                    previous = lines[start - 2] if start >= 2 else ""
                    if length > MAX_FUNCTION_LINES and OPT_OUT not in previous:
                        found.append((length, start, lines[start - 1].strip()[:80]))
                    start = None
    return found


def check(roots):
    problems = []
    checked = 0
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                if lines and lines[-1] == "":
                    lines.pop()
                checked += 1
                if len(lines) > MAX_FILE_LINES:
                    problems.append(f"{path}: {len(lines)} lines (at most {MAX_FILE_LINES}): split it by job")
                for length, line, signature in long_functions(path, lines):
                    problems.append(f"{path}:{line}: a function of {length} lines (at most "
                                    f"{MAX_FUNCTION_LINES}): {signature}")
    return checked, problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        ok_dir = os.path.join(tmp, "ok")
        os.makedirs(ok_dir)
        body = "\n".join(f"  x += {i};" for i in range(60))
        with open(os.path.join(ok_dir, "fine.cc"), "w") as f:
            f.write("namespace a {\nclass C {\n public:\n  int f() {\n    return 1;\n  }\n};\n"
                    f"int g(int x) {{\n{body}\n  return x;\n}}\n}}  // namespace a\n")
        long_body = "\n".join(f"  x += {i};  // {{ not a brace" for i in range(120))
        with open(os.path.join(ok_dir, "table.cc"), "w") as f:
            f.write(f"// size-limit: table\nint main(int x) {{\n{long_body}\n  return x;\n}}\n")
        _, problems = check([ok_dir])
        if problems:
            print("self-test: a tree within the limits was refused:\n  " + "\n  ".join(problems))
            return 1
        bad_dir = os.path.join(tmp, "bad")
        os.makedirs(bad_dir)
        with open(os.path.join(bad_dir, "long_function.cc"), "w") as f:
            f.write(f"namespace a {{\nint g(int x) {{\n{long_body}\n  return x;\n}}\n}}\n")
        with open(os.path.join(bad_dir, "long_member.h"), "w") as f:
            f.write(f"struct S {{\n  int g(int x) {{\n{long_body}\n    return x;\n  }}\n}};\n")
        with open(os.path.join(bad_dir, "long_file.h"), "w") as f:
            f.write("\n".join(f"int v{i};" for i in range(MAX_FILE_LINES + 1)) + "\n")
        _, problems = check([bad_dir])
        wanted = ["long_function.cc:2: a function of 123", "long_member.h:2: a function of 123",
                  f"long_file.h: {MAX_FILE_LINES + 1} lines"]
        missing = [w for w in wanted if not any(w in p for p in problems)]
        if missing or len(problems) != len(wanted):
            print("self-test: planted violations not caught as expected:\n  wanted " + str(wanted) +
                  "\n  got " + str(problems))
            return 1
    print("size limits: self-test ok (a long function, a long inline member and a long file are caught)")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2:
        print(__doc__)
        return 2
    checked, problems = check(argv[1:])
    if problems:
        print("size limits exceeded:\n  " + "\n  ".join(problems))
        return 1
    print(f"size limits ok: {checked} files, none over {MAX_FILE_LINES} lines, "
          f"no function over {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
