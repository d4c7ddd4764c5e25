#!/usr/bin/env python3
"""Markdown performance tables from posenc-bench's --benchmark_format=json output (python3 stdlib only).

Either reads a JSON file (--json FILE) or runs the benchmark itself (--bench PATH --filter REGEX
[--repetitions N] [--min-time S]), takes the median of each benchmark's repetitions, and prints a
markdown table (benchmark, time, GB/s, GFLOP/s, ratio to the limit measured in the same run) under a
header naming the machine, the kernels the dispatch chose, the compiler, the command, the date and
the number of repetitions. With --update FILE..., it replaces the text between the marker lines

    <!-- perf-table:begin -->            (or <!-- perf-table:begin rows=REGEX --> for a subset)
    <!-- perf-table:end -->

in each file instead of printing, so that the tables and the command that produced them cannot drift
apart. When it runs the benchmark, --save-json FILE keeps the JSON with what the script recorded (CPU
model, kernels, compiler, command) under context.posenc_perf_table, so the same table can be written
again from the file. A marker may name its table (<!-- perf-table:begin table=NAME -->, before any
rows=): `--table NAME` updates only those blocks, and the default only the unnamed ones — e.g. an AVX2
table written from a run under POSENC_SIMD_MAX_ARCH=avx2, which the recorded command then carries.

Regenerate README.md's and docs/performance.md's tables (a few minutes on 2 cores):
    python3 tools/perf-table.py --bench build/bench/posenc-bench --repetitions 5 --min-time 0.2 \\
        --pin-one-thread auto --update README.md docs/performance.md
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

# The benchmarks of the published tables: rotary (float, 16-bit, fused norm, decode, a call's overhead
# alone), the KV-cache append, attention prefill (S5, float and 16-bit K/V) and decode (S6; S6-L2 its
# arithmetic alone), on one and two threads, and the backward passes.
DEFAULT_FILTER = (r"^(rope/S1/|rope/S3/|rope/S2/|rope/call-overhead/|rope/S1-bf16/|rope/S1-fp16/|rope/S1-qknorm/|"
                  r"kv_cache/append|attention/S5/|attention/S5-rope/|attention/S5-bf16/|attention/S5-fp16/|"
                  r"attention/S5-rope-bf16/|attention/S5-rope-fp16/|attention/S6/|attention/S6-bf16/|attention/S6-fp16/|"
                  r"attention/S6-L2-|table/S4|rope_backward/S1/|attention-backward/S5/)")
BEGIN = re.compile(r"^<!-- perf-table:begin(?: table=(?P<table>\S+))?(?: rows=(?P<rows>\S+))? -->$")
END = "<!-- perf-table:end -->"
TIMING_SUFFIXES = ("/manual_time", "/real_time")


def cpu_model():
    """The CPU model named by /proc/cpuinfo (Linux), or 'unknown CPU'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") or line.startswith("Model"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def compiler_of(binary):
    """The compiler and build type of the CMake build tree holding `binary`, else 'unknown compiler'."""
    directory = os.path.dirname(os.path.abspath(binary))
    while True:
        cache = os.path.join(directory, "CMakeCache.txt")
        if os.path.isfile(cache):
            break
        parent = os.path.dirname(directory)
        if parent == directory:
            return "unknown compiler"
        directory = parent
    build_type = ""
    with open(cache, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("CMAKE_BUILD_TYPE:"):
                build_type = line.split("=", 1)[1].strip()
    ident = version = ""
    files = os.path.join(directory, "CMakeFiles")
    for sub in sorted(os.listdir(files)) if os.path.isdir(files) else []:
        path = os.path.join(files, sub, "CMakeCXXCompiler.cmake")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            ident = (re.search(r'set\(CMAKE_CXX_COMPILER_ID "([^"]*)"\)', text) or [None, ""])[1]
            version = (re.search(r'set\(CMAKE_CXX_COMPILER_VERSION "([^"]*)"\)', text) or [None, ""])[1]
    name = {"GNU": "g++", "Clang": "clang++"}.get(ident, ident or "unknown compiler")
    return f"{name} {version}".strip() + (f", CMake {build_type}" if build_type else "")


# Rows that run on more than one thread (a thread count above 1, a caller's pool, spawned threads).
MULTI_THREAD = re.compile(r"/threads:(?:[2-9]|\d\d+)(?:/|$)|/executor:")


def run_json(command, cpu=None):
    """Runs one benchmark command (on `cpu` alone when given); returns (parsed JSON, stderr)."""
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    done = subprocess.run(command, capture_output=True, text=True, check=False, preexec_fn=pin)
    if done.returncode != 0:
        where = f" (on CPU {cpu})" if cpu is not None else ""
        sys.exit(f"perf-table: {shlex.join(command)}{where} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout), done.stderr


def fastest_cpu(bench):
    """The CPU of this process's set on which the one-token rotary step runs fastest, and each CPU's
    time: on a virtual machine one vCPU may share its core with another guest, and which one does
    changes from day to day."""
    times = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        data, _ = run_json([bench, "--benchmark_filter=^rope/S2/half_split$", "--benchmark_repetitions=3",
                            "--benchmark_min_time=0.2", "--benchmark_report_aggregates_only=true",
                            "--benchmark_format=json"], cpu)
        times[cpu] = next(b["real_time"] for b in data["benchmarks"] if b.get("aggregate_name") == "median")
    return min(times, key=times.get), times


def run_bench(args):
    """Runs the benchmark binary; returns (the parsed JSON, with what this script recorded). With
    --pin-one-thread, the rows on one thread run in a first pass on that CPU alone and the others in a
    second pass on every CPU; the rows keep the binary's order."""
    command = [args.bench, f"--benchmark_filter={args.filter}", f"--benchmark_repetitions={args.repetitions}",
               f"--benchmark_min_time={args.min_time}", "--benchmark_report_aggregates_only=true",
               "--benchmark_format=json"]
    pinned_note = None
    if args.pin_one_thread is None:
        data, stderr = run_json(command)
    else:
        listed = subprocess.run([args.bench, f"--benchmark_filter={args.filter}", "--benchmark_list_tests"],
                                capture_output=True, text=True, check=True).stdout.split()
        one = [n for n in listed if not MULTI_THREAD.search(n)]
        many = [n for n in listed if MULTI_THREAD.search(n)]
        if args.pin_one_thread == "auto":
            cpu, probe = fastest_cpu(args.bench)
            chosen = (f"; CPU {cpu} was the fastest here on rope/S2 ("
                      + ", ".join(f"CPU {c}: {t:.0f} ns" for c, t in sorted(probe.items())) + ")")
        else:
            allowed = sorted(os.sched_getaffinity(0))
            if not args.pin_one_thread.isdigit() or int(args.pin_one_thread) not in allowed:
                sys.exit(f"perf-table: --pin-one-thread {args.pin_one_thread}: not 'auto' nor one of this process's CPUs "
                         f"({', '.join(map(str, allowed))})")
            cpu = int(args.pin_one_thread)
            chosen = ""
        pinned_note = (f"the command ran in two passes: the one-thread rows first, alone on CPU {cpu} "
                       f"(`taskset -c {cpu}`, the filter narrowed to those rows), then the rows on several "
                       f"threads, unpinned{chosen}")
        # (The binary's regex is POSIX extended: only its special characters escaped.)
        exact = lambda names: "^(" + "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", n) for n in names) + ")$"
        data, stderr = run_json([c if not c.startswith("--benchmark_filter=") else f"--benchmark_filter={exact(one)}"
                                 for c in command], cpu) if one else ({"context": {}, "benchmarks": []}, "")
        if many:
            rest, _ = run_json([c if not c.startswith("--benchmark_filter=") else f"--benchmark_filter={exact(many)}"
                                for c in command])
            if not data["context"]:
                data["context"] = rest["context"]
            data["benchmarks"] += rest["benchmarks"]
        order = {n: i for i, n in enumerate(listed)}
        data["benchmarks"].sort(key=lambda b: order.get(b.get("run_name", b["name"]), len(order)))
    # posenc-bench names the kernels the dispatch chose in its summary on stderr.
    kernels = re.search(r"kernels: ([^,)]+)", stderr)
    # A dispatch ceiling in the environment is part of the command that reproduces the table.
    ceiling = os.environ.get("POSENC_SIMD_MAX_ARCH")
    prefix = [f"POSENC_SIMD_MAX_ARCH={shlex.quote(ceiling)}"] if ceiling else []
    data["context"]["posenc_perf_table"] = {
        "cpu_model": cpu_model(),
        "kernels": kernels.group(1) if kernels else "not reported",
        "compiler": compiler_of(args.bench),
        "command": " ".join(prefix + [shlex.join(command)]),
        "generator": " ".join(prefix + [shlex.join(["python3", "tools/perf-table.py"] + sys.argv[1:])]),
    }
    if pinned_note:
        data["context"]["posenc_perf_table"]["pinned"] = pinned_note
    return data


