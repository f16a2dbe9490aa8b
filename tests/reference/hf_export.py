#!/usr/bin/env python3
"""A fine-tuned bert's export, loaded by Hugging Face transformers itself,
makes pipetrain's predictions.

pipetrain fine-tunes the real all-MiniLM-L6-v2 (datasets/minilm) for 3 steps
with dropout on (so the weights have moved), then `pipetrain export` writes
a Hugging Face directory. In a venv of the build directory (made once, with
Debian's PyTorch visible), transformers loads that directory with
AutoTokenizer and BertModel.from_pretrained, exactly as a user would, and
runs the test texts through it. The texts are real verses and hostile ones:
upper case, accents, CJK, emoji, control characters, a special token written
in the text, text far longer than model.context (truncated), one word of
300 letters ([UNK]). Compared with `pipetrain eval --hidden --logits` of the
same checkpoint:
  - the final hidden states at every real position of every text (the
    tokenizer's attention mask says which; pipetrain's positions from the
    first [PAD] on are padding and not compared), so the two tokenizers
    must also agree on each text's ids and length;
  - the logits: the mean of the real positions' hidden states through the
    exported head.fc (pipetrain's classifier), as the README tells a user;
  - config.json's id2label: the data's labels in class order;
each as max|pipetrain - transformers| / max|transformers| against 1e-4
(float32 on both sides; two implementations of the same float32 model
differ by a few 1e-7 per op, about 1e-6 through 6 post-LN layers). So the
export's weights, its config, its tokenizer files (vocab.txt,
tokenizer_config.json: uncased, accents stripped, CJK split, special tokens
in texts split as text) and the README's recipe for the logits are all
checked by transformers' own code.

Twice: with the uncased tokenizer all-MiniLM-L6-v2's directory implies (no
tokenizer_config.json there: transformers' defaults), and with its vocab.txt
copied beside a tokenizer_config.json saying do_lower_case false,
strip_accents null and tokenize_chinese_chars false, which the run's
data.lowercase, data.strip_accents and data.split_cjk (auto) take, the
checkpoint records, and the export writes back; the texts' capitals,
accents and CJK then give other ids, which transformers must reproduce.

transformers is pinned to a release that still runs on Debian's PyTorch 1.13.

usage: hf_export.py PIPETRAIN_BINARY MINILM_DIR VENV
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

TRANSFORMERS = "4.44.2"
CONTEXT, TOL = 24, 1e-4
LABELS = ["gospels", "law", "prophets"]

TRAIN = [
    ("law", "In the beginning God created the heaven and the earth."),
    ("law", "And God said, Let there be light: and there was light."),
    ("law", "Honour thy father and thy mother: that thy days may be long upon the land."),
    ("law", "Thou shalt not kill."),
    ("prophets", "Comfort ye, comfort ye my people, saith your God."),
    ("prophets", "The people that walked in darkness have seen a great light."),
    ("prophets", "Seek ye the LORD while he may be found, call ye upon him while he is near."),
    ("prophets", "For I know the thoughts that I think toward you, saith the LORD."),
    ("gospels", "Jesus wept."),
    ("gospels", "Blessed are the meek: for they shall inherit the earth."),
    ("gospels", "In the beginning was the Word, and the Word was with God."),
    ("gospels", "Ask, and it shall be given you; seek, and ye shall find."),
]

TEST = [
    ("law", "AND THE EARTH WAS WITHOUT FORM, AND VOID."),
    ("gospels", "Café naïve résumé — Übermensch Ærøskøbing"),
    ("prophets", "主は私の羊飼い。 私には乏しいことがない。"),
    ("gospels", "Rejoice 🙂🎉 and be exceeding glad!!!"),
    ("law", "tab\there\x01and\x7fcontrol\x1fcharacters"),
    ("prophets", "a text with [SEP] and [PAD] and [CLS] written in it"),
    ("gospels", " ".join(["verily"] * 60)),
    ("law", "x" * 300),
    ("prophets", "Holy, holy, holy, is the LORD of hosts: the whole earth is full of his glory."),
    ("gospels", "I am the way, the truth, and the life."),
]

CHECK = r'''
import json, sys
import numpy as np
import torch
from transformers import AutoTokenizer, BertModel
d, texts_path, out_path, context = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
texts = json.load(open(texts_path))
tok = AutoTokenizer.from_pretrained(d)
model = BertModel.from_pretrained(d).eval()
enc = tok(texts, truncation=True, max_length=context, padding="max_length", return_tensors="pt")
with torch.no_grad():
    hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
np.savez(out_path, hidden=hidden.numpy(), mask=enc["attention_mask"].numpy(),
         ids=enc["input_ids"].numpy(), id2label=json.dumps(model.config.id2label),
         tokenizer=type(tok).__name__)
'''


def fail(msg):
    print("hf_export: FAIL: " + msg, flush=True)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        fail("%s exited %d:\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    probe = "import transformers, sys; sys.exit(transformers.__version__ != %r)" % TRANSFORMERS
    if os.path.exists(py) and subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
        return py
    print("making the venv %s with transformers %s (once)" % (venv, TRANSFORMERS), flush=True)
    # Debian's torch comes from the system's site-packages
    run([sys.executable, "-m", "venv", "--clear", "--system-site-packages", venv])
    run([py, "-m", "pip", "install", "--quiet", "transformers==" + TRANSFORMERS])
    return py


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    binary, minilm, venv = sys.argv[1:]
    if not os.path.exists(os.path.join(minilm, "model.safetensors")):
        fail("%s has no model.safetensors: run scripts/setup.sh" % minilm)
    py = ensure_venv(venv)
    with tempfile.TemporaryDirectory() as tmp:
        def write_tsv(name, rows):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                for label, text in rows:
                    if name.endswith(".jsonl"):  # a JSON text may hold a tab, a TSV one not
                        f.write(json.dumps({"label": label, "text": text}, ensure_ascii=False)
                                + "\n")
                    else:
                        f.write("%s\t%s\n" % (label, text))
            return path
        results = []
        for tag, tokcfg in (("uncased", None),
                            ("cased", {"do_lower_case": False, "strip_accents": None,
                                       "tokenize_chinese_chars": False})):
            results.append(check_variant(binary, minilm, py, tmp, write_tsv, tag, tokcfg))
        for tag, worst, e_logits, lengths, norm in results:
            print("hf_export (%s: %s): transformers %s loads the export (BertTokenizerFast, "
                  "BertModel); hidden states at real positions within %.2e, logits (mean of real "
                  "positions through head.fc) within %.2e, of %d texts of %d to %d tokens; "
                  "id2label %s" % (tag, norm, TRANSFORMERS, worst, e_logits, len(TEST),
                                   lengths.min(), lengths.max(), LABELS))
        if results[0][3].tolist() == results[1][3].tolist():
            fail("the cased run's texts have the uncased run's lengths: the normalisation "
                 "changed nothing")


def check_variant(binary, minilm, py, tmp, write_tsv, tag, tokcfg):
    """Trains, exports and compares with transformers; tokcfg: the
    tokenizer_config.json put beside a copy of the vocabulary (None: the
    model's own directory's vocab.txt, with no tokenizer_config.json)."""
    vocab = os.path.join(minilm, "vocab.txt")
    if tokcfg is not None:
        vdir = os.path.join(tmp, "vocab-" + tag)
        os.makedirs(vdir)
        with open(vocab, "rb") as src, open(os.path.join(vdir, "vocab.txt"), "wb") as dst:
            dst.write(src.read())
        with open(os.path.join(vdir, "tokenizer_config.json"), "w") as f:
            json.dump(tokcfg, f)
        vocab = os.path.join(vdir, "vocab.txt")
    tmp = os.path.join(tmp, tag)
    os.makedirs(tmp)
    cfg = os.path.join(tmp, "bert.yaml")
    with open(cfg, "w") as f:
        f.write("""run: {dir: %s, seed: 3, threads: 1}
