#!/usr/bin/env python3
"""Size limits of the sources (issue #19, docs/ARCHITECTURE.md "Size limits"):
no source file over 800 lines and no function over 120 lines, outside the
tests. Run by `meson test --suite arch`.

  check_size.py SRCDIR [--allow FILE]    check; exit 1 on any offender that
                                         the allow-list does not name
  check_size.py --list SRCDIR            print every offender (allow-list form)
  check_size.py --self-test              plant a long function and a long
                                         file in a temporary tree; fail unless
                                         both are caught (and an allow-listed
                                         one is not)

Scanned: *.c, *.h, *.cu, *.cuh (functions by brace matching after removing
comments, strings and character literals) and *.py (functions from the ast)
under the source tree, skipping tests (any folder named tests, test or
fuzz), build folders (build*, a folder holding meson-private), .git, out/
and __pycache__. Shell scripts and documents count for the file limit only
when they are code (*.sh).

The allow-list (scripts/size_allow.txt) names known offenders, one a line:
"PATH" for a file over the line limit, "PATH:FUNCTION" for a function over
the function limit; '#' starts a comment. A listed offender passes; a new one
fails. An entry that no longer offends is reported (so that it can be
removed) but does not fail: shrinking a file is never an error.
Python 3, standard library only.
"""

import ast
import os
import re
import sys
import tempfile

FILE_LIMIT = 800
FUNC_LIMIT = 120

C_EXT = (".c", ".h", ".cu", ".cuh")
PY_EXT = (".py",)
SH_EXT = (".sh",)
SKIP_DIRS = {"tests", "test", "fuzz", ".git", "out", "__pycache__", "subprojects"}


def skipped_dir(path, name):
    if name in SKIP_DIRS or name.startswith("build") or name.startswith("."):
        return True
    return os.path.isdir(os.path.join(path, name, "meson-private"))


def source_files(src):
    for dirpath, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not skipped_dir(dirpath, d))
        for n in sorted(names):
            if n.endswith(C_EXT + PY_EXT + SH_EXT):
                yield os.path.relpath(os.path.join(dirpath, n), src).replace(os.sep, "/")


