#!/usr/bin/env python3
"""The module rules of docs/ARCHITECTURE.md ("Modules and dependencies"),
checked against the sources and the built objects, so that a new edge fails
the build's tests instead of waiting for a review to notice it.

  check_modules.py SRCDIR BUILDDIR      check includes and object symbols
  check_modules.py --includes SRCDIR    check includes only (no build needed)
  check_modules.py --public-headers     list the public headers (for meson)
  check_modules.py --self-test SRCDIR BUILDDIR [--cc=CMD]
                                        plant bad edges in a copy and in tiny
                                        objects; fail unless each is caught

Checked: every #include of every module source, internal header, public
header and tool source; that each module has only its registered internal
headers; every symbol a module's library (each module is its own static
library, BUILDDIR/libeplb_MODULE.a.p/MODULE_*.o, built with only its own
dependencies) leaves undefined and another module defines; and that each
public function is declared in the public header of the module defining it;
and that the files of a module in ACYCLIC call each other without a cycle
(the file-level call graph from the same objects: an edge a -> b when a.o
leaves undefined a symbol b.o defines).
Python 3, standard library only; nm from binutils.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# ---- the rules: the one place that says which module may use which -------

# Direct dependencies; a module may use everything these reach.
DEPS = {
    "core": [],
    "traces": ["core"],
    "lp": ["core"],
    "planner": ["traces", "lp"],
    "sim": ["planner"],
    "kernels": ["core"],
    "runtime": ["planner", "kernels"],
    # The tools build on the public API only (INTERNAL_HEADERS is refused).
    "tools/eplb": ["sim", "runtime"],
    "tools/eplbd": ["sim", "runtime"],
}
LIBRARY = ["core", "traces", "lp", "planner", "sim", "kernels", "runtime"]
TOOLS = ["tools/eplb", "tools/eplbd"]

# Each module's internal headers: the only headers in its folder, and the only
# way another module (that may depend on it) reaches its eplb__ symbols.
INTERNAL_HEADERS = {
    "core": {"core/core.h"},
    "traces": {"traces/traces.h"},
    "lp": {"lp/lp.h"},
    "planner": {"planner/planner.h"},
    "sim": {"sim/sim.h"},
    "runtime": {"runtime/runtime.h"},
    # The math headers compile both as C and as CUDA (written once, tested in CI on the CPU).
    "kernels": {"kernels/kernels.h", "kernels/dispatch_math.h", "kernels/split_math.h",
                "kernels/alias_math.h"},
}

# Public headers, by the module that implements what they declare.
PUBLIC_OWNER = {
    "eplb/common.h": "core",
    "eplb/common_tooling.h": "core",
    "eplb/trace.h": "traces",
    "eplb/trace_tooling.h": "traces",
    "eplb/split.h": "lp",
    "eplb/topo.h": "planner",
    "eplb/plan.h": "planner",
    "eplb/coact.h": "planner",
    "eplb/reshare.h": "planner",
    "eplb/plan_tooling.h": "planner",
    "eplb/model.h": "planner",
    "eplb/sim.h": "sim",
    "eplb/sim_tooling.h": "sim",
    "eplb/runtime.h": "runtime",
    "eplb/runtime_device.h": "runtime",
    "eplb/runtime_testing.h": "runtime",
    "eplb/abi.h": "runtime",
    "eplb/shm.h": "runtime",
    "eplb/kernels.h": "kernels",
}
UMBRELLA = "eplb/eplb.h"  # includes every public header: tools only
# The serving API compiles on its own: plans reach it as opaque handles
# (issue #34), so it includes nothing of the planner, traces or kernels.
PUBLIC_ONLY = {"eplb/runtime.h": {"eplb/common.h"}}

# Third-party headers and where they may be included: a module, a tool or a
# single file. CUDA stays in kernels/, so a host build never needs it.
CUDA_HEADERS = {"cuda_runtime.h", "cuda.h", "cuda_bf16.h", "cuda_fp16.h", "cublas_v2.h"}
THIRD_PARTY = {
    "glpk.h": {"lp"},
    "hwloc.h": {"planner/topo_hwloc.c"},
    "nccl.h": {"runtime"},
    "mpi.h": {"runtime"},
    "zstd.h": {"traces"},
    "zlib.h": {"traces"},
    # The modules that read or write JSON, and the tools.
    "jansson.h": {"traces", "planner", "sim", "tools/eplb", "tools/eplbd"},
    "microhttpd.h": {"tools/eplbd"},
    "check.h": set(),  # tests only
}
THIRD_PARTY.update({h: {"kernels"} for h in CUDA_HEADERS})

# C17, POSIX and compiler headers: allowed anywhere. A header on no list is
# an error, so a new third-party dependency has to be placed in THIRD_PARTY.
SYSTEM_HEADERS = {
    "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h",
    "iso646.h", "limits.h", "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h",
    "stdarg.h", "stdatomic.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h",
    "stdnoreturn.h", "string.h", "tgmath.h", "threads.h", "time.h", "uchar.h", "wchar.h",
    "wctype.h",
    "arpa/inet.h", "dirent.h", "dlfcn.h", "fcntl.h", "getopt.h", "libgen.h", "netdb.h",
    "netinet/in.h", "netinet/tcp.h", "poll.h", "pthread.h", "sched.h", "strings.h",
    "sys/file.h", "sys/mman.h", "sys/prctl.h", "sys/resource.h", "sys/socket.h",
    "sys/stat.h", "sys/time.h", "sys/types.h", "sys/uio.h", "sys/wait.h", "termios.h",
    "unistd.h",
    "emmintrin.h", "immintrin.h", "x86intrin.h",
}
GENERATED = {"eplb_config.h"}  # the build's feature switches: library modules only

# Known violations, each with the issue that removes it. Entries are
# (file, what it uses: an include path or a symbol name).
ALLOWED = {
    # issue 19: the binding's struct-size table needs sizeof of sim's public
    # structs too; types only, no calls. Goes away when the table moves to a
    # module above both (or sim's structs get their own entry point).
    ("runtime/abi.c", "eplb/sim.h"),
}

# ---- rules evaluated ------------------------------------------------------


def closure(mod):
    seen, todo = set(), list(DEPS[mod])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(DEPS[m])
    return seen


def may_use(user, owner):
    return user == owner or owner in closure(user)


INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
SOURCE_EXT = (".c", ".h", ".cu")


def module_of_path(rel):
    for t in TOOLS:
        if rel.startswith(t + "/"):
            return t
    top = rel.split("/", 1)[0]
    if top in LIBRARY:
        return top
    if rel.startswith("include/eplb/"):
        return "public"
    return None


def source_files(src):
    roots = LIBRARY + TOOLS + ["include/eplb"]
    for root in roots:
        base = os.path.join(src, root)
        for dirpath, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, n), src).replace(os.sep, "/")


def check_include(rel, mod, kind, name):
    """The reason `rel` (of module `mod`, or "public") may not include
    `name`, or None."""
    if (rel, name) in ALLOWED:
        return None
    is_tool = mod in TOOLS
    if mod == "public":
        owner = PUBLIC_OWNER.get(rel[len("include/"):])
        if rel[len("include/"):] == UMBRELLA:
            return None if name in PUBLIC_OWNER or name in SYSTEM_HEADERS else (
                "the umbrella header includes only public and system headers")
        if name in SYSTEM_HEADERS or owner is None:
            return None  # a header with no owner is reported once, by check_includes
        if name not in PUBLIC_OWNER:
            return "a public header includes only public and system headers"
        only = PUBLIC_ONLY.get(rel[len("include/"):])
        if only is not None and name not in only:
            return "includes only %s (the serving API stands alone)" % ", ".join(sorted(only))
        if not may_use(owner, PUBLIC_OWNER[name]):
            return "public header of %s may not depend on %s" % (owner, PUBLIC_OWNER[name])
        return None
    if name in SYSTEM_HEADERS:
        return None
    if name in THIRD_PARTY:
        where = THIRD_PARTY[name]
        if mod in where or rel in where:
            return None
        return "%s belongs in %s only" % (name, ", ".join(sorted(where)) or "the tests")
    if name in GENERATED:
        return "tools use the public API only" if is_tool else None
    if name == UMBRELLA:
        return None if is_tool else "the umbrella header is for the tools"
    if name in PUBLIC_OWNER:
        owner = PUBLIC_OWNER[name]
        return None if may_use(mod, owner) else "%s may not depend on %s" % (mod, owner)
    for m, hs in INTERNAL_HEADERS.items():
        if name in hs:
            if is_tool:
                return "tools use the public API only (internal header of %s)" % m
            return None if may_use(mod, m) else "%s may not depend on %s" % (mod, m)
    top = name.split("/", 1)[0]
    if top in LIBRARY:
        return "%s is not an internal header of %s" % (name, top)
    return "unknown header (place it in SYSTEM_HEADERS or THIRD_PARTY)"


def check_includes(src):
    errors = []
    for rel in source_files(src):
        mod = module_of_path(rel)
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE_RE.finditer(text):
            kind, name = m.group(1), m.group(2).strip()
            line = text.count("\n", 0, m.start()) + 1
            if mod in TOOLS and kind == '"' and "/" not in name and name not in GENERATED:
                # Next to the including file (tools/eplb/bench/) or at the tool's root.
                if not (os.path.exists(os.path.join(src, os.path.dirname(rel), name))
                        or os.path.exists(os.path.join(src, mod, name))):
                    errors.append("%s:%d: #include \"%s\": not a header of %s" % (rel, line, name, mod))
                continue
            why = check_include(rel, mod, kind, name)
            if why:
                errors.append("%s:%d: #include %s%s%s: %s" % (
                    rel, line, kind, name, ">" if kind == "<" else '"', why))
        if mod == "public" and rel[len("include/"):] not in PUBLIC_OWNER and (
                rel[len("include/"):] != UMBRELLA):
            errors.append("%s: a public header with no module: add it to PUBLIC_OWNER" % rel)
        if mod in LIBRARY and rel.endswith(".h") and rel not in INTERNAL_HEADERS[mod]:
            errors.append("%s: %s has one internal header (%s); make this static or part of it"
                          % (rel, mod, ", ".join(sorted(INTERNAL_HEADERS[mod]))))
    return errors


# ---- symbols --------------------------------------------------------------

OBJDIR = "libeplb_internal.a.p"


def module_objdirs(build):
    """Each module is its own static library (meson.build): libeplb_<module>.a.p."""
    dirs = [os.path.join(build, "libeplb_%s.a.p" % m) for m in sorted(LIBRARY)]
    dirs = [d for d in dirs if os.path.isdir(d)]
    if not dirs:
        raise SystemExit("check_modules: no libeplb_<module>.a.p in %s (build first)" % build)
    return dirs


def nm(paths, *args):
    """(object file name, symbol) of every symbol nm lists: one nm for all."""
    out = subprocess.run(["nm", "-A", *args, *paths], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    for line in out.splitlines():
        # "dir/planner_plan.c.o:0000000000000040 T eplb__plan_new"
        where, sep, rest = line.partition(".o:")
        parts = rest.split()
        if sep and parts:
            yield os.path.basename(where) + ".o", parts[-1]


def read_objects(objdirs):
    """{module: (defined globals, undefined)}, each {symbol: source file},
    of the objects in objdirs (one folder or a list)."""
    rels, paths = {}, []
    if isinstance(objdirs, str):
        objdirs = [objdirs]
    for objdir in objdirs:
        lib = os.path.basename(objdir)[len("libeplb_"):-len(".a.p")]
        for n in sorted(os.listdir(objdir)):
            if not n.endswith(".o"):
                continue
            mod = n.split("_", 1)[0]
            if mod not in LIBRARY:
                raise SystemExit("check_modules: %s/%s: no module named %s" % (objdir, n, mod))
            if lib in LIBRARY and lib != mod:
                raise SystemExit("check_modules: %s/%s: a %s object in the %s library"
                                 % (objdir, n, mod, lib))
            # planner_plan_json.c.o is planner/plan_json.c: module folders are flat.
            rels[n] = (mod, mod + "/" + n[len(mod) + 1:-len(".o")])
            paths.append(os.path.join(objdir, n))
    if not paths:
        raise SystemExit("check_modules: no objects in %s (build first)" % ", ".join(objdirs))
    mods = {m: ({}, {}) for m, _ in rels.values()}
    for n, s in nm(paths, "--defined-only", "--extern-only"):
        mod, rel = rels[n]
        mods[mod][0][s] = rel
    for n, s in nm(paths, "--undefined-only"):
        mod, rel = rels[n]
        mods[mod][1].setdefault(s, rel)
    return mods


def check_symbols(objs):
    errors = []
    owner = {}
    for mod, (defined, _) in objs.items():
        for s in defined:
            owner.setdefault(s, mod)
    for mod, (defined, undefined) in sorted(objs.items()):
        for s, obj in sorted(undefined.items()):
            o = owner.get(s)
            if o is None or s in defined or may_use(mod, o):
                continue
            if (obj, s) in ALLOWED:
                continue
            errors.append("%s: uses %s of %s: %s may not depend on %s" % (obj, s, o, mod, o))
    return errors, owner


API_RE = re.compile(r"\bEPLB_API\b[^;{(]*?\b(eplb_\w+)\s*\(", re.S)


# Modules whose files must not call each other in a cycle (issue #19: plan.c
# called every policy and every policy called back into plan.c, so no policy
# could be read, tested or replaced on its own; issue #34: every module and
# tool). Calls go one way, down to the file holding what is shared: plan.c ->
# policies -> plan_core.c; in the runtime, runtime.c and record.c drive the
# parts, which call only downward.
ACYCLIC = ("core", "traces", "lp", "planner", "sim", "kernels", "runtime", "tools/eplb",
           "tools/eplbd")


def tool_objdir(build, tool):
    """A tool is an executable: meson puts its objects in BUILDDIR/TOOL/NAME.p."""
    return os.path.join(build, tool, os.path.basename(tool) + ".p")


def unit_objects(objdirs, module, src=None):
    """{object path: source file} of one module's objects: a library module's
    in objdirs (MODULE_file.c.o); a tool's in its one folder, named by meson
    after the source's path under the tool ("/" as "_"), read back against
    the tool's sources in src (the self-test's tool cycle goes through
    bench/, so a mapping that finds nothing fails there)."""
    if module in TOOLS:
        names = {}
        for rel in source_files(src):
            if rel.startswith(module + "/") and rel.endswith((".c", ".cu")):
                names[rel[len(module) + 1:].replace("/", "_") + ".o"] = rel
        # An object no source names is a stale one (its source removed): not linked.
        return {os.path.join(d, n): names[n] for d in objdirs for n in sorted(os.listdir(d))
                if n in names}
    return {os.path.join(d, n): module + "/" + n[len(module) + 1:-len(".o")]
            for d in objdirs for n in sorted(os.listdir(d))
            if n.endswith(".o") and n.split("_", 1)[0] == module}


def file_graph(objs):
    """{source file: {source file it calls: first symbol}} of one module's
    objects {path: source file}, from nm: defined globals (functions and
    data) against undefined ones."""
    if not objs:
        return {}
    rel = {os.path.basename(p): r for p, r in objs.items()}
    paths = sorted(objs)
    owner = {}
    for n, s in nm(paths, "--defined-only", "--extern-only"):
        owner.setdefault(s, rel[n])
    graph = {r: {} for r in rel.values()}
    for n, s in nm(paths, "--undefined-only"):
        o = owner.get(s)
        if o is not None and o != rel[n]:
            graph[rel[n]].setdefault(o, s)
    return graph


def cycles(graph):
    """The strongly connected components of more than one file (Tarjan,
    iterative), each sorted, in sorted order."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, {})))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return sorted(out)


