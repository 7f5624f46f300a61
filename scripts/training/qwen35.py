"""Qwen3.5's hybrid layers (dense `qwen35` and MoE `qwen35moe`) with an MTP layer, in PyTorch,
computing what llama.cpp and flashspec compute from the GGUF tensors this module writes.

Every weight is held in its GGUF orientation (a GGUF matrix {in, out} is a torch (out, in)
tensor) and named by its GGUF tensor name, so export is a copy. The forward, per layer:

- Gated DeltaNet (layers l with (l + 1) % interval != 0): x_n = rms(x) attn_norm; qkv, z,
  alpha, beta projections; a causal depthwise convolution of conv_kernel taps over qkv
  (ssm_conv1d, oldest tap first), SiLU; q, k L2-normalised per key head (x / max(|x|, eps)),
  q scaled by 1/sqrt(state); value head h reads key head h % k_heads; per value head
  S = exp(softplus(alpha + dt_bias) a) S; d = sigmoid(beta) (v - S^T k); S += k d^T;
  o = S^T q; then rms(o) ssm_norm * silu(z), ssm_out.
- Gated attention (the others): attn_q gives per head hd queries then hd gate values; per-head
  RMS norms on q and k; NeoX RoPE over the first rope_dims of each head; grouped K/V (head h
  reads kv head h // (heads / kv_heads)); output * sigmoid(gate), attn_output.
- FFN after rms(x) post_attention_norm: SiLU-gated (dense), or softmax router over experts,
  top k renormalised, plus a shared expert scaled by sigmoid(x . ffn_gate_inp_shexp).
- The head: rms(x) output_norm, then token_embd (tied).
- MTP (block n_layer, the file's last): from the main model's normed hidden h_i and the next
  token t_{i+1}: eh_proj [rms(emb(t_{i+1})) enorm ; rms(h_i) hnorm], one gated-attention
  layer with the model's FFN kind, rms(.) shared_head_norm, the tied head: predicts t_{i+2}.
"""
import math

import torch
import torch.nn.functional as F

import gguf_file


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Shape:
    def __init__(self, arch):
        self.arch = arch
        self.moe = arch == "qwen35moe"
        self.vocab = 512
        self.dim = 64
        self.layers = 8  # main layers; the MTP layer is block `layers`
        self.interval = 4
        self.heads, self.kv_heads, self.head_dim = 4, 2, 16
        self.rope_dims, self.rope_base = 8, 1e7
        self.rope_sections = [2, 1, 1, 0]  # halves of rope_dims; text positions make them all one
        self.conv_kernel, self.state, self.k_heads, self.v_heads = 4, 16, 2, 4
        self.ffn = 192
        self.experts, self.experts_used, self.expert_ffn, self.shared_ffn = 64, 8, 32, 64
        self.eps = 1e-6
        self.context = 128

    def recurrent(self, l):
        return l < self.layers and (l + 1) % self.interval != 0

    @property
    def key_dim(self):
        return self.k_heads * self.state

    @property
    def value_dim(self):
        return self.v_heads * self.state

    @property
    def conv_dim(self):
        return 2 * self.key_dim + self.value_dim


def unit_lower_inverse(n):
    """(I + N)^-1 for strictly lower-triangular (..., L, L) N, as the product of (I + (-N)^(2^j))
    over j while 2^j < L (N^L = 0): a few batched matmuls, where a batched triangular solve on
    the CPU goes one small matrix at a time."""
    L = n.shape[-1]
    eye = torch.eye(L, dtype=n.dtype)
    power, inverse, span = -n, eye + (-n), 2
    while span < L:
        power = power @ power
        inverse = inverse @ (eye + power)
        span *= 2
    return inverse


