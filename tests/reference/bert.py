"""A PyTorch BERT written from the BERT paper and Hugging Face's BertModel
description (post-LN encoder, absolute positions, token types, erf GELU), with
pipetrain's classifier on top: the mean of the final hidden states over the
real tokens, then one linear layer.

Dropout: none by default (evaluation form). A model given a `dropper` applies
dropout where BertModel and BertForSequenceClassification do: the embeddings'
output after their LayerNorm, the attention probabilities, the attention
output projection and the FFN output before their residual adds, and the
pooled vector before the classifier; dropper(unit, site, x) returns x times
its mask, with pipetrain's unit numbering (embed 0, layer l's attention 1 + 2l
and FFN 2 + 2l, head 2L + 1) and sites (nn/unit_bert.c). torch's own RNG
cannot reproduce pipetrain's masks, so a parity test hands it pipetrain's.

Its state_dict keys are Hugging Face's BertModel names plus head.fc.weight and
head.fc.bias, exactly what `pipetrain export` writes for a bert checkpoint, so
a Hugging Face model.safetensors loads with load_state_dict(strict=False) and a
pipetrain export loads strictly. Written for torch 1.13 (Debian's python3-torch).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embeddings(nn.Module):
    def __init__(self, vocab, positions, types, d, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(positions, d)
        self.token_type_embeddings = nn.Embedding(types, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)

    def forward(self, ids):
        T = ids.shape[1]
        pos = torch.arange(T)
        x = self.word_embeddings(ids) + self.position_embeddings(pos)[None]
        x = x + self.token_type_embeddings(torch.zeros_like(ids))
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class Output(nn.Module):
    def __init__(self, d_in, d, eps):
        super().__init__()
        self.dense = nn.Linear(d_in, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)


class Attention(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.self = SelfAttention(d)
        self.output = Output(d, d, eps)


class Intermediate(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.dense = nn.Linear(d, hidden)


class Layer(nn.Module):
    def __init__(self, d, heads, hidden, eps):
        super().__init__()
        self.heads = heads
        self.attention = Attention(d, eps)
        self.intermediate = Intermediate(d, hidden)
        self.output = Output(hidden, d, eps)

    def forward(self, x, key_ok, drop=None, unit=0):
        """drop(unit, site, t): t with dropout, or None (unit: the attention's)"""
        def d(u, site, t):
            return t if drop is None else drop(u, site, t)

        B, T, C = x.shape
        hd = C // self.heads
        s = self.attention.self

        def split(t):
            return t.view(B, T, self.heads, hd).transpose(1, 2)

        q, k, v = split(s.query(x)), split(s.key(x)), split(s.value(x))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~key_ok[:, None, None, :], float("-inf"))
        y = (d(unit, 0, att.softmax(-1)) @ v).transpose(1, 2).reshape(B, T, C)
        o = self.attention.output
        x = o.LayerNorm(x + d(unit, 1, o.dense(y)))
        h = F.gelu(self.intermediate.dense(x))
        return self.output.LayerNorm(x + d(unit + 1, 0, self.output.dense(h)))


class Encoder(nn.Module):
    def __init__(self, layers, d, heads, hidden, eps):
        super().__init__()
        self.layer = nn.ModuleList(Layer(d, heads, hidden, eps) for _ in range(layers))


class Head(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.fc = nn.Linear(d, classes)


class BertClassifier(nn.Module):
    def __init__(self, vocab, positions, types, d, layers, heads, hidden, classes, eps=1e-12,
                 pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.dropper = None  # dropper(unit, site, x): see the module's docstring
        self.embeddings = Embeddings(vocab, positions, types, d, eps)
        self.encoder = Encoder(layers, d, heads, hidden, eps)
        self.head = Head(d, classes)

    def hidden(self, ids):
        """final hidden states [B, T, d] and the mask of real tokens [B, T]"""
        ok = torch.ones_like(ids, dtype=torch.bool)
        pad = (ids == self.pad_id)
        pad[:, 0] = False  # [CLS] is never padding
        first_pad = torch.where(pad.any(1), pad.float().argmax(1), torch.full_like(ids[:, 0], ids.shape[1]))
        ok = torch.arange(ids.shape[1])[None, :] < first_pad[:, None]
        x = self.embeddings(ids)
        if self.dropper is not None:
            x = self.dropper(0, 0, x)
        for i, layer in enumerate(self.encoder.layer):
            x = layer(x, ok, self.dropper, 1 + 2 * i)
        return x, ok

    def pooled(self, ids):
        x, ok = self.hidden(ids)
        m = ok.to(x.dtype)[..., None]
        return (x * m).sum(1) / m.sum(1)

    def forward(self, ids):
        pooled = self.pooled(ids)
        if self.dropper is not None:
            pooled = self.dropper(2 * len(self.encoder.layer) + 1, 0, pooled)
        return self.head.fc(pooled)


def decays(name, p):
    """pipetrain's weight-decay rule: matrices decay, except the position and
    token-type tables"""
    return p.ndim == 2 and "position_embeddings" not in name and "token_type" not in name