def check_cycles(objdirs, modules=ACYCLIC, build=None, src=None):
    """Cycles among the files of each module: a library module's objects in
    objdirs, a tool's in its folder under build (read against src)."""
    errors = []
    for mod in modules:
        if mod in TOOLS:
            objdir = tool_objdir(build, mod)
            if not os.path.isdir(objdir):
                raise SystemExit("check_modules: no %s in %s (build first)" % (objdir, build))
            graph = file_graph(unit_objects([objdir], mod, src))
        else:
            graph = file_graph(unit_objects(objdirs, mod))
        for comp in cycles(graph):
            edges = ["%s -> %s (%s)" % (a, b, graph[a][b]) for a in comp for b in sorted(graph[a])
                     if b in comp]
            errors.append("%s: call cycle among %d files: %s" % (mod, len(comp), "; ".join(edges)))
    return errors


def check_declarations(src, owner):
    """Each public function is declared in a header of the module defining it."""
    errors = []
    for h, mod in sorted(PUBLIC_OWNER.items()):
        path = os.path.join(src, "include", h)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in API_RE.finditer(text):
            name = m.group(1)
            o = owner.get(name)
            if o is not None and o != mod:
                line = text.count("\n", 0, m.start()) + 1
                errors.append("include/%s:%d: %s is implemented in %s; declare it in %s's header"
                              % (h, line, name, o, o))
    return errors


