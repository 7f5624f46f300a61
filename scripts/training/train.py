#!/usr/bin/python3
"""Trains a Qwen3.5-layout student (qwen35 or qwen35moe, with one MTP layer) on the corpus of
make_corpus.py, distilled from the teacher that wrote most of it, and writes it as GGUF.

usage: train.py --arch qwen35|qwen35moe CORPUS.npz TEACHER.gguf OUT.gguf [--steps N] [--threads N]

Loss per row position i: the cross-entropy of the student's next-token distribution against
the teacher's (stories260K's full distribution, not only the sampled token); plus, weighted by
--mtp-weight, the MTP layer's distribution for t_{i+2} against the teacher's at i+1 (the
gradient reaches the main layers too, as MTP is trained jointly); plus, for MoE, a
load-balancing term (experts x sum over experts of the share of routed slots times the mean
router probability, per layer; --lb-weight). AdamW, linear warm-up then cosine decay, batches
drawn by a seeded generator. At the end: held-out perplexity of teacher and student on the
stories260K held-out rows (the true sampled tokens), the MTP layer's accuracy on t_{i+2},
the same for the Q8_0 file read back; all printed as one JSON line.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("train: PyTorch is missing: apt-get install python3-torch libopenblas0-pthread "
             "(scripts/train-fixtures.sh installs them)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_file  # noqa: E402
import qwen35  # noqa: E402
import teacher as teacher_model  # noqa: E402


def soft_ce(student_logits, teacher_logits, valid):
    loss = -(F.softmax(teacher_logits, -1) * F.log_softmax(student_logits, -1)).sum(-1)
    return (loss * valid).sum() / valid.sum()


def balance_loss(routing, experts):
    total = 0.0
    for probs, chosen in routing:
        share = torch.bincount(chosen.reshape(-1), minlength=experts).float() / chosen.numel()
        total = total + experts * (share * probs.mean(0)).sum()
    return total / max(len(routing), 1)


@torch.no_grad()
def evaluate(student, teacher, rows, batch=64):
    """Held-out perplexity of teacher and student on the true tokens; top-1 accuracy of the
    student's next token and of its MTP layer's next-next token against the true tokens; and
    how often the MTP layer's top token equals the main model's at the next position (what a
    greedy MTP draft of one token is accepted at, on this text)."""
    nll_t = nll_s = n = mtp_hits = mtp_n = main_hits = agree = 0.0
    for i in range(0, len(rows), batch):
        tok = torch.from_numpy(rows[i:i + batch]).long()
        valid = (tok[:, 1:] >= 0)
        tgt = tok[:, 1:].clamp(min=0)
        lt = teacher.logits(tok.clamp(min=0))[:, :-1]
        ls, lm, _ = student(tok.clamp(min=0))
        ls = ls[:, :-1]
        nll_t += -(F.log_softmax(lt, -1).gather(-1, tgt[..., None])[..., 0] * valid).sum().item()
        nll_s += -(F.log_softmax(ls, -1).gather(-1, tgt[..., None])[..., 0] * valid).sum().item()
        n += valid.sum().item()
        v2 = tok[:, 2:] >= 0
        main_hits += ((ls.argmax(-1) == tgt) & valid).sum().item()
        mtp_top = lm[:, :-1].argmax(-1)
        mtp_hits += ((mtp_top == tok[:, 2:]) & v2).sum().item()
        agree += ((mtp_top == ls[:, 1:].argmax(-1)) & v2).sum().item()
        mtp_n += v2.sum().item()
    return {"teacher_ppl": math.exp(nll_t / n), "student_ppl": math.exp(nll_s / n),
            "next_accuracy": main_hits / n, "mtp_accuracy": mtp_hits / mtp_n,
            "mtp_agrees_with_main": agree / mtp_n, "tokens": int(n)}


def load_gguf_into(student, path):
    _, tensors = gguf_file.read(path)
    with torch.no_grad():
        for key, p in student.w.items():
            name = key.replace("/", ".")
            if name.endswith("ssm_a_log"):
                a = gguf_file.to_array(*tensors[name[:-len("_log")]])
                p.copy_(torch.log(-torch.from_numpy(a)))
            else:
                p.copy_(torch.from_numpy(gguf_file.to_array(*tensors[name])).view_as(p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["qwen35", "qwen35moe"], required=True)
    ap.add_argument("corpus")
    ap.add_argument("teacher")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, help="default: 1800 (qwen35), 1400 (qwen35moe)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--lb-weight", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=3505)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--init-embedding", type=int, default=1)
    ap.add_argument("--state", help="keep the trained float weights here (torch.save), to export again without training")
    ap.add_argument("--export-only", action="store_true", help="read --state and write OUT.gguf, no training")
    ap.add_argument("--resume", help="start from weights torch.save'd by an earlier --state (a further phase)")
    a = ap.parse_args()
    if a.steps is None:
        a.steps = 1800 if a.arch == "qwen35" else 1400
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # decays of exp(-large) underflow to denormals, which the CPU computes ~100x slower
    torch.manual_seed(a.seed)

    corpus = np.load(a.corpus)
    train_rows = corpus["train"]
    held = corpus["heldout"][corpus["heldout_source"] == 0]  # stories260K's own held-out stories
    teacher = teacher_model.Llama(a.teacher)
    shape = qwen35.Shape(a.arch)
    student = qwen35.Student(shape, a.seed)
    if a.init_embedding:
        # Start from the teacher's output head (same width), so that the tied embedding
        # begins as a vocabulary the teacher already separates.
        with torch.no_grad():
            student.p("token_embd.weight").copy_(teacher.head / teacher.head.norm(dim=-1).mean())
    decay = [p for k, p in student.w.items() if p.ndim >= 2]
    rest = [p for k, p in student.w.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    warmup = max(1, a.steps // 20)
    gen = np.random.default_rng(a.seed)
    started = time.time()
    if a.export_only:
        student.load_state_dict(torch.load(a.state))
        a.steps = 0
    elif a.resume:
        student.load_state_dict(torch.load(a.resume))
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        tok = torch.from_numpy(train_rows[gen.integers(0, len(train_rows), a.batch)]).long()
        valid = (tok >= 0).float()
        tok = tok.clamp(min=0)
        with torch.no_grad():
            target = teacher.logits(tok)
        logits, mtp, routing = student(tok)
        main_loss = soft_ce(logits, target, valid)
        mtp_loss = soft_ce(mtp, target[:, 1:], valid[:, 1:] * valid[:, :-1])
        loss = main_loss + a.mtp_weight * mtp_loss
        lb = balance_loss(routing, shape.experts) if shape.moe else torch.tensor(0.0)
        loss = loss + a.lb_weight * lb
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        if step % a.log_every == 0 or step == a.steps:
            print(f"train {a.arch}: step {step}/{a.steps} main {main_loss.item():.4f} mtp {mtp_loss.item():.4f} "
                  f"balance {float(lb):.3f} lr {lr:.2e} {time.time() - started:.0f} s", flush=True)

    student.eval()
    if a.state and not a.export_only:
        torch.save(student.state_dict(), a.state)
    result = {"arch": a.arch, "steps": a.steps, "train_seconds": round(time.time() - started, 1),
              "float": evaluate(student, teacher, held)}
    name = "trained-" + a.arch
    tmp = a.out + ".tmp"
    gguf_file.write(tmp, student.gguf_metadata(name, teacher.tokenizer_meta), student.gguf_tensors())
    os.replace(tmp, a.out)
    load_gguf_into(student, a.out)
    result["q8_0"] = evaluate(student, teacher, held)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