def strip_c(text):
    """text with comments, string and character literals blanked (newlines
    kept, so line numbers stay), and preprocessor lines blanked."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#" or (at_line_start and c in " \t" and
                                          text[i:].lstrip(" \t").startswith("#")):
            # A directive, with its continuation lines.
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


NAME_RE = re.compile(r"([A-Za-z_]\w*)\s*$")
EXTERN_C_RE = re.compile(r'\bextern\s*"[^"\n]*"\s*$')
NOT_FUNCS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def c_functions(text):
    """[(name, first line, last line)] of the function definitions in C
    text: a '{' at file depth 0 whose preceding code ends with ')' (then
    optional attributes) and names an identifier before the '('."""
    s = strip_c(text)
    funcs = []
    depth = 0
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "{":
            if depth == 0 and EXTERN_C_RE.search(s[:i]):
                i += 1  # extern "C" { ... }: its functions are at file level
                continue
            if depth == 0:
                name, start = function_head(s, i)
                end = matching_brace(s, i)
                if name:
                    funcs.append((name, s.count("\n", 0, start) + 1, s.count("\n", 0, end) + 1))
                i = end + 1
                continue
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
        i += 1
    return funcs


def matching_brace(s, i):
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


def function_head(s, brace):
    """(name, offset of the name) when the '{' at `brace` opens a function
    body, else (None, brace)."""
    head = s[:brace].rstrip()
    # Trailing attributes or qualifiers after the parameter list.
    while True:
        m = re.search(r"(__attribute__\s*\(\(.*\)\)|\b(const|noexcept|override))\s*$", head)
        if not m:
            break
        head = head[:m.start()].rstrip()
    if not head.endswith(")"):
        return None, brace
    depth = 0
    for j in range(len(head) - 1, -1, -1):
        if head[j] == ")":
            depth += 1
        elif head[j] == "(":
            depth -= 1
            if depth == 0:
                m = NAME_RE.search(head[:j])
                if not m or m.group(1) in NOT_FUNCS:
                    return None, brace
                # "= (type)" or a macro invocation at file level is no function.
                before = head[:m.start()].rstrip()
                if before.endswith("="):
                    return None, brace
                return m.group(1), m.start()
    return None, brace


def py_functions(text, rel):
    try:
        tree = ast.parse(text, rel)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, node.lineno, node.end_lineno))
    return out


def offenders(src):
    """[(key, message)]: key "PATH" or "PATH:FUNCTION"."""
    found = []
    for rel in source_files(src):
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > FILE_LIMIT:
            found.append((rel, "%s: %d lines (limit %d)" % (rel, lines, FILE_LIMIT)))
        if rel.endswith(C_EXT):
            funcs = c_functions(text)
        elif rel.endswith(PY_EXT):
            funcs = py_functions(text, rel)
        else:
            funcs = []
        seen = set()
        for name, first, last in funcs:
            length = last - first + 1
            key = "%s:%s" % (rel, name)
            if length > FUNC_LIMIT and key not in seen:
                seen.add(key)
                found.append((key, "%s:%d: function %s: %d lines (limit %d)" % (
                    rel, first, name, length, FUNC_LIMIT)))
    return found


def read_allow(path):
    allow = set()
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    allow.add(line)
    return allow


def check(src, allow_path):
    allow = read_allow(allow_path)
    found = offenders(src)
    bad = [msg for key, msg in found if key not in allow]
    stale = sorted(allow - {key for key, _ in found})
    for key in stale:
        print("note: %s no longer exceeds its limit: remove it from the allow-list" % key)
    for msg in bad:
        print("error: " + msg)
    print("size: %d files scanned, %d offenders, %d allow-listed, %d new" % (
        sum(1 for _ in source_files(src)), len(found), len(found) - len(bad), len(bad)))
    return 1 if bad else 0


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "lib"))
        os.makedirs(os.path.join(tmp, "tests"))
        body = "".join("  x += %d; /* { */\n" % i for i in range(FUNC_LIMIT))
        long_fn = ("static int long_one(int x) {\n" + body + "  return x;\n}\n"
                   "int short_one(void) { return 1; }\n")
        short_fn = "int fine(int x) {\n  return x + '}';\n}\n"
        struct = "static const struct s table[] = {\n" + "  {1, 2},\n" * 200 + "};\n"
        with open(os.path.join(tmp, "lib", "a.c"), "w") as f:
            f.write(long_fn + short_fn + struct)
        with open(os.path.join(tmp, "lib", "k.cu"), "w") as f:
            f.write('#ifdef __cplusplus\nextern "C" {\n#endif\n' +
                    long_fn.replace("long_one", "in_extern_c") + '#ifdef __cplusplus\n}\n#endif\n')
        with open(os.path.join(tmp, "lib", "big.h"), "w") as f:
            f.write("/* x */\n" * (FILE_LIMIT + 1))
        with open(os.path.join(tmp, "lib", "ok.c"), "w") as f:
            f.write(short_fn + "/* x */\n" * (FILE_LIMIT - 3))
        with open(os.path.join(tmp, "tests", "t.c"), "w") as f:
            f.write(long_fn + "/* x */\n" * (FILE_LIMIT + 1))
        with open(os.path.join(tmp, "lib", "p.py"), "w") as f:
            f.write("def long_py():\n" + "    x = 1\n" * (FUNC_LIMIT + 1))
        keys = {key for key, _ in offenders(tmp)}
        want = {"lib/a.c:long_one", "lib/big.h", "lib/p.py:long_py", "lib/k.cu:in_extern_c"}
        if keys != want:
            failures.append("found %s, expected %s" % (sorted(keys), sorted(want)))
        allow = os.path.join(tmp, "allow.txt")
        with open(allow, "w") as f:
            f.write("# known\nlib/big.h\nlib/p.py:long_py\nlib/a.c:long_one\n"
                    "lib/k.cu:in_extern_c\n")
        if check(tmp, allow) != 0:
            failures.append("an allow-listed offender failed")
        with open(allow, "w") as f:
            f.write("lib/big.h\nlib/p.py:long_py\nlib/k.cu:in_extern_c\n")
        if check(tmp, allow) != 1:
            failures.append("a long function not on the allow-list passed")
        with open(allow, "w") as f:
            f.write("lib/a.c:long_one\nlib/p.py:long_py\nlib/k.cu:in_extern_c\n")
        if check(tmp, allow) != 1:
            failures.append("a long file not on the allow-list passed")
    for f in failures:
        print("self-test FAILED: " + f)
    if not failures:
        print("self-test: long functions and files are caught, the allow-list is honoured")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) == 3 and argv[1] == "--list":
        for key, msg in offenders(argv[2]):
            print("%-60s # %s" % (key, msg))
        return 0
    if len(argv) in (2, 4) and not argv[1].startswith("-"):
        allow = None
        if len(argv) == 4:
            if argv[2] != "--allow":
                print(__doc__)
                return 2
            allow = argv[3]
        return check(argv[1], allow)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
