#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/), small hand-made
inputs that reach each parser's main paths. Files are named by their SHA-1, as libFuzzer names
corpus files. Re-running rewrites the same files. Usage: tests/fuzz/make_seeds.py"""
import hashlib
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(harness, data):
    if isinstance(data, str):
        data = data.encode()
    folder = os.path.join(ROOT, harness)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def js(value):
    return json.dumps(value, ensure_ascii=False)


# ---- protocol bodies ----
COMPLETIONS = [
    {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0},
    {"prompt": [1, 2, 3], "max_tokens": 4, "n": 2, "logprobs": 2, "stop": ["\n", "."]},
    {"prompt": ["a", [5, 6]], "echo": True, "stream": True,
     "stream_options": {"include_usage": True}, "seed": 7, "top_p": 0.9, "top_k": 5},
    {"prompt": "x", "guided_json": {"type": "object", "properties": {"a": {"type": "integer"}},
                                    "required": ["a"]}},
    {"prompt": "x", "guided_regex": "[a-c]{2,4}", "min_tokens": 1, "ignore_eos": True},
    {"prompt": "x", "guided_choice": ["yes", "no"], "presence_penalty": 0.5},
    {"prompt": "x", "grammar": "root ::= \"a\" | \"b\"", "best_of": 2, "n": 1},
    {"prompt": "x", "response_format": {"type": "json_object"}, "model": "stories260K"},
]
CHATS = [
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function",
                       "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "2"}],
     "tools": [{"type": "function", "function": {"name": "add", "parameters": {
         "type": "object", "properties": {"a": {"type": "integer"}}}}}],
     "tool_choice": "required", "logprobs": True, "top_logprobs": 2},
    {"messages": [{"role": "user", "content": "x"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {
            "type": "array", "items": {"enum": [1, "a", None]}, "maxItems": 2}}},
     "add_generation_prompt": False, "chat_template_kwargs": {"enable_thinking": False},
     "max_completion_tokens": 3},
]
for body in COMPLETIONS:
    write("api_body", b"\x00" + js(body).encode())
    write("api_body", b"\x04" + js(body).encode())
for body in CHATS:
    write("api_body", b"\x01" + js(body).encode())
    write("api_body", b"\x05" + js(body).encode())
write("api_body", b"\x02" + js({"prompt": "Hello world", "add_special_tokens": False}).encode())
write("api_body", b"\x06" + js({"messages": CHATS[0]["messages"]}).encode())
write("api_body", b"\x03" + js({"tokens": [1, 2, 300, 5]}).encode())
write("api_body", b"\x07" + js({"tokens": [15496, 995], "model": "smollm2"}).encode())


def http(method, target, body=b"", headers=()):
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost"] + list(headers)
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


write("http_request", http("POST", "/v1/completions", js(COMPLETIONS[0])))
write("http_request", http("POST", "/v1/completions?x=1", js(COMPLETIONS[1]),
                           ["Authorization: Bearer sk-fuzz"]))
write("http_request", http("POST", "/v1/chat/completions", js(CHATS[0])))
write("http_request", http("POST", "/tokenize", js({"prompt": "Hello"})))
write("http_request", http("POST", "/detokenize", js({"tokens": [1, 2]})))
write("http_request", http("GET", "/v1/models", headers=["authorization: bearer sk-fuzz"]))
write("http_request", http("GET", "/health"))
write("http_request", http("GET", "/metrics"))
write("http_request", http("DELETE", "/version"))
write("http_request", http("GET", "/v1/stream", headers=[
    "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]))
chunked = js(COMPLETIONS[2]).encode()
write("http_request", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      b"\r\n" + b"%x\r\n" % len(chunked) + chunked + b"\r\n0\r\n\r\n")

# ---- WebSocket: a client frame, then the event script ----
script = bytes([5, 0, 0, 3, 1, 0, 7, 0, 65, 0, 1, 2, 3, 0, 9, 0, 1, 0, 2, 1, 1, 0])
for frame in [
    {"type": "completion", "id": "c1", "prompt": "Hi", "max_tokens": 4, "n": 2},
    {"type": "chat", "id": "c2", "messages": [{"role": "user", "content": "Hi"}],
     "logprobs": True, "top_logprobs": 1},
    {"type": "completion", "id": "c3", "prompt": ["a", "b"], "max_tokens": 2, "logprobs": 1},
    {"type": "cancel", "id": "c1"},
    {"type": "nope", "id": 5},
]:
    text = js(frame).encode()
    # FuzzedDataProvider's ConsumeRandomLengthString: the string ends at "\\" + another byte.
    write("websocket", text.replace(b"\\", b"\\\\") + b"\\e" + script)

# ---- tokenizer bytes ----
for selector in (0, 1, 2, 8, 9, 10):
    write("tokenizer_codec", bytes([selector]) + "Hello world! 12 caf\u00e9 \u65e5\u672c <s>\n\t  x".encode())
write("tokenizer_codec", b"\x00<|im_start|>user\nHi<|im_end|>")
write("tokenizer_codec", b"\x05" + struct.pack("<8H", 1, 15043, 3186, 29991, 0xE4, 0xB8, 0xAD, 2))
write("tokenizer_codec", b"\x04" + struct.pack("<6H", 19556, 905, 1, 28, 0xC3A9 & 0xFF, 0xFFFF))
write("tokenizer_codec", b"\x0e" + struct.pack("<6H", 1, 300, 400, 5, 6, 511))

# ---- tokenizer.json / tokenizer_config.json ----
BYTE_TOKENS = {f"<0x{b:02X}>": 3 + b for b in range(256)}
spm = {
    "version": "1.0",
    "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}
                     for i, t in enumerate(["<unk>", "<s>", "</s>"])],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                              "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True,
              "byte_fallback": True, "ignore_merges": False,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, **{k: v for k, v in BYTE_TOKENS.items()
                                                          if v < 3 + 128},
                        "\u2581": 259, "a": 260, "b": 261, "\u2581a": 262, "ab": 263},
              "merges": ["\u2581 a", "a b"]},
}
byte_level = {
    "version": "1.0",
    "added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": True, "lstrip": False,
                      "rstrip": False, "normalized": False, "single_word": False},
                     {"id": 9, "content": "<|im_start|>", "special": True, "lstrip": False,
                      "rstrip": False, "normalized": False, "single_word": False}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex":
            "(?i:'s|'t|'re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
              "vocab": {"<|endoftext|>": 0, "a": 1, "b": 2, "\u0120": 3, "\u0120a": 4, "ab": 5,
                        "1": 6, "\u010a": 7, "c": 8, "<|im_start|>": 9},
              "merges": [["\u0120", "a"], ["a", "b"]]},
}
config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
          "clean_up_tokenization_spaces": True, "legacy": False,
          "added_tokens_decoder": {"2": {"content": "</s>", "special": True}},
          "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
write("tokenizer_json", js(spm))
write("tokenizer_json", js(spm).encode() + b"\x00" + js(config).encode())
write("tokenizer_json", js(byte_level))
write("tokenizer_json", js(byte_level).encode() + b"\x00" + js(
    {"bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|im_start|>",
     "add_bos_token": False}).encode())

# ---- chat templates: template NUL context ----
CONTEXT = js({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                           {"role": "assistant", "content": "A"}],
              "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
              "tools": [{"type": "function", "function": {"name": "f"}}]}).encode()
TEMPLATES = [
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content|trim }} [/INST]"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] + eos_token }}{% else %}"
    "{{ raise_exception('bad role ' ~ m.role) }}{% endif %}{% endfor %}",
    "{%- set ns = namespace(n=0) -%}{%- for m in messages|reverse if m.content is string -%}"
    "{%- set ns.n = ns.n + 1 -%}{{ loop.index0 }}:{{ m.content|upper }}{{ ',' if not loop.last }}"
    "{%- endfor -%}{{ ns.n }}{% if tools %}{{ tools|tojson(indent=2) }}{% endif %}",
    "{% macro f(x, y=2) %}{{ x * y }}{% endmacro %}{{ f(3) }}{{ [1,2,3][1:] | join('-') }}"
    "{{ {'a': 1}.items() | list }}{{ 'a,b'.split(',') }}{{ range(3) | sum }}{{ 7 // 2 }}{{ 2 ** 3 }}"
    "{% raw %}{{ x }}{% endraw %}{# c #}{{ strftime_now('%Y-%m-%d') }}",
    "{% for m in messages %}{% set content = m.content %}{% if loop.first and m.role == 'system' %}"
    "<<SYS>>{{ content }}<</SYS>>{% endif %}{{ '<|im_start|>' + m.role + '\\n' + content }}"
    "{%- if not loop.last %}\n{% endif %}{% endfor %}{% filter upper %}x{% endfilter %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
]
for template in TEMPLATES:
    write("chat_template", template.encode() + b"\x00" + CONTEXT)
for index in range(10):
    write("chat_template", bytes([index]) + b"\x00" + CONTEXT)

# ---- grammars: kind byte, text, NUL, walk ----
WALK = b"\x00" + bytes(range(0, 64, 3))
for kind, text in [
    (0, 'root ::= "{" ws item ("," ws item)* "}"\nitem ::= [a-z]+ ":" [0-9]{1,3}\nws ::= " "?'),
    (0, 'root ::= (expr "=" term "\\n")+\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | "(" expr ")"'),
    (0, 'root ::= [^"\\\\\\x00-\\x1f] | "\\u00e9" | . # comment\n'),
    (1, "(ab|c)*[x-z]{2}\\d?"),
    (2, "^a.b$|[^a]+"),
    (1, "\\w+@\\w+\\.(com|org)"),
    (3, js({"type": "object", "properties": {"a": {"type": "integer", "minimum": -5, "maximum": 20},
            "b": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4},
            "c": {"type": "array", "items": {"type": "boolean"}, "minItems": 1}},
            "required": ["a"]})),
    (3, js({"anyOf": [{"type": "null"}, {"$ref": "#/$defs/n"}],
            "$defs": {"n": {"type": "number", "exclusiveMinimum": 0}}})),
    (3, js({"type": "string", "format": "date-time"})),
    (0x83, js({"type": "object", "properties": {"x": {"enum": ["a", 1, None]}}})),
    (4, "yes\nno\nmaybe \"so\""),
]:
    write("grammar", bytes([kind]) + text.encode() + WALK)

# ---- KV memory ops: the pool's shape, then ops (FuzzedDataProvider bytes) ----
for seed in range(4):
    data = bytes((seed * 37 + i * 11) % 256 for i in range(120 + 40 * seed))
    write("kv_memory_ops", data)

# ---- traces: selector byte, then the file ----
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51,bad,1\n")
LENGTHS = "input_len,output_len\n12,40\n900,0\n7,3\n"
JSONL = "\n".join(js(x) for x in [
    {"timestamp": 0.5, "prompt": "Hi", "max_tokens": 4, "temperature": 0},
    {"prompt": [1, 2, 3], "n": 2},
    {"prompt_token_ids": [5, 6, 7, 8], "max_tokens": 100},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": 9000},
    {"prompt": "", "max_tokens": 0}]) + "\nnot json\n"
for selector in (0x00, 0x8c, 0x2c):
    write("trace", bytes([selector]) + AZURE.encode())
for selector in (0x01, 0xa9, 0x35):
    write("trace", bytes([selector]) + LENGTHS.encode())
for selector in (0x02, 0x96, 0x7e):
    write("trace", bytes([selector]) + JSONL.encode())

# ---- safetensors ----
def safetensors(tensors):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = js(header).encode()
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", safetensors([("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 0.5, 3))]))
write("safetensors", safetensors([("a.weight", "F16", [3], struct.pack("<3e", 1, 2, -0.25)),
                                  ("b", "BF16", [1, 2], b"\x80\x3f\x00\xc0"),
                                  ("c", "F32", [0], b"")]))


# ---- GGUF ----
def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}


def gguf_value(t, v):
    if t == 8:
        return gguf_string(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_string(key) + struct.pack("<I", t) + gguf_value(t, v)
    data = b""
    for name, ne, ggml_type, raw in tensors:
        while len(data) % alignment:
            data += b"\x00"
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(
            struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", ggml_type, len(data))
        data += raw
    while len(out) % alignment:
        out += b"\x00"
    return out + data


SPM_TOKENS = ["<unk>", "<s>", "</s>", "<0x41>", "\u2581", "a", "b", "\u2581a"]
spm_kvs = [("tokenizer.ggml.model", 8, "llama"),
           ("tokenizer.ggml.tokens", 9, (8, SPM_TOKENS)),
           ("tokenizer.ggml.scores", 9, (6, [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5])),
           ("tokenizer.ggml.token_type", 9, (5, [2, 3, 3, 6, 1, 1, 1, 1])),
           ("tokenizer.ggml.bos_token_id", 4, 1), ("tokenizer.ggml.eos_token_id", 4, 2),
           ("tokenizer.ggml.add_bos_token", 7, True),
           ("tokenizer.chat_template", 8, "{% for m in messages %}{{ m.content }}{% endfor %}")]
H, V = 4, len(SPM_TOKENS)
mat = lambda rows, cols: struct.pack(f"<{rows * cols}e", *[(i % 7 - 3) / 8 for i in range(rows * cols)])
ones = lambda n: struct.pack(f"<{n}f", *[1.0] * n)
llama = [("general.architecture", 8, "llama"), ("llama.context_length", 4, 16),
         ("llama.embedding_length", 4, H), ("llama.block_count", 4, 1),
         ("llama.feed_forward_length", 4, H), ("llama.attention.head_count", 4, 2),
         ("llama.attention.head_count_kv", 4, 1), ("llama.rope.freq_base", 6, 10000.0),
         ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5), ("llama.vocab_size", 4, V)]
tensors = [("token_embd.weight", [H, V], 1, mat(V, H)), ("blk.0.attn_norm.weight", [H], 0, ones(H)),
           ("blk.0.attn_q.weight", [H, H], 1, mat(H, H)), ("blk.0.attn_k.weight", [H, H // 2], 1, mat(H // 2, H)),
           ("blk.0.attn_v.weight", [H, H // 2], 1, mat(H // 2, H)),
           ("blk.0.attn_output.weight", [H, H], 1, mat(H, H)), ("blk.0.ffn_norm.weight", [H], 0, ones(H)),
           ("blk.0.ffn_gate.weight", [H, H], 1, mat(H, H)), ("blk.0.ffn_up.weight", [H, H], 1, mat(H, H)),
           ("blk.0.ffn_down.weight", [H, H], 1, mat(H, H)), ("output_norm.weight", [H], 0, ones(H))]
write("gguf", gguf(llama + spm_kvs, tensors))
write("gguf", gguf([("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, "llama-bpe"),
                    ("tokenizer.ggml.tokens", 9, (8, ["a", "b", "ab", "\u0120", "\u0120a", "<|e|>"])),
                    ("tokenizer.ggml.merges", 9, (8, ["a b", "\u0120 a"])),
                    ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 1, 1, 3])),
                    ("tokenizer.ggml.eos_token_id", 4, 5)], []))
q8_0 = struct.pack("<e", 0.5) + bytes(range(32))            # one Q8_0 block: 32 values
q4_k = struct.pack("<ee", 1.0, 0.5) + bytes(range(140))      # one Q4_K block: 256 values
write("gguf", gguf([("general.alignment", 4, 64), ("u8", 0, 7), ("i8", 1, -7), ("u16", 2, 700),
                    ("i16", 3, -700), ("u32", 4, 70000), ("i32", 5, -70000), ("f32", 6, 1.5),
                    ("bool", 7, True), ("str", 8, "s\u00e9"), ("u64", 10, 2**40), ("i64", 11, -2**40),
                    ("f64", 12, 2.25), ("arr", 9, (9, [(4, [1, 2]), (8, ["x"])]))],
                   [("q8", [32], 8, q8_0), ("q4k", [256], 12, q4_k),
                    ("f32", [2, 1], 0, struct.pack("<2f", 1, 2)), ("bf16", [2], 30, b"\x80\x3f\x00\x40")],
                   alignment=64))
