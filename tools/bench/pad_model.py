#!/usr/bin/env python3
"""Writes a trained small Llama (stories260K) padded to the weight traffic of a mid-size model.

Speculative decoding pays when a decode step is bound by reading the weights, which a 1 MB
model never is, and the only trained models here are that small. The padded model computes
the same function as the original with the cost of a big one:
  - every layer's MLP is widened to --ffn units; the new units' gate and up rows are zero and
    their down_proj columns are zero, so they add exactly 0 to the residual stream;
  - --extra-layers layers follow the original ones, with zero attention and MLP weights (o_proj
    and down_proj zero: each adds exactly 0), norms copied from layer 0.
The residual stream, and so the logits, are the original model's up to the summation order of
the widened matmuls (their reduction runs over the zero units too). Greedy output matches the
original's; the original is the natural draft model for it, and n-gram acceptance is the
original's. Float32, as stories260K is; tokenizer files are copied.

    tools/bench/pad_model.py SRC_DIR DST_DIR [--ffn 12288] [--extra-layers 12]
"""
import argparse
import json
import shutil
import struct
from pathlib import Path


def read_safetensors(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}; only F32 models are padded")
        begin, end = info["data_offsets"]
        tensors[name] = (info["shape"], data[begin:end])
    return tensors


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, (shape, raw) in tensors.items():
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for _, raw in tensors.values():
            f.write(raw)


def widen_rows(shape, raw, rows):
    """[r, c] -> [rows, c], the new rows zero."""
    r, c = shape
    return [rows, c], raw + bytes(4 * (rows - r) * c)


def widen_cols(shape, raw, cols):
    """[r, c] -> [r, cols], the new columns zero."""
    r, c = shape
    pad = bytes(4 * (cols - c))
    return [r, cols], b"".join(raw[4 * c * i : 4 * c * (i + 1)] + pad for i in range(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--ffn", type=int, default=12288)
    parser.add_argument("--extra-layers", type=int, default=12)
    args = parser.parse_args()
    src, dst = Path(args.src), Path(args.dst)
    config = json.loads((src / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise SystemExit(f"{src}: only Llama models are padded, not {config.get('model_type')}")
    hidden, ffn, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    if args.ffn < ffn:
        raise SystemExit(f"--ffn {args.ffn} is below the model's intermediate_size {ffn}")
    tensors = read_safetensors(src / "model.safetensors")
    out = {}
    for name, (shape, raw) in tensors.items():
        if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            shape, raw = widen_rows(shape, raw, args.ffn)
        elif name.endswith("mlp.down_proj.weight"):
            shape, raw = widen_cols(shape, raw, args.ffn)
        out[name] = (shape, raw)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    zero_shapes = {
        "self_attn.q_proj.weight": [heads * head_dim, hidden],
        "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
        "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
        "self_attn.o_proj.weight": [hidden, heads * head_dim],
        "mlp.gate_proj.weight": [args.ffn, hidden],
        "mlp.up_proj.weight": [args.ffn, hidden],
        "mlp.down_proj.weight": [hidden, args.ffn],
    }
    for layer in range(layers, layers + args.extra_layers):
        prefix = f"model.layers.{layer}."
        for part, shape in zero_shapes.items():
            out[prefix + part] = (shape, bytes(4 * shape[0] * shape[1]))
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[prefix + norm] = out[f"model.layers.0.{norm}"]
    dst.mkdir(parents=True, exist_ok=True)
    write_safetensors(dst / "model.safetensors", out)
    config["intermediate_size"] = args.ffn
    config["num_hidden_layers"] = layers + args.extra_layers
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for extra in src.iterdir():
        if extra.name not in ("config.json", "model.safetensors") and extra.is_file():
            shutil.copy(extra, dst / extra.name)
    total = sum(len(raw) for _, raw in out.values())
    print(f"{dst}: {layers} + {args.extra_layers} layers, ffn {args.ffn}, {total / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