def check(src, build):
    errors = check_includes(src)
    if build is not None:
        objdirs = module_objdirs(build)
        sym_errors, owner = check_symbols(read_objects(objdirs))
        errors += sym_errors + check_declarations(src, owner)
        errors += check_cycles(objdirs, build=build, src=src)
    return errors


# ---- self-test ------------------------------------------------------------


def copy_sources(src, dst):
    for rel in source_files(src):
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy(os.path.join(src, rel), os.path.join(dst, rel))


def plant(dst, rel, text, append=False):
    path = os.path.join(dst, rel)
    with open(path, encoding="utf-8") as f:
        old = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(old + text if append else text + old)
    return old


# (file, text put at its top, words the error must contain)
BAD_INCLUDES = [
    ("traces/format.c", "#include <glpk.h>\n", "glpk.h belongs in lp"),
    ("traces/format.c", '#include "planner/planner.h"\n', "traces may not depend on planner"),
    ("planner/cluster.c", "#include <hwloc.h>\n", "hwloc.h belongs in planner/topo_hwloc.c"),
    ("sim/cost.c", "#include <cuda_runtime.h>\n", "cuda_runtime.h belongs in kernels"),
    ("kernels/api.c", '#include "eplb/runtime.h"\n', "kernels may not depend on runtime"),
    ("lp/maxflow.c", "#include <zstd.h>\n", "zstd.h belongs in traces"),
    ("core/log.c", "#include <jansson.h>\n", "jansson.h belongs in"),
    ("core/log.c", "#include <foo/bar.h>\n", "unknown header"),
    ("tools/eplb/main.c", '#include "planner/planner.h"\n', "public API only"),
    ("tools/eplb/main.c", '#include "eplb_config.h"\n', "public API only"),
    ("include/eplb/trace.h", '#include "core/core.h"\n', "public header includes only public"),
    ("include/eplb/kernels.h", '#include "eplb/runtime.h"\n', "public header of kernels may not"),
    ("runtime/stats.c", '#include "planner/plan.c"\n', "not an internal header"),
]

