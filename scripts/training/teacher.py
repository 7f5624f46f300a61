"""The teacher: a llama GGUF (stories260K) run by PyTorch, for the students' soft targets.

llama as llama.cpp runs it: RMS norms, RoPE on adjacent pairs (llama's "normal" mode), grouped
K/V heads (head h reads kv head h // (heads / kv_heads)), a SiLU-gated FFN, the head
`output.weight` (or token_embd when the file ties them).
"""
import numpy as np
import torch

import gguf_file
from qwen35 import rms_norm


class Llama:
    def __init__(self, path):
        meta, tensors = gguf_file.read(path)
        kv = {k: v[1] for k, v in meta}
        a = kv["general.architecture"]
        if a != "llama":
            raise ValueError(f"{path}: architecture {a}, the teacher must be llama")
        self.tokenizer_meta = [(k, v) for k, v in meta if k.startswith("tokenizer.")]
        self.layers = kv[a + ".block_count"]
        self.heads = kv[a + ".attention.head_count"]
        self.kv_heads = kv.get(a + ".attention.head_count_kv", self.heads)
        self.eps = kv[a + ".attention.layer_norm_rms_epsilon"]
        self.base = kv.get(a + ".rope.freq_base", 10000.0)
        self.context = kv[a + ".context_length"]
        self.w = {n: torch.from_numpy(gguf_file.to_array(*t)) for n, t in tensors.items()}
        self.dim = self.w["token_embd.weight"].shape[1]
        self.head_dim = self.dim // self.heads
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def rope(self, x, pos):  # x: (B, H, T, hd), adjacent pairs
        hd = x.shape[-1]
        inv = self.base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = (pos[:, None].double() * inv[None, :]).float()
        c, s = torch.cos(ang), torch.sin(ang)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    @torch.no_grad()
    def logits(self, tokens):  # tokens: (B, T) int64 -> (B, T, vocab)
        B, T = tokens.shape
        w, hd = self.w, self.head_dim
        x = w["token_embd.weight"][tokens]
        pos = torch.arange(T)
        mask = torch.full((T, T), float("-inf")).triu(1)
        for l in range(self.layers):
            b = f"blk.{l}."
            h = rms_norm(x, w[b + "attn_norm.weight"], self.eps)
            q = (h @ w[b + "attn_q.weight"].T).view(B, T, self.heads, hd).transpose(1, 2)
            k = (h @ w[b + "attn_k.weight"].T).view(B, T, self.kv_heads, hd).transpose(1, 2)
            v = (h @ w[b + "attn_v.weight"].T).view(B, T, self.kv_heads, hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            att = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(hd) + mask, -1) @ v
            x = x + att.transpose(1, 2).reshape(B, T, -1) @ w[b + "attn_output.weight"].T
            h = rms_norm(x, w[b + "ffn_norm.weight"], self.eps)
            g = torch.nn.functional.silu(h @ w[b + "ffn_gate.weight"].T) * (h @ w[b + "ffn_up.weight"].T)
            x = x + g @ w[b + "ffn_down.weight"].T
        return rms_norm(x, w["output_norm.weight"], self.eps) @ self.head.T