model: {kind: bert, dim: 384, layers: 6, heads: 12, mlp_hidden: 1536, vocab: 30522,
    positions: 512, context: %d, classes: %d, init_from: %s}
data: {kind: text_classification, train_file: %s, test_file: %s, vocab: %s}
train: {batch: 4, epochs: 1, lr: 0.0005, warmup_steps: 0, eval_every: 0}
""" % (os.path.join(tmp, "run"), CONTEXT, len(LABELS), minilm, write_tsv("train.tsv", TRAIN),
            write_tsv("test.jsonl", TEST), vocab))
    run([binary, "train", cfg])
    ckpt = os.path.join(tmp, "run", "checkpoints", "step_0000000003")
    out = os.path.join(tmp, "export")
    r = run([binary, "export", ckpt, out])
    for name in ("model.safetensors", "config.json", "vocab.txt", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(out, name)):
            fail("the export has no %s:\n%s" % (name, r.stdout + r.stderr))
    logits_path, hidden_path = os.path.join(tmp, "logits.st"), os.path.join(tmp, "hidden.st")
    run([binary, "eval", cfg, "--checkpoint", ckpt, "--logits", logits_path,
         "--hidden", hidden_path])
    ours_logits, ours_hidden = st.load(logits_path)["logits"], st.load(hidden_path)["hidden"]

    texts = os.path.join(tmp, "texts.json")
    with open(texts, "w", encoding="utf-8") as f:
        json.dump([t for _, t in TEST], f)
    theirs = os.path.join(tmp, "theirs.npz")
    run([py, "-c", CHECK, out, texts, theirs, str(CONTEXT)])
    t = np.load(theirs)
    if str(t["tokenizer"]) != "BertTokenizerFast":
        fail("AutoTokenizer made a %s" % t["tokenizer"])
    id2label = {int(k): v for k, v in json.loads(str(t["id2label"])).items()}
    if id2label != dict(enumerate(LABELS)):
        fail("config.json's id2label is %s, the data's labels %s" % (id2label, LABELS))
    mask, hidden = t["mask"].astype(bool), t["hidden"]
    if ours_hidden.shape != hidden.shape:
        fail("hidden states %s against transformers' %s" % (ours_hidden.shape, hidden.shape))
    worst = 0.0
    for i in range(len(TEST)):
        n = int(mask[i].sum())
        # pipetrain pads after [SEP] as the tokenizer does: its first n
        # positions are the real tokens
        e = rel(ours_hidden[i, :n], hidden[i, :n])
        worst = max(worst, e)
        if e > TOL:
            fail("text %d (%r, %d tokens): hidden states differ by %.2e" % (i, TEST[i][1][:40], n, e))
    weights = st.load(os.path.join(out, "model.safetensors"))
    pooled = np.stack([hidden[i, :int(mask[i].sum())].mean(0) for i in range(len(TEST))])
    logits = pooled @ weights["head.fc.weight"].T + weights["head.fc.bias"]
    e_logits = rel(ours_logits, logits)
    if e_logits > TOL:
        fail("logits differ by %.2e:\n%s\n%s" % (e_logits, ours_logits, logits))
    lengths = mask.sum(1)
    # the normalisation the checkpoint recorded and the export wrote
    manifest = open(os.path.join(ckpt, "manifest"), "rb").read()
    written = json.load(open(os.path.join(out, "tokenizer_config.json")))
    want = {"do_lower_case": tokcfg is None, "strip_accents": tokcfg is None,
            "tokenize_chinese_chars": tokcfg is None}
    got = {k: written.get(k) for k in want}
    if got != want:
        fail("%s: the export's tokenizer_config.json says %s, the run tokenized with %s"
             % (tag, got, want))
    rec = b"lowercase: %s" % (b"true" if tokcfg is None else b"false")
    if rec not in manifest:
        fail("%s: the checkpoint's config does not record %r" % (tag, rec))
    return tag, worst, e_logits, lengths, json.dumps(got)


if __name__ == "__main__":
    main()