FIXTURE_OBJECTS = {
    # A traces function calling the planner: the bad edge.
    "traces_selftest.c": "void eplb__st_planner(void);\n"
                         "void eplb__st_traces(void);\n"
                         "void eplb__st_traces(void) { eplb__st_planner(); }\n",
    # The planner calling traces and core: allowed edges.
    "planner_selftest.c": "void eplb__st_traces(void);\nvoid eplb__st_core(void);\n"
                          "void eplb__st_planner(void);\n"
                          "void eplb__st_planner(void) { eplb__st_traces(); eplb__st_core(); }\n",
    "core_selftest.c": "void eplb__st_core(void);\nvoid eplb__st_core(void) {}\n",
}

# Four files of a module (planner, then lp): a -> b -> c -> a is a cycle,
# d -> a is not part of it.
def cycle_objects(mod):
    return {
        mod + "_cyca.c": "void eplb__cyc_b(void);\nvoid eplb__cyc_a(void);\n"
                         "void eplb__cyc_a(void) { eplb__cyc_b(); }\n",
        mod + "_cycb.c": "void eplb__cyc_c(void);\nvoid eplb__cyc_b(void);\n"
                         "void eplb__cyc_b(void) { eplb__cyc_c(); }\n",
        mod + "_cycc.c": "void eplb__cyc_a(void);\nvoid eplb__cyc_c(void);\n"
                         "void eplb__cyc_c(void) { eplb__cyc_a(); }\n",
        mod + "_cycd.c": "void eplb__cyc_a(void);\nvoid eplb__cyc_d(void);\n"
                         "void eplb__cyc_d(void) { eplb__cyc_a(); }\n",
    }