def delta_rule_chunked(q, k, v, log_decay, beta, chunk=32):
    """The gated delta rule over (B, H, T, S) q, k, v, (B, H, T) log decays and betas, from a
    zero state, in chunks (see kernels/delta_net.h for the recurrence): within a chunk with
    cs the decays' logs summed through each row and S0 the state before it,
      D = (I + diag(beta) M)^-1 diag(beta) (V - e^cs K S0),  M[t,u] = e^(cs_t - cs_u) k_t.k_u, u < t
      out = e^cs Q S0 + (e^(cs_t - cs_u) q_t.k_u)_{u<=t} D,  S = e^cs_L S0 + K^T (e^(cs_L - cs) D)."""
    B, H, T, S = q.shape
    state = q.new_zeros(B, H, S, S)  # [key, value]
    outs = []
    for c0 in range(0, T, chunk):
        qc, kc, vc = q[:, :, c0:c0 + chunk], k[:, :, c0:c0 + chunk], v[:, :, c0:c0 + chunk]
        g, b = log_decay[:, :, c0:c0 + chunk], beta[:, :, c0:c0 + chunk]
        L = qc.shape[2]
        cs = g.cumsum(-1)
        diff = cs[..., :, None] - cs[..., None, :]
        strict = torch.ones(L, L, dtype=torch.bool).tril(-1)
        incl = torch.ones(L, L, dtype=torch.bool).tril(0)
        m = (kc @ kc.transpose(-1, -2)) * torch.exp(diff.masked_fill(~strict, float("-inf")))
        rhs = b[..., None] * (vc - torch.exp(cs)[..., None] * (kc @ state))
        d = unit_lower_inverse(b[..., None] * m) @ rhs
        qk = (qc @ kc.transpose(-1, -2)) * torch.exp(diff.masked_fill(~incl, float("-inf")))
        outs.append(torch.exp(cs)[..., None] * (qc @ state) + qk @ d)
        tail = torch.exp(cs[..., -1:] - cs)[..., None]
        state = torch.exp(cs[..., -1])[..., None, None] * state + (kc * tail).transpose(-1, -2) @ d
    return torch.cat(outs, 2)


def delta_rule_reference(q, k, v, log_decay, beta):
    """The recurrence row by row (for checking the chunked form)."""
    B, H, T, S = q.shape
    state = q.new_zeros(B, H, S, S)
    outs = []
    for t in range(T):
        state = torch.exp(log_decay[:, :, t])[..., None, None] * state
        kt = k[:, :, t]
        d = beta[:, :, t, None] * (v[:, :, t] - (kt[..., :, None] * state).sum(-2))
        state = state + kt[..., :, None] * d[..., None, :]
        outs.append((q[:, :, t, :, None] * state).sum(-2))
    return torch.stack(outs, 2)