def display_name(name):
    for suffix in TIMING_SUFFIXES:
        name = name.replace(suffix, "")
    return name


def medians(data):
    """One row per benchmark, in the run's order: the median of its repetitions' time and counters."""
    groups = {}
    for b in data.get("benchmarks", []):
        name = display_name(b.get("run_name", b["name"]))
        group = groups.setdefault(name, {"runs": [], "median": None, "error": None, "repetitions": 1})
        group["repetitions"] = max(group["repetitions"], int(b.get("repetitions", 1)))
        if b.get("error_occurred"):
            group["error"] = b.get("error_message", "error")
        elif b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                group["median"] = b
        else:
            group["runs"].append(b)
    rows = []
    for name, group in groups.items():
        row = {"name": name, "repetitions": group["repetitions"], "error": group["error"]}
        if group["median"] is not None:
            source = [group["median"]]
        else:
            source = group["runs"]
        if group["error"] is None and source:
            row["time_unit"] = source[0]["time_unit"]
            for key in ("real_time", "bytes_per_second", "FLOP/s", "limit_fraction", "fma_fraction"):
                values = [float(b[key]) for b in source if key in b]
                row[key] = statistics.median(values) if values else None
        elif group["error"] is None:
            row["error"] = "no result"
        rows.append(row)
    return rows