# The tools, as meson names their objects: in eplbd a shared global defined
# by the file that calls its user (eplbd.h's old globals in main.c); in eplb
# bench/bench.c (bench_bench.c.o) and cli.c calling each other.
TOOL_CYCLE_OBJECTS = {
    "tools/eplbd": {
        "http.c": "void eplbd_st_log(void);\nint eplbd_st_lock;\n"
                  "void eplbd_st_http(void);\nvoid eplbd_st_http(void) { eplbd_st_log(); }\n",
        "log.c": "extern int eplbd_st_lock;\nvoid eplbd_st_log(void);\n"
                 "void eplbd_st_log(void) { eplbd_st_lock++; }\n",
        "main.c": "void eplbd_st_http(void);\nint main(void) { eplbd_st_http(); return 0; }\n",
    },
    "tools/eplb": {
        "bench_bench.c": "void cli_st(void);\nvoid bench_st(void);\n"
                         "void bench_st(void) { cli_st(); }\n",
        "cli.c": "void bench_st(void);\nvoid cli_st(void);\nvoid cli_st(void) { bench_st(); }\n",
    },
}
TOOL_CYCLES = [
    "tools/eplb: call cycle among 2 files: tools/eplb/bench/bench.c -> tools/eplb/cli.c (cli_st); "
    "tools/eplb/cli.c -> tools/eplb/bench/bench.c (bench_st)",
    "tools/eplbd: call cycle among 2 files: tools/eplbd/http.c -> tools/eplbd/log.c "
    "(eplbd_st_log); tools/eplbd/log.c -> tools/eplbd/http.c (eplbd_st_lock)",
]


