#!/usr/bin/python3
"""Writes a Qwen3.5-layout GGUF without its MTP (nextn) blocks, for llama.cpp b8967.

usage: strip_mtp.py IN.gguf OUT.gguf

b8967 reads no `nextn_predict_layers` for qwen35/qwen35moe (its converter drops the MTP
weights): it would take the MTP block for one more main layer, recurrent by its index, and
refuse the file. Here block_count loses the MTP blocks, the key goes, and the blocks'
tensors are left out; every other tensor is copied byte for byte, so the main model is the
same one (tests/reference/README.md: the trained fixtures' llama.cpp references).
"""
import sys

import gguf_file


def main():
    src, dst = sys.argv[1:3]
    meta, tensors = gguf_file.read(src)
    kv = dict(meta)
    arch = kv["general.architecture"][1]
    mtp = kv.get(arch + ".nextn_predict_layers", (0, 0))[1]
    blocks = kv[arch + ".block_count"][1]
    out_meta = []
    for key, (t, v) in meta:
        if key == arch + ".nextn_predict_layers":
            continue
        out_meta.append((key, (t, blocks - mtp) if key == arch + ".block_count" else (t, v)))
    dropped = tuple(f"blk.{b}." for b in range(blocks - mtp, blocks))
    kept = [(n, t) for n, t in tensors.items() if not n.startswith(dropped)]
    gguf_file.write_raw(dst, out_meta, kept)
    print(f"strip_mtp: {dst}: {blocks - mtp} blocks, {len(tensors) - len(kept)} MTP tensors left out")


if __name__ == "__main__":
    main()
