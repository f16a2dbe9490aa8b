"""The PyTorch reference of pipetrain's models. Its state_dict keys and shapes
are exactly the tensor names pipetrain exports, so

    model = PipetrainViT(...)                      # or PipetrainGPT(...)
    model.load_state_dict(safetensors.torch.load_file("weights.safetensors"))

loads a pipetrain checkpoint. Written for torch 1.13 (Debian's python3-torch),
so attention is spelled out instead of calling scaled_dot_product_attention.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    """pre-LN multi-head self-attention with a residual add"""

    def __init__(self, d, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return x + self.proj(y)


class MLP(nn.Module):
    """pre-LN MLP with exact (erf) GELU and a residual add"""

    def __init__(self, d, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Block(nn.Module):
    def __init__(self, d, heads, hidden, causal):
        super().__init__()
        self.attn = Attn(d, heads, causal)
        self.mlp = MLP(d, hidden)

    def forward(self, x):
        return self.mlp(self.attn(x))


class ViTEmbed(nn.Module):
    def __init__(self, d, channels, size, patch):
        super().__init__()
        self.patch_size, self.grid = patch, size // patch
        self.patch = nn.Linear(channels * patch * patch, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, 1 + self.grid * self.grid, d))

    def forward(self, images):  # [B, C, H, W]
        B, C, H, W = images.shape
        p, g = self.patch_size, self.grid
        patches = images.view(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)
        x = torch.cat([self.cls.expand(B, -1, -1), self.patch(patches)], dim=1)
        return x + self.pos


class GPTEmbed(nn.Module):
    def __init__(self, d, vocab, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)

    def forward(self, tokens):  # [B, T]
        return self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))


class Head(nn.Module):
    def __init__(self, d, classes, bias):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, classes, bias=bias)

    def forward(self, x):
        return self.fc(self.ln(x))


class PipetrainViT(nn.Module):
    def __init__(self, dim, layers, heads, mlp_hidden, channels, size, patch, classes):
        super().__init__()
        self.embed = ViTEmbed(dim, channels, size, patch)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_hidden, False) for _ in range(layers))
        self.head = Head(dim, classes, bias=True)

    def forward(self, images):
        x = self.embed(images)
        for b in self.blocks:
            x = b(x)
        return self.head(x[:, 0])  # logits [B, classes] from the CLS token


class PipetrainGPT(nn.Module):
    def __init__(self, dim, layers, heads, mlp_hidden, vocab, context):
        super().__init__()
        self.embed = GPTEmbed(dim, vocab, context)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_hidden, True) for _ in range(layers))
        self.head = Head(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)  # logits [B, T, vocab]


def decays(name, param):
    """pipetrain's AdamW weight-decay rule: linear weights and the token embedding"""
    return name.endswith(".weight") and param.dim() == 2 and not name.startswith("embed.pos")


def lr_scheduler(opt, min_lr, warmup, total, kind):
    """pipetrain's learning-rate schedule (nn/optim.c) as a PyTorch user
    builds it from torch.optim.lr_scheduler: stepped once after every
    optimizer step. The base rate is the optimizer's lr."""
    S = torch.optim.lr_scheduler
    base = opt.param_groups[0]["lr"]
    span = total - warmup
    if kind == "constant":
        decay = S.ConstantLR(opt, factor=1.0, total_iters=0)
    elif kind == "cosine":
        decay = S.CosineAnnealingLR(opt, T_max=max(span, 1), eta_min=min_lr)
    else:
        decay = S.LinearLR(opt, start_factor=1.0, end_factor=min_lr / base,
                           total_iters=max(span, 1))
    if warmup == 0:
        return decay
    warm = S.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup)
    return S.SequentialLR(opt, [warm, decay], milestones=[warmup])