def compile_fixtures(tmp, objdir, objects, cc):
    os.makedirs(objdir)
    for name, code in objects.items():
        c = os.path.join(tmp, name)
        with open(c, "w") as f:
            f.write(code)
        subprocess.run(cc + ["-c", c, "-o", os.path.join(objdir, name + ".o")], check=True)


def self_test_cycles(tmp, tree, cc):
    """Failures of the cycle check on planted objects: in planner and lp the
    cycle a -> b -> c -> a must be caught (and d, which only calls into it,
    left out of it); with c's call back to a removed, nothing may be
    reported. In the tools (objects named as meson names them, read against
    the sources in tree) a cycle through a global and one through bench/."""
    failures = []
    for mod in ("planner", "lp"):
        objdir = os.path.join(tmp, mod, "libeplb_%s.a.p" % mod)
        compile_fixtures(tmp, objdir, cycle_objects(mod), cc)
        errs = check_cycles([objdir], (mod,))
        want = "%s: call cycle among 3 files: %s/cyca.c -> %s/cycb.c (eplb__cyc_b)" % (mod, mod, mod)
        if len(errs) != 1 or not errs[0].startswith(want) or "cycd" in errs[0]:
            failures.append("cyclic %s objects: expected only %r..., got %s" % (mod, want, errs))
        acyclic = cycle_objects(mod)
        acyclic[mod + "_cycc.c"] = "void eplb__cyc_c(void);\nvoid eplb__cyc_c(void) {}\n"
        objdir2 = os.path.join(tmp, mod, "acyclic", "libeplb_%s.a.p" % mod)
        compile_fixtures(tmp, objdir2, acyclic, cc)
        errs = check_cycles([objdir2], (mod,))
        if errs:
            failures.append("acyclic %s objects: reported %s" % (mod, errs))
    build = os.path.join(tmp, "toolbuild")
    for tool, objects in TOOL_CYCLE_OBJECTS.items():
        csrc = os.path.join(tmp, "toolsrc", tool)
        os.makedirs(csrc)
        compile_fixtures(csrc, tool_objdir(build, tool), objects, cc)
    errs = check_cycles([], TOOLS, build, tree)
    if errs != TOOL_CYCLES:
        failures.append("cyclic tool objects: expected %s, got %s" % (TOOL_CYCLES, errs))
    return failures