class Student(torch.nn.Module):
    def __init__(self, shape, seed):
        super().__init__()
        self.s = s = shape
        gen = torch.Generator().manual_seed(seed)
        self.w = torch.nn.ParameterDict()

        def matrix(name, rows, cols, std=None):  # a GGUF {cols, rows} matrix
            std = std if std is not None else 1.0 / math.sqrt(cols)
            self.w[name.replace(".", "/")] = torch.nn.Parameter(torch.randn(rows, cols, generator=gen) * std)

        def vector(name, n, value):
            self.w[name.replace(".", "/")] = torch.nn.Parameter(torch.full((n,), float(value)))

        E = s.dim
        matrix("token_embd.weight", s.vocab, E, 1.0 / math.sqrt(E))
        vector("output_norm.weight", E, 1.0)
        for l in range(s.layers + 1):
            b = f"blk.{l}."
            vector(b + "attn_norm.weight", E, 1.0)
            vector(b + "post_attention_norm.weight", E, 1.0)
            out_std = 1.0 / math.sqrt(2 * (s.layers + 1)) / math.sqrt(E)  # residual writes start small
            if s.recurrent(l):
                matrix(b + "attn_qkv.weight", s.conv_dim, E)
                matrix(b + "attn_gate.weight", s.value_dim, E)
                self.w[(b + "ssm_conv1d.weight").replace(".", "/")] = torch.nn.Parameter(
                    torch.randn(s.conv_dim, s.conv_kernel, generator=gen) * 0.5)
                vector(b + "ssm_dt.bias", s.v_heads, 0.0)
                # a = -exp(A_log), A_log spread over [0, log 16] as Mamba initialises it
                self.w[(b + "ssm_a_log").replace(".", "/")] = torch.nn.Parameter(
                    torch.log(torch.linspace(1.0, 16.0, s.v_heads)))
                matrix(b + "ssm_beta.weight", s.v_heads, E)
                matrix(b + "ssm_alpha.weight", s.v_heads, E)
                vector(b + "ssm_norm.weight", s.state, 1.0)
                matrix(b + "ssm_out.weight", E, s.value_dim, out_std)
            else:
                q_dim, kv_dim = s.heads * s.head_dim, s.kv_heads * s.head_dim
                matrix(b + "attn_q.weight", 2 * q_dim, E)
                matrix(b + "attn_k.weight", kv_dim, E)
                matrix(b + "attn_v.weight", kv_dim, E)
                matrix(b + "attn_output.weight", E, q_dim, out_std)
                vector(b + "attn_q_norm.weight", s.head_dim, 1.0)
                vector(b + "attn_k_norm.weight", s.head_dim, 1.0)
            if not s.moe:
                matrix(b + "ffn_gate.weight", s.ffn, E)
                matrix(b + "ffn_up.weight", s.ffn, E)
                matrix(b + "ffn_down.weight", E, s.ffn, out_std)
            else:
                X, Fe, Fs = s.experts, s.expert_ffn, s.shared_ffn
                matrix(b + "ffn_gate_inp.weight", X, E, 0.02)
                self.w[(b + "ffn_gate_exps.weight").replace(".", "/")] = torch.nn.Parameter(
                    torch.randn(X, Fe, E, generator=gen) / math.sqrt(E))
                self.w[(b + "ffn_up_exps.weight").replace(".", "/")] = torch.nn.Parameter(
                    torch.randn(X, Fe, E, generator=gen) / math.sqrt(E))
                self.w[(b + "ffn_down_exps.weight").replace(".", "/")] = torch.nn.Parameter(
                    torch.randn(X, E, Fe, generator=gen) * out_std)
                vector(b + "ffn_gate_inp_shexp.weight", E, 0.0)
                matrix(b + "ffn_gate_shexp.weight", Fs, E)
                matrix(b + "ffn_up_shexp.weight", Fs, E)
                matrix(b + "ffn_down_shexp.weight", E, Fs, out_std)
        m = f"blk.{s.layers}.nextn."
        matrix(m + "eh_proj.weight", E, 2 * E)
        vector(m + "enorm.weight", E, 1.0)
        vector(m + "hnorm.weight", E, 1.0)
        vector(m + "shared_head_norm.weight", E, 1.0)

    def p(self, name):
        return self.w[name.replace(".", "/")]

    # ---- blocks ----

    def delta_net(self, b, x):
        s, p = self.s, self.p
        B, T, _ = x.shape
        h = rms_norm(x, p(b + "attn_norm.weight"), s.eps)
        qkv = h @ p(b + "attn_qkv.weight").T
        z = h @ p(b + "attn_gate.weight").T
        alpha = h @ p(b + "ssm_alpha.weight").T
        beta = torch.sigmoid(h @ p(b + "ssm_beta.weight").T)
        conv = F.conv1d(F.pad(qkv.transpose(1, 2), (s.conv_kernel - 1, 0)), p(b + "ssm_conv1d.weight")[:, None, :],
                        groups=s.conv_dim)
        c = F.silu(conv).transpose(1, 2)  # (B, T, conv_dim)
        S, kd = s.state, s.key_dim

        def heads(t, n):
            return t.reshape(B, T, n, S).transpose(1, 2)

        q = heads(c[..., :kd], s.k_heads)
        k = heads(c[..., kd:2 * kd], s.k_heads)
        v = heads(c[..., 2 * kd:], s.v_heads)
        q = q / torch.clamp(q.norm(dim=-1, keepdim=True), min=s.eps) / math.sqrt(S)
        k = k / torch.clamp(k.norm(dim=-1, keepdim=True), min=s.eps)
        rep = torch.arange(s.v_heads) % s.k_heads  # value head h reads key head h % k_heads
        q, k = q[:, rep], k[:, rep]
        a = -torch.exp(p(b + "ssm_a_log"))
        log_decay = (F.softplus(alpha + p(b + "ssm_dt.bias")) * a).transpose(1, 2)
        o = delta_rule_chunked(q, k, v, log_decay, beta.transpose(1, 2))
        o = rms_norm(o.transpose(1, 2), p(b + "ssm_norm.weight"), s.eps).reshape(B, T, s.value_dim)
        return x + (o * F.silu(z)) @ p(b + "ssm_out.weight").T

    def rope(self, x):  # (B, H, T, hd): NeoX pairs (i, i + n/2) over the first rope_dims
        s = self.s
        n, T = s.rope_dims, x.shape[2]
        inv = s.rope_base ** (-torch.arange(0, n, 2, dtype=torch.float64) / n)
        ang = (torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]).float()
        c, sn = torch.cos(ang), torch.sin(ang)
        x1, x2, rest = x[..., :n // 2], x[..., n // 2:n], x[..., n:]
        return torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn, rest], -1)

    def attention(self, b, x):
        s, p = self.s, self.p
        B, T, _ = x.shape
        hd = s.head_dim
        h = rms_norm(x, p(b + "attn_norm.weight"), s.eps)
        qg = (h @ p(b + "attn_q.weight").T).view(B, T, s.heads, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (h @ p(b + "attn_k.weight").T).view(B, T, s.kv_heads, hd)
        v = (h @ p(b + "attn_v.weight").T).view(B, T, s.kv_heads, hd)
        q = rms_norm(q, p(b + "attn_q_norm.weight"), s.eps).transpose(1, 2)
        k = rms_norm(k, p(b + "attn_k_norm.weight"), s.eps).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        rep = s.heads // s.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.transpose(1, 2).repeat_interleave(rep, 1)
        mask = torch.full((T, T), float("-inf")).triu(1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
        att = att.transpose(1, 2) * torch.sigmoid(gate)
        return x + att.reshape(B, T, -1) @ p(b + "attn_output.weight").T

    def dense_ffn(self, b, h):
        p = self.p
        return (F.silu(h @ p(b + "ffn_gate.weight").T) * (h @ p(b + "ffn_up.weight").T)) @ p(b + "ffn_down.weight").T

    def routed(self, b, h):
        """(FFN output, router probabilities, chosen experts) for (N, E) rows. Every expert's
        gate and up run on every row as one matmul and the routing weights (zero for experts
        a row does not use) scale what goes into one down matmul: the same sum as running each
        row's k experts alone, with no gradient to experts a row does not use, and on a CPU
        far faster than gathering rows per expert into small batched matmuls."""
        s, p = self.s, self.p
        N, E = h.shape
        X, K, Fe = s.experts, s.experts_used, s.expert_ffn
        probs = torch.softmax(h @ p(b + "ffn_gate_inp.weight").T, -1)
        top_w, top_i = probs.topk(K, -1)
        weight = torch.zeros_like(probs).scatter(1, top_i, top_w / top_w.sum(-1, keepdim=True))
        g = h @ p(b + "ffn_gate_exps.weight").reshape(X * Fe, E).T
        u = h @ p(b + "ffn_up_exps.weight").reshape(X * Fe, E).T
        act = (F.silu(g) * u).view(N, X, Fe) * weight[..., None]
        down = p(b + "ffn_down_exps.weight").permute(0, 2, 1).reshape(X * Fe, E)  # (X, E, Fe) -> rows x*Fe+f
        out = act.reshape(N, X * Fe) @ down
        shared = (F.silu(h @ p(b + "ffn_gate_shexp.weight").T) * (h @ p(b + "ffn_up_shexp.weight").T)) \
            @ p(b + "ffn_down_shexp.weight").T
        out = out + torch.sigmoid(h @ p(b + "ffn_gate_inp_shexp.weight"))[:, None] * shared
        return out, probs, top_i

    def ffn(self, b, x, routing):
        s = self.s
        h = rms_norm(x, self.p(b + "post_attention_norm.weight"), s.eps)
        if not s.moe:
            return x + self.dense_ffn(b, h)
        B, T, E = h.shape
        out, probs, chosen = self.routed(b, h.reshape(-1, E))
        routing.append((probs, chosen))
        return x + out.view(B, T, E)

    def layer(self, l, x, routing):
        b = f"blk.{l}."
        x = self.delta_net(b, x) if self.s.recurrent(l) else self.attention(b, x)
        return self.ffn(b, x, routing)

    def head(self, h):
        return h @ self.p("token_embd.weight").T

    def forward(self, tokens):
        """tokens (B, T): main logits (B, T, V), MTP logits (B, T-1, V) for t_{i+2}, routing."""
        s, p = self.s, self.p
        routing = []
        x = p("token_embd.weight")[tokens]
        for l in range(s.layers):
            x = self.layer(l, x, routing)
        h = rms_norm(x, p("output_norm.weight"), s.eps)
        logits = self.head(h)
        m = f"blk.{s.layers}.nextn."
        e = rms_norm(p("token_embd.weight")[tokens[:, 1:]], 1.0, s.eps) * p(m + "enorm.weight")
        hh = rms_norm(h[:, :-1], 1.0, s.eps) * p(m + "hnorm.weight")
        y = torch.cat([e, hh], -1) @ p(m + "eh_proj.weight").T
        y = self.layer(s.layers, y, routing)
        mtp = self.head(rms_norm(y, p(m + "shared_head_norm.weight"), s.eps))
        return logits, mtp, routing

    # ---- export ----

    def gguf_tensors(self):
        """(name, ggml type, float32 array) in file order: matrices Q8_0, the rest F32."""
        out = []
        for key, t in self.w.items():
            name = key.replace("/", ".")
            a = t.detach().float().numpy()
            if name.endswith("ssm_a_log"):
                name, a = name[:-len("_log")], -torch.exp(t.detach()).numpy()
            quantize = a.ndim >= 2 and a.shape[-1] % 32 == 0 and "ffn_gate_inp.weight" not in name \
                and "ssm_alpha" not in name and "ssm_beta" not in name
            out.append((name, gguf_file.Q8_0 if quantize else gguf_file.F32, a))
        return out

    def gguf_metadata(self, name, tokenizer_meta):
        s = self.s
        A = s.arch
        U32, F32s, STR = gguf_file.UINT32, gguf_file.FLOAT32, gguf_file.STRING
        kv = [("general.architecture", (STR, A)), ("general.name", (STR, name)), ("general.alignment", (U32, 32)),
              ("general.file_type", (U32, 7)),
              (A + ".block_count", (U32, s.layers + 1)), (A + ".context_length", (U32, s.context)),
              (A + ".embedding_length", (U32, s.dim)),
              (A + ".feed_forward_length", (U32, s.shared_ffn if s.moe else s.ffn)),
              (A + ".attention.head_count", (U32, s.heads)), (A + ".attention.head_count_kv", (U32, s.kv_heads)),
              (A + ".attention.key_length", (U32, s.head_dim)), (A + ".attention.value_length", (U32, s.head_dim)),
              (A + ".attention.layer_norm_rms_epsilon", (F32s, s.eps)), (A + ".rope.freq_base", (F32s, s.rope_base)),
              (A + ".rope.dimension_count", (U32, s.rope_dims)),
              (A + ".rope.dimension_sections", (gguf_file.ARRAY, (gguf_file.INT32, s.rope_sections))),
              (A + ".ssm.conv_kernel", (U32, s.conv_kernel)), (A + ".ssm.state_size", (U32, s.state)),
              (A + ".ssm.group_count", (U32, s.k_heads)), (A + ".ssm.time_step_rank", (U32, s.v_heads)),
              (A + ".ssm.inner_size", (U32, s.value_dim)), (A + ".full_attention_interval", (U32, s.interval)),
              (A + ".nextn_predict_layers", (U32, 1))]
        if s.moe:
            kv += [(A + ".expert_count", (U32, s.experts)), (A + ".expert_used_count", (U32, s.experts_used)),
                   (A + ".expert_feed_forward_length", (U32, s.expert_ffn)),
                   (A + ".expert_shared_feed_forward_length", (U32, s.shared_ffn))]
        return kv + list(tokenizer_meta)