def format_time(value, unit):
    """A time with three significant figures, in the unit that keeps it between 1 and 1000."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    seconds = value * scale[unit]
    for name, factor in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= factor or name == "ns":
            shown = seconds / factor
            return (f"{shown:#.3g}".rstrip(".") if shown < 100 else f"{shown:.0f}") + f" {name}"
    return ""


def table(rows, data, rows_filter=None):
    """The markdown of one table: its generated header, then one line per row (those matching rows_filter)."""
    context = data.get("context", {})
    recorded = context.get("posenc_perf_table", {})
    selected = [r for r in rows if rows_filter is None or re.search(rows_filter, r["name"])]
    reps = sorted({r["repetitions"] for r in selected}) or [1]
    with_fma = any(r.get("fma_fraction") is not None for r in selected)
    lines = [
        "<!-- generated by tools/perf-table.py: edit the command, not the numbers -->",
        f"Machine: {recorded.get('cpu_model', 'not recorded')}, {context.get('num_cpus', '?')} CPUs; "
        f"kernels chosen by the dispatch: {recorded.get('kernels', 'not recorded')}; "
        f"compiler: {recorded.get('compiler', 'not recorded')}.",
        f"Date: {context.get('date', 'not recorded')}; median of {'/'.join(str(n) for n in reps)} "
        f"repetition{'s' if reps != [1] else ''}.",
        f"Command: `{recorded.get('command', 'not recorded')}`",
    ]
    if "pinned" in recorded:
        lines.append(f"Pinned: {recorded['pinned']}.")
    if "generator" in recorded:
        lines.append(f"Table written by: `{recorded['generator']}`")
    lines += [
        "",
        "| benchmark | time | GB/s | GFLOP/s | ratio to its in-run limit |" + (" FMA-peak ratio |" if with_fma else ""),
        "|---|---:|---:|---:|---:|" + ("---:|" if with_fma else ""),
    ]
    for r in selected:
        if r["error"]:
            cells = [f"`{r['name']}`", f"error: {r['error']}", "", "", ""] + ([""] if with_fma else [])
        else:
            def number(key, divisor, digits):
                v = r.get(key)
                return f"{v / divisor:.{digits}f}" if v is not None and v > 0 else ""
            cells = [f"`{r['name']}`", format_time(r["real_time"], r["time_unit"]),
                     number("bytes_per_second", 1e9, 1), number("FLOP/s", 1e9, 1), number("limit_fraction", 1, 2)]
            if with_fma:
                cells.append(number("fma_fraction", 1, 2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def update(path, rows, data, table_name=None):
    """Replaces every marked block of `path` named `table_name` by its generated table; returns the number
    of blocks."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, count, i = [], 0, 0
    while i < len(lines):
        match = BEGIN.match(lines[i])
        if not match and lines[i].startswith("<!-- perf-table:begin"):
            sys.exit(f"perf-table: {path}: '{lines[i]}' is not a marker this script reads "
                     "(<!-- perf-table:begin [table=NAME] [rows=REGEX] -->)")
        out.append(lines[i])
        i += 1
        if not match or match.group("table") != table_name:
            continue
        end = next((j for j in range(i, len(lines)) if lines[j] == END), None)
        if end is None:
            sys.exit(f"perf-table: {path}: '{lines[i - 1]}' has no '{END}' after it")
        out.extend(table(rows, data, match.group("rows")).rstrip("\n").split("\n"))
        i = end
        count += 1
    if count == 0:
        named = f" table={table_name}" if table_name else ""
        sys.exit(f"perf-table: {path} has no '<!-- perf-table:begin{named} -->' marker")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--json", help="posenc-bench --benchmark_format=json output to read")
    source.add_argument("--bench", help="the posenc-bench binary to run")
    parser.add_argument("--filter", default=DEFAULT_FILTER, help="--benchmark_filter when running the binary")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min-time", default="0.2", help="--benchmark_min_time (seconds)")
    parser.add_argument("--pin-one-thread", metavar="CPU|auto",
                        help="run the one-thread rows on this CPU alone ('auto': the fastest on rope/S2), the rest unpinned")
    parser.add_argument("--save-json", help="keep the JSON of the run here (with what this script recorded)")
    parser.add_argument("--rows", help="only the benchmarks whose name matches this regex (printing only)")
    parser.add_argument("--update", nargs="+", metavar="FILE", help="rewrite the marked blocks of these files")
    parser.add_argument("--table", help="with --update: the blocks marked table=NAME (default: those without a name)")
    args = parser.parse_args()

    if args.json:
        with open(args.json, encoding="utf-8") as f:
            data = json.load(f)
    else:
        data = run_bench(args)
        if args.save_json:
            with open(args.save_json, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
    rows = medians(data)
    if not rows:
        sys.exit("perf-table: no benchmarks in the JSON")
    if args.update:
        for path in args.update:
            print(f"{path}: {update(path, rows, data, args.table)} table(s) written")
    else:
        sys.stdout.write(table(rows, data, args.rows))


if __name__ == "__main__":
    main()