def self_test(src, build, cc):
    failures = []
    with tempfile.TemporaryDirectory(prefix="eplb-modules-") as tmp:
        tree = os.path.join(tmp, "src")
        copy_sources(src, tree)
        base = check_includes(tree)
        if base:
            failures.append("the unplanted copy already fails: " + base[0])
        for rel, text, expect in BAD_INCLUDES:
            old = plant(tree, rel, text)
            errs = check_includes(tree)
            if not any(expect in e and e.startswith(rel) for e in errs):
                failures.append("%s: planted %r not caught (expected %r; got %s)"
                                % (rel, text.strip(), expect, errs or "nothing"))
            with open(os.path.join(tree, rel), "w", encoding="utf-8") as f:
                f.write(old)
        open(os.path.join(tree, "include", "eplb", "extra.h"), "w").close()
        if not any(e.startswith("include/eplb/extra.h") for e in check_includes(tree)):
            failures.append("include/eplb/extra.h: a public header with no module not caught")
        os.remove(os.path.join(tree, "include", "eplb", "extra.h"))
        # A stray header in a module is a second internal header.
        open(os.path.join(tree, "traces", "extra.h"), "w").close()
        if not any(e.startswith("traces/extra.h") for e in check_includes(tree)):
            failures.append("traces/extra.h: a second internal header not caught")
        os.remove(os.path.join(tree, "traces", "extra.h"))

        # Symbols: three tiny objects, one bad edge among two good ones.
        objdir = os.path.join(tmp, OBJDIR)
        compile_fixtures(tmp, objdir, FIXTURE_OBJECTS, cc)
        errs, _ = check_symbols(read_objects(objdir))
        want = "traces/selftest.c: uses eplb__st_planner of planner"
        if len(errs) != 1 or not errs[0].startswith(want):
            failures.append("fixture objects: expected only %r, got %s" % (want, errs))
        failures += self_test_cycles(tmp, tree, cc)

        # A public function declared in another module's header.
        if build is not None:
            _, owner = check_symbols(read_objects(module_objdirs(build)))
            plant(tree, "include/eplb/common.h",
                  "\nEPLB_API size_t eplb_abi_struct_size(const char *name);\n", append=True)
            if not any("eplb_abi_struct_size is implemented in runtime" in e
                       for e in check_declarations(tree, owner)):
                failures.append("eplb_abi_struct_size declared in common.h not caught")
    for f in failures:
        print("self-test: FAIL: " + f)
    if not failures:
        print("self-test: ok (%d planted includes, 2 stray headers, 1 symbol edge, %d call "
              "cycles%s caught)"
              % (len(BAD_INCLUDES), 2 + len(TOOL_CYCLES),
                 ", 1 misplaced declaration" if build else ""))
    return 1 if failures else 0


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    cc = ["cc"]
    for f in flags:
        if f.startswith("--cc="):
            cc = shlex.split(f[len("--cc="):])
    if "--public-headers" in flags:
        # For meson: the headers the public-headers-alone test compiles.
        print("\n".join(sorted(h[len("eplb/"):] for h in list(PUBLIC_OWNER) + [UMBRELLA])))
        return 0
    if "--self-test" in flags:
        if len(args) not in (1, 2):
            print(__doc__)
            return 2
        return self_test(args[0], args[1] if len(args) == 2 else None, cc)
    if "--includes" in flags:
        if len(args) != 1:
            print(__doc__)
            return 2
        errors = check(args[0], None)
    else:
        if len(args) != 2:
            print(__doc__)
            return 2
        errors = check(args[0], args[1])
    for e in errors:
        print(e)
    print("check_modules: %s" % ("%d violation(s)" % len(errors) if errors else "ok"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
