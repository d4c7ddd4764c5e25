#!/usr/bin/env python3
"""A malformed-input corpus for posenc-inspect, and a runner that checks its guarantees.

    malformed_corpus.py generate DIR              # writes DIR/*.json (several thousand files)
    malformed_corpus.py run PATH/TO/posenc-inspect DIR [--jobs N]

Every input must end in exit 0 (with --json: one valid JSON object on stdout, no NaN/Infinity) or
exit 1 with exactly one line on stderr and nothing on stdout — never a signal, a hang (10 s) or an
allocation past the memory limit (2 GiB). The inputs mutate every key of every config in
tests/data/configs/ (and of the nested dicts rope_scaling, rope_parameters, attn_config,
text_config) with each value class below, plus file-level damage and argument-level cases.
"""
import json
import os
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "data", "configs")

DEEP = 70000  # the nesting of the trial's crash

# Replacement values as raw JSON text (some are not valid JSON on purpose).
VALUES = {
    "zero": "0", "neg": "-1", "neg_big": "-9223372036854775809", "half": "0.5", "one_half": "1.5",
    "int64_max": "9223372036854775807", "u64_2p63": "9223372036854775808", "u64_max": "18446744073709551615",
    "u64_over": "18446744073709551616", "two_p31": "2147483648", "two_p32": "4294967296", "big_int": "100000000",
    "65537": "65537", "1e20": "1e20", "1e308": "1e308", "overflow": "1e400", "neg_overflow": "-1e400",
    "denormal": "4.9e-324", "tiny": "1e-310", "small": "1e-300", "neg_zero": "-0.0", "frac": "2.000001",
    "nan_token": "NaN", "inf_token": "Infinity", "string_num": "\"4\"", "true": "true", "null": "null",
    "empty_list": "[]", "empty_obj": "{}", "list_num": "[1, 2]", "list_str": "[\"a\"]", "obj": "{\"a\": 1}",
    "nul_string": "\"a\\u0000b\"", "newline_string": "\"a\\nb\\r\\n\"", "ctrl_string": "\"\\u001b[31mred\"",
    "long_string": "\"" + "x" * 200000 + "\"", "unicode": "\"\\u00e9\\ud83d\\ude00\"",
    "lone_surrogate": "\"\\ud800\"", "deep_list": "[" * DEEP + "]" * DEEP,
    "deep_obj": "{\"a\":" * DEEP + "1" + "}" * DEEP, "deep_mixed": "[{\"k\":" * (DEEP // 2) + "0" + "}]" * (DEEP // 2),
    "depth_63": "[" * 62 + "]" * 62, "depth_65": "[" * 65 + "]" * 65,
    "long_list": "[" + ",".join(["1.0"] * 100000) + "]", "list_denormal": "[" + ",".join(["4.9e-324"] * 64) + "]",
    "list_huge": "[" + ",".join(["1e308"] * 64) + "]", "list_tiny": "[" + ",".join(["1e-310"] * 64) + "]",
    "list_mixed": "[1, \"a\", null, [], {}]",
}
CHEAP = [k for k in VALUES if not k.startswith("deep") and k not in ("long_string", "long_list")]
# Every key gets CORE; in the FULL configs the keys posenc reads (EXTRA_KEYS, ROPE_KEYS) get every
# CHEAP value.
FULL = {"synthetic-llama", "synthetic-linear", "synthetic-dynamic", "synthetic-neox", "llama-3.1-8b",
        "qwen2.5-7b-yarn", "phi-3-mini-128k", "deepseek-v3", "gemma-3-4b", "t5-small", "mpt-7b", "bloom-560m"}
CORE = ["zero", "neg", "u64_2p63", "overflow", "denormal", "tiny", "string_num", "null", "obj", "list_num",
        "nul_string", "nan_token", "1e308", "half"]
EXPENSIVE = ["deep_list", "deep_obj", "deep_mixed", "long_string", "long_list"]
NESTED = ("rope_scaling", "rope_parameters", "attn_config", "text_config")
EXTRA_KEYS = ["head_dim", "num_hidden_layers", "n_head", "num_heads", "n_heads", "rotary_pct", "rotary_dim",
              "max_position_embeddings", "original_max_position_embeddings", "layer_types", "rope_theta",
              "partial_rotary_factor", "sliding_window_pattern", "relative_attention_max_distance",
              "relative_attention_num_buckets", "alibi", "rope_interleave", "qk_rope_head_dim"]
ROPE_KEYS = ["factor", "rope_type", "type", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "attention_factor", "short_factor", "long_factor", "low_freq_factor",
             "high_freq_factor", "truncate", "partial_rotary_factor", "rope_theta"]


def dump_with(obj, path, raw):
    """JSON text of obj with the value at `path` (a list of keys) replaced by the raw text."""
    marker = "\u2603MARK\u2603"
    o = json.loads(json.dumps(obj))
    cur = o
    for k in path[:-1]:
        if not isinstance(cur.get(k), dict):
            cur[k] = {}
        cur = cur[k]
    cur[path[-1]] = marker
    return json.dumps(o).replace(json.dumps(marker), raw)


def keys_of(cfg):
    out = [[k] for k in cfg] + [[k] for k in EXTRA_KEYS if k not in cfg]
    for n in NESTED:
        if isinstance(cfg.get(n), dict):
            sub = cfg[n]
            out += [[n, k] for k in sub]
            if n.startswith("rope"):
                out += [[n, k] for k in ROPE_KEYS if k not in sub]
            for k, v in sub.items():  # per-layer-type rope dicts (Gemma-3 v5)
                if isinstance(v, dict):
                    out += [[n, k, kk] for kk in v]
    return out


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    n = 0

    def write(name, data):
        nonlocal n
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        n += 1

    bases = {}
    for fn in sorted(os.listdir(CONFIGS)):
        with open(os.path.join(CONFIGS, fn)) as f:
            bases[fn[:-5]] = json.load(f)
    llama = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192}
    bases["synthetic-llama"] = llama
    bases["synthetic-linear"] = dict(llama, rope_scaling={"rope_type": "linear", "factor": 2.0})
    bases["synthetic-dynamic"] = dict(llama, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    bases["synthetic-neox"] = {"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64,
                               "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048}

    for name, cfg in bases.items():
        for path in keys_of(cfg):
            tag = "_".join(path).replace("/", "_")
            full = name in FULL and (path[-1] in EXTRA_KEYS or path[-1] in ROPE_KEYS)
            for v in CHEAP if full else CORE:
                write(f"{name}__{tag}__{v}.json", dump_with(cfg, path, VALUES[v]))
        # The expensive values (deep nesting, huge strings) in a few keys of each config.
        for path in keys_of(cfg)[:4] + [p for p in keys_of(cfg) if p[0] in NESTED][:3]:
            tag = "_".join(path)
            for v in EXPENSIVE:
                write(f"{name}__{tag}__{v}.json", dump_with(cfg, path, VALUES[v]))
        text = json.dumps(cfg, indent=2)
        for cut in sorted({0, 1, 2, len(text) // 3, len(text) // 2, len(text) - 2, len(text) - 1}):
            write(f"{name}__truncated_{cut}.json", text[:cut])
        write(f"{name}__nul_in_key.json", json.dumps(dict(cfg, **{"rope\u0000_scaling": {"rope_type": "linear"}})))
        if isinstance(cfg.get("rope_scaling"), dict):
            write(f"{name}__nul_in_rope_key.json",
                  json.dumps(dict(cfg, rope_scaling=dict(cfg["rope_scaling"], **{"fac\u0000tor\n2": 1}))))
            write(f"{name}__long_rope_key.json",
                  json.dumps(dict(cfg, rope_scaling=dict(cfg["rope_scaling"], **{"k" * 100000: 1}))))
        write(f"{name}__bad_utf8.json", text.encode().replace(b'"model_type"', b'"model_type\xff\xfe"', 1))
        write(f"{name}__bad_utf8_value.json", text.encode().replace(b'": "', b'": "\xc3\x28', 1))
        write(f"{name}__bom.json", b"\xef\xbb\xbf" + text.encode())
        write(f"{name}__trailing.json", text + " }")
        write(f"{name}__comment.json", "// c\n" + text)
        write(f"{name}__duplicate.json", text[:-1] + ', "model_type": "bogus"}')
        write(f"{name}__as_list.json", "[" + text + "]")
        write(f"{name}__deep_wrapped.json", "[" * DEEP + text + "]" * DEEP)

    # File-level damage.
    write("empty.json", "")
    write("space.json", "   \n\t ")
    write("nul_bytes.json", b"\x00" * 64)
    write("binary.json", bytes(range(256)) * 8)
    for k, v in VALUES.items():
        write(f"toplevel__{k}.json", v)
    write("huge_string_value.json", json.dumps(dict(llama, rope_scaling={"rope_type": "x" * 50_000_000})))
    os.makedirs(os.path.join(out_dir, "a_directory.json"), exist_ok=True)

    # The trial's listed inputs, verbatim.
    write("listed__deep_70000.json", "[" * DEEP + "]" * DEEP)
    write("listed__linear_denormal.json", json.dumps(dict(llama, rope_scaling={"rope_type": "linear"})).replace(
        '"linear"}', '"linear", "factor": 4.9e-324}'))
    write("listed__yarn_1e-310.json", json.dumps(dict(llama, rope_scaling={"rope_type": "yarn", "factor": 1e-310})))
    write("listed__longrope_denormal.json", json.dumps(dict(
        llama, model_type="phi3", original_max_position_embeddings=4096,
        rope_scaling={"type": "longrope", "short_factor": [1e-310] * 64, "long_factor": [4.9e-324] * 64})))
    write("listed__rope_theta_1e400.json", json.dumps(llama)[:-1] + ', "rope_theta": 1e400}')
    write("listed__head_dim_2p63.json", json.dumps(llama)[:-1] + ', "head_dim": 9223372036854775808}')
    write("listed__max_pos_2p63.json", json.dumps({k: v for k, v in llama.items() if k != "max_position_embeddings"})[:-1]
          + ', "max_position_embeddings": 9223372036854775808}')
    write("listed__head_dim_2p31.json", json.dumps(dict(llama, head_dim=2 ** 31)))
    write("listed__layers_1e8.json", json.dumps({"model_type": "gemma3_text", "num_hidden_layers": 100000000}))
    write("listed__n_head_2p32.json", json.dumps({"model_type": "bloom", "n_head": 2 ** 32}))
    write("listed__neox_rotary_pct.json", json.dumps(dict(bases["synthetic-neox"], rotary_pct=1e-9)))
    write("listed__phi3_original_0.json", json.dumps(dict(bases["phi-3-mini-128k"], original_max_position_embeddings=0)))
    write("listed__mpt_alibi_bias_max.json", json.dumps({"model_type": "mpt", "n_heads": 32,
                                                         "attn_config": {"alibi": True, "alibi_bias_max": -1}}))
    write("listed__nul_key.json", json.dumps(dict(llama, rope_scaling={"rope_type": "linear", "factor": 2,
                                                                        "a\u0000b": 1})))
    return n


ARG_CASES = [
    ["--t5", "--num-buckets", "32", "--max-distance", "128", "--bidirectional", "--relative-range",
     "9223372036854775807:9223372036854775807"],
    ["--t5", "--num-buckets", "32", "--max-distance", "128", "--bidirectional", "--relative-range",
     "-9223372036854775808:9223372036854775807"],
    ["--t5", "--num-buckets", "32", "--max-distance", "9223372036854775807", "--bidirectional"],
    ["--t5", "--num-buckets", "9223372036854775807", "--max-distance", "9223372036854775807", "--unidirectional",
     "--relative-range", "0:10"],
    ["--t5", "--num-buckets", "-4", "--max-distance", "128", "--bidirectional"],
    ["--alibi", "100000000"], ["--alibi", "65536"], ["--alibi", "-1"], ["--alibi", "99999999999999999999"],
    ["--alibi", "8", "--max-bias", "nan"], ["--alibi", "8", "--max-bias", "1e400"], ["--alibi", "8", "--max-bias", "1e-320"],
    ["--alibi", "8", "--max-bias", "5000"], ["--alibi", "8", "--max-bias", "0x1p3"], ["--alibi", "8", "--max-bias", ""],
    ["--sinusoidal", "1000000000", "--variant", "concat", "--positions", "1"],
    ["--sinusoidal", "65536", "--variant", "concat", "--positions", ",".join(["9223372036854775807"] * 300)],
    ["--sinusoidal", "7", "--variant", "interleaved", "--positions", "-9223372036854775808,9223372036854775807"],
    ["--sinusoidal", "8", "--variant", "concat", "--positions", ",,,"],
    ["--sinusoidal", "8", "--variant", "concat", "--positions", ""],
    ["--positions"], ["--seq-len"], ["--json"], [], ["-"], ["--"], ["--alibi"],
]


def no_constants(token):
    raise ValueError("non-finite token " + token)


def check(inspect, args, json_mode):
    cmd = [inspect] + args + (["--json"] if json_mode else [])

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        p = subprocess.run(cmd, capture_output=True, timeout=10, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return "hang (> 10 s)"
    if p.returncode == 0:
        if json_mode:
            try:
                json.loads(p.stdout.decode(), parse_constant=no_constants)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                return f"exit 0 with invalid JSON: {e}"
        return None
    if p.returncode != 1:
        return f"exit {p.returncode}: {p.stderr[-300:]!r}"
    if p.stdout:
        return "exit 1 with output on stdout"
    if p.stderr.count(b"\n") != 1 or not p.stderr.endswith(b"\n") or len(p.stderr) < 2:
        return f"exit 1 without exactly one stderr line: {p.stderr[:300]!r}"
    if len(p.stderr) > 2000:
        return f"exit 1 with a {len(p.stderr)}-byte message"
    return None


def run(inspect, corpus, jobs):
    files = sorted(os.listdir(corpus))
    # Every file with --json; every 4th also in the human-readable mode.
    tasks = [([os.path.join(corpus, f)], j) for i, f in enumerate(files) for j in (True, False) if j or i % 4 == 0]
    tasks += [(a, j) for a in ARG_CASES for j in (True, False)]
    tasks += [([os.path.join(CONFIGS, "llama-3.1-8b.json"), *a], True) for a in (
        ["--seq-len", "9223372036854775807"], ["--positions", "9223372036854775807,-9223372036854775808"],
        ["--positions", ",".join(["1"] * 50000)], ["--layer-type", "a\nb"])]
    tasks += [([os.path.join(CONFIGS, "qwen2.5-7b-yarn.json"), "--seq-len", "9223372036854775807"], True),
              ([os.path.join(CONFIGS, "phi-3-mini-128k.json"), "--seq-len", "9223372036854775807"], True),
              ([os.path.join(CONFIGS, "t5-small.json"), "--relative-range", "-9223372036854775808:9223372036854775807"], True)]
    failures = []
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        for (args, j), res in zip(tasks, ex.map(lambda t: check(inspect, *t), tasks)):
            if res:
                failures.append((args, j, res))
    for args, j, res in failures:
        shown = " ".join(a if len(a) < 120 else a[:60] + "..." for a in args)
        print(f"FAIL {shown}{' --json' if j else ''}: {res}")
    print(f"{len(tasks)} runs over {len(files)} files, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "generate":
        print(f"{generate(sys.argv[2])} files written")
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 1
        sys.exit(run(sys.argv[2], sys.argv[3], jobs))
    else:
        sys.exit(__doc__)
