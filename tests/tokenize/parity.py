"""tokenize_parity: pipetrain's WordPiece tokenizer (tokenize/) against
Hugging Face's `tokenizers` (BertWordPieceTokenizer, lowercase=True) on the
real all-MiniLM-L6-v2 vocabulary.

Usage: parity.py TOKENIZE_DUMP DATASETS_DIR VENV_DIR

Inputs: every line of DATASETS_DIR/kjv.txt, and a generated hostile file
(empty lines, a 10,000-character word, control characters, invalid UTF-8,
accented Latin, Greek, Cyrillic, CJK, emoji, combining marks, fullwidth
forms, zero-width joiners, mixed punctuation), each compared without
truncation and with truncation to 128 ids: any difference fails. Both sides
see the same lines: the file cut at b"\\n" only; Hugging Face gets each line
decoded with errors='replace' (it takes str), the C side the raw bytes (it
replaces invalid UTF-8 the same way). A special token written in a text
("[SEP]", "[PAD]", ...) is text to pipetrain, split like any other word:
data cannot inject a separator, or a [PAD] that would end the example.
That is Hugging Face's tokenizer with encode_special_tokens (transformers'
split_special_tokens=True), which is what the Hugging Face side runs.

Then a sweep: one line per code point of planes 0-2 and of some of 14-16,
"C aCb" (the character alone and inside a word). Hugging Face takes the
categories it tests (Cc/Cf/Co, Mn, P*) from the unicode_categories crate,
whose tables are Unicode 8.0's, while utf8proc has Unicode 15.0: the
characters categorised differently since then give other ids, and no
table-free C code can follow the old tables. Those code points are listed
in hf_unicode8_differences.txt (next to this script, with the reasons); the
sweep fails if the code points that differ are not exactly that list.
The same sweep again with a vocabulary of every code point (each as a word
and as a "##" continuation), where a character no longer falls to [UNK]: a
different lowercase mapping or decomposition then shows too. Its
differences must be exactly that list and hf_case_differences.txt's.
A third sweep, "a" U+1D16D C "a" C U+1D165 per code point with that
vocabulary, puts each character beside combining marks of high classes,
where the order that decomposition sorts marks into shows: the code points
that differ there, beyond the two lists, must be exactly
hf_order_differences.txt's (marks whose class Hugging Face's tables do not
know). The tokenizers version is pinned (TOKENIZERS) so the lists stay true.

Then the other normalisations (pt_normalize; Hugging Face's lowercase,
strip_accents and handle_chinese_chars): cased as bert-base-cased
(lowercase and accent stripping off), lowercased with accents kept, accents
stripped with case kept, and CJK ideographs left inside words. Each on the
KJV lines, the hostile lines (with the real vocabulary and with every code
point's) and the sweep with every code point's vocabulary, whose differences
must be among the two lists' (a list entry may not differ in a mode that
skips the step it is about).
"""
import os
import random
import subprocess
import sys
import tempfile
import time

TOKENIZERS = "0.23.3"
HERE = os.path.dirname(os.path.abspath(__file__))

HF_SIDE = r'''
import sys
import tokenizers
from tokenizers import BertWordPieceTokenizer
vocab, lines_path, out_path, max_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mode = sys.argv[5]  # lowercase, strip_accents, handle_chinese_chars: three digits 0 or 1
data = open(lines_path, "rb").read()
lines = data.split(b"\n")
if data.endswith(b"\n"):
    lines.pop()
texts = [l.decode("utf-8", errors="replace") for l in lines]
tok = BertWordPieceTokenizer(vocab, lowercase=mode[0] == "1", strip_accents=mode[1] == "1",
                             handle_chinese_chars=mode[2] == "1")
# a text's "[SEP]" is text: transformers' split_special_tokens=True
tok._tokenizer.encode_special_tokens = True
if max_len:
    tok.enable_truncation(max_length=max_len)
with open(out_path, "w") as out:
    for e in tok.encode_batch(texts):
        out.write(" ".join(map(str, e.ids)) + "\n")
print(tokenizers.__version__)
'''


def fail(msg):
    print("tokenize_parity: FAIL: " + msg, flush=True)
    sys.exit(1)


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import tokenizers, sys; sys.exit(tokenizers.__version__ != %r)" % TOKENIZERS],
        capture_output=True).returncode == 0
    if ok:
        return py
    print("making the venv %s with tokenizers %s (once)" % (venv, TOKENIZERS), flush=True)
    r = subprocess.run([sys.executable, "-m", "venv", "--clear", venv], capture_output=True,
                       text=True)
    if r.returncode:
        fail("cannot make the venv %s:\n%s" % (venv, r.stderr))
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", "tokenizers==" + TOKENIZERS],
                       capture_output=True, text=True)
    if r.returncode:
        fail("pip install tokenizers failed:\n%s%s" % (r.stdout, r.stderr))
    return py


def mark_order_lines():
    """Words of combining marks around an Mn of class 0 (which Hugging Face
    strips after its NFD, but which stops the canonical reordering there):
    marks of class > 0 that stay (Mc), each pair on both sides of each such
    Mn, and the same without it."""
    stay = ["\U0001D165", "\U0001D16D", "\U0001D16E", "\u302E", "\u1B44", "\uA9C0"]
    class0_mn = ["\u034F", "\u0F9E", "\u0C3F"]
    out = []
    for m1 in stay:
        for m2 in stay:
            out.append(("a" + m1 + m2 + " b" + m2 + m1 + "c").encode())
            for z in class0_mn:
                out.append(("a" + m1 + z + m2 + "b" + m2 + z + m1 + z).encode())
    return out


def hostile_lines():
    """Byte strings, one per line, none containing b"\\n"."""
    L = []
    u = lambda s: s.encode("utf-8")
    L += [b"", b"", b"   ", b"\t\r", b"\r"]
    L.append(b"x" * 10000)
    # special tokens written in the text stay text (see the docstring)
    L += [b"hello [SEP] world", b"x [PAD] y", b"[MASK] me", b"[UNK]", b"a[CLS]b", b"[cls] [Sep]",
          b"[ SEP ] [PAD][PAD]"]
    L.append(u("Straße " + "é" * 10000))
    L.append(u("a" * 100) + b" " + u("a" * 101) + b" " + u("é" * 100) + b" " + u("é" * 101))
    L.append(u("supercalifragilisticexpialidocious " * 50))
    L += mark_order_lines()
    # control characters, alone and inside words
    L.append(bytes(range(0, 10)) + bytes(range(11, 32)) + b"\x7f")
    L.append(b"hel\x00lo wor\x01ld te\x0bst fo\x0crm \x1c\x1d\x1e\x1fend a\x7fb")
    L.append(u("hel\u0085lo wor\u200bld zero\u200cwidth jo\u200diner bo\ufeffm "
               "bi\u202edi\u202c soft\u00adhyphen"))
    # invalid UTF-8
    L += [b"hel\xfflo", b"\xc0\xaf overlong", b"\xe0\x80\xaf", b"\xed\xa0\x80surrogate",
          b"\xf4\x90\x80\x80big", b"cut \xe4\xb8", b"\xe4hello", b"\xf0\x9f\x98 emoji cut",
          b"\x80\x81\x82 continuation", b"\xfe\xff\xfe\xff", b"mid\xc3word\xc3",
          b"\xf8\x88\x80\x80\x80 five", b"ok \xef\xbf\xbd replacement char"]
    rnd = random.Random(7)
    for _ in range(200):
        L.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 80))).replace(b"\n", b" "))
    # scripts and forms
    L += [u("Héllo Wörld! Ça va? Crème brûlée, naïve façade, Ångström, Øresund, İstanbul, ĳ"),
          u("ΑΒΓ Δέλτα Ωμέγα ΣΊΣΥΦΟΣ ὅτι ᾅ"),
          u("Привет, мир! Ёлка ЙОД Їжак"),
          u("中文分词测试，北京大学。日本語のテキスト、カタカナ。한국어 텍스트입니다"),
          u("豈更車 \uf900\uf9a8\ufa6d 𠀀𠀁 \U0002a700 \U0002b740 \U0002b820\U0002b8ff \U0002b920 "
            "\U0002f800\U0002fa1d 㐀䶵"),
          u("emoji 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✈︎ 1️⃣ 🤖🦄🧬 🫠"),
          u("combining e\u0301 a\u0300\u0301\u0302 o\u0308\u0304 \u0301\u0301alone "
            "q\u0323\u0307 Z\u0336\u0335 A\u0345\u0301 \u1e9b\u0323 \u0f71\u0f72\u0f74"),
          u("ｆｕｌｌｗｉｄｔｈ ＡＢＣ ｈｅｌｌｏ！ ＃＄％ １２３ ｶﾀｶﾅ"),
          u("mixed... punct!!! (a)[b]{c} <d> \"e\" 'f' `g` ~h^ |i| @j #k $l %m &n *o +p =q "
            "-r _s /t \\u ;v :w ,x ?y ¡¿ «»‹› “”‘’ „‚ — – … · • ※ § ¶ † ‡ ‰ ′ ″ ⁂ 。、！？「」"),
          u("$100 €20 £5 ¥1000 ¢ ₹ 3.14 1,000,000 50% x² ½ ⅓ ①②"),
          u("whitespace\u00a0nbsp\u2000en\u2003em\u2009thin\u3000ideo\u2028line\u2029para"
            "\u1680ogham\u202fnnbsp\u205fmath\u180emongol"),
          u("arabic مرحبا بالعالم hebrew שלום עולם thai สวัสดีครับ devanagari नमस्ते"),
          u("ǅ ǈ ǋ ǲ ẞ ß ſ ﬁ ﬀ K Å Ω ℌ ℍ ⅰ Ⅻ ⓐ Ⓐ"),
          u("private \ue000\uf8ff\U000f0000\U0010fffd unassigned \u0378\u0379 \U000e0001\U000e0041"),
          u("tabs\tand\tspaces  and\r\rcarriage")]
    for l in L:
        assert b"\n" not in l
    return L


def sweep_code_points():
    cps = [c for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    cps += list(range(0xE0000, 0xE0200)) + list(range(0xF0000, 0xF0010))
    cps += list(range(0x10FFF0, 0x110000))
    return [c for c in cps if c != 0x0A]


def every_code_point_vocab(path, cps):
    """A vocabulary of the specials and of every code point of cps that can
    be a token (no white space or control: pipetrain refuses those, as no
    word can hold them), each as a word and as a continuation."""
    spaces = {0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
    spaces.update(range(0x2000, 0x200B))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ok = [c for c in cps if c > 0x20 and c != 0x7F and c not in spaces]
    tokens += [chr(c) for c in ok] + ["##" + chr(c) for c in ok]
    with open(path, "wb") as f:
        f.write("".join(t + "\n" for t in tokens).encode())


def expected_differences(name="hf_unicode8_differences.txt"):
    """The code points of a list of differences next to this script."""
    out = set()
    with open(os.path.join(HERE, name)) as f:
        for line in f:
            if line.startswith("#"):
                continue
            for item in line.split():
                a, _, b = item.partition("-")
                out.update(range(int(a, 16), int(b or a, 16) + 1))
    return out


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return " ".join("%04X" % a if a == b else "%04X-%04X" % (a, b) for a, b in out)


def sweep_verdict(name, cps, c_out, hf_out, allowed, must):
    """Prints a sweep's differences (one line per code point of cps) against
    its lists: a code point that differs outside `allowed`, or one of `must`
    that no longer differs, counts. Returns that count."""
    differ = {cps[i]: i for i in range(len(cps)) if c_out[i] != hf_out[i]}
    unexpected = sorted(set(differ) - allowed)
    gone = sorted(must - set(differ))
    print("%s: %d differ, %d differ unlisted, %d listed no longer differ" %
          (name, len(differ), len(unexpected), len(gone)), flush=True)
    for c in unexpected[:8]:
        print("  U+%04X unlisted: C %s, HF %s" % (c, c_out[differ[c]], hf_out[differ[c]]),
              flush=True)
    if unexpected:
        print("  all unlisted: " + ranges(unexpected), flush=True)
    if gone:
        print("  listed but equal now: " + ranges(gone), flush=True)
    return len(unexpected) + len(gone)


def compare(name, lines, c_out, hf_out, report):
    if len(c_out) != len(lines) or len(hf_out) != len(lines):
        fail("%s: %d lines in, %d from tokenize_dump, %d from Hugging Face" %
             (name, len(lines), len(c_out), len(hf_out)))
    bad = [i for i in range(len(lines)) if c_out[i] != hf_out[i]]
    print("%s: %d lines compared, %d mismatches" % (name, len(lines), len(bad)), flush=True)
    for i in bad[:report]:
        c, h = c_out[i].split(), hf_out[i].split()
        k = 0
        while k < min(len(c), len(h)) and c[k] == h[k]:
            k += 1
        print("  line %d: %r\n    C  (%d ids) from id %d: %s\n    HF (%d ids) from id %d: %s" %
              (i + 1, lines[i][:200], len(c), k, " ".join(c[k:k + 12]), len(h), k,
               " ".join(h[k:k + 12])), flush=True)
    return len(bad)


def main():
    if len(sys.argv) != 4:
        fail("usage: parity.py TOKENIZE_DUMP DATASETS_DIR VENV_DIR")
    dump, datasets, venv = sys.argv[1:]
    vocab = os.path.join(datasets, "minilm", "vocab.txt")
    kjv = os.path.join(datasets, "kjv.txt")
    for path, what in ((vocab, "all-MiniLM-L6-v2's vocabulary"), (kjv, "the KJV text")):
        if not os.path.isfile(path):
            fail("%s (%s) is missing: run scripts/setup.sh" % (path, what))
    t0 = time.time()
    py = ensure_venv(venv)
    total_bad = 0
    with tempfile.TemporaryDirectory(prefix="pt_tokenize_parity_") as tmp:
        hostile = os.path.join(tmp, "hostile.txt")
        with open(hostile, "wb") as f:
            f.write(b"\n".join(hostile_lines()) + b"\n")
        hf_script = os.path.join(tmp, "hf_side.py")
        with open(hf_script, "w") as f:
            f.write(HF_SIDE)
        sweep = os.path.join(tmp, "sweep.txt")
        cps = sweep_code_points()
        with open(sweep, "wb") as f:
            f.write(b"".join(("%s a%sb\n" % (chr(c), chr(c))).encode() for c in cps))

        def run_both(path, max_len, vocab=vocab, mode="111"):
            data = open(path, "rb").read()
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            args = [dump, vocab, path, str(max_len)] + ([mode] if mode != "111" else [])
            r = subprocess.run(args, capture_output=True)
            if r.returncode:
                fail("tokenize_dump failed on %s:\n%s" % (path, r.stderr.decode(errors="replace")))
            c_out = r.stdout.decode().split("\n")[:-1]
            hf_path = os.path.join(tmp, "hf.txt")
            r = subprocess.run([py, hf_script, vocab, path, hf_path, str(max_len), mode],
                               capture_output=True, text=True)
            if r.returncode:
                fail("the Hugging Face side failed:\n%s" % r.stderr)
            hf_out = open(hf_path).read().split("\n")[:-1]
            return lines, c_out, hf_out, r.stdout.strip()

        for name, path in (("kjv", kjv), ("hostile", hostile)):
            for max_len in (0, 128):
                label = "%s%s" % (name, ", truncated to %d" % max_len if max_len else "")
                lines, c_out, hf_out, version = run_both(path, max_len)
                total_bad += compare(label, lines, c_out, hf_out, 5)

        lines, c_out, hf_out, version = run_both(sweep, 0)
        if len(c_out) != len(cps) or len(hf_out) != len(cps):
            fail("sweep: %d code points, %d lines from tokenize_dump, %d from Hugging Face" %
                 (len(cps), len(c_out), len(hf_out)))
        differ = {cps[i]: i for i in range(len(cps)) if c_out[i] != hf_out[i]}
        expected = expected_differences()
        unexpected = sorted(set(differ) - expected)
        gone = sorted(expected - set(differ))
        print("sweep: %d code points compared, %d differ (%d listed in "
              "hf_unicode8_differences.txt: categories changed since Unicode 8.0), "
              "%d differ unlisted, %d listed no longer differ" %
              (len(cps), len(differ), len(expected), len(unexpected), len(gone)), flush=True)
        for c in unexpected[:5]:
            print("  U+%04X unlisted: C %s, HF %s" % (c, c_out[differ[c]], hf_out[differ[c]]),
                  flush=True)
        if gone:
            print("  listed but equal now: " + ranges(gone), flush=True)
        total_bad += len(unexpected) + len(gone)

        every = os.path.join(tmp, "every.txt")
        every_code_point_vocab(every, cps)
        def run_sweep(path, what):
            """run_both on a sweep file with every code point's vocabulary,
            one line per code point on both sides"""
            lines, c_out, hf_out, version = run_both(path, 0, vocab=every)
            if len(c_out) != len(cps) or len(hf_out) != len(cps):
                fail("%s: %d code points, %d lines from tokenize_dump, %d from Hugging Face" %
                     (what, len(cps), len(c_out), len(hf_out)))
            return c_out, hf_out, version

        c_out, hf_out, version = run_sweep(sweep, "sweep with every code point")
        case = expected_differences("hf_case_differences.txt")
        total_bad += sweep_verdict(
            "sweep with every code point in the vocabulary (%d listed in "
            "hf_unicode8_differences.txt, %d in hf_case_differences.txt)" % (len(expected), len(case)),
            cps, c_out, hf_out, expected | case, expected | case)
        # canonical order: stripping accents decomposes the text, which also
        # sorts each run of combining marks by class; every code point after a
        # mark of a high class (U+1D16D, 226) and before one of a lower
        # (U+1D165, 216), where a mark whose class one side does not know
        # stays where it is written and moves on the other
        pairs = os.path.join(tmp, "pairs.txt")
        with open(pairs, "wb") as f:
            f.write(b"".join(("a\U0001D16D%s a%s\U0001D165\n" % (chr(c), chr(c))).encode()
                             for c in cps))
        c_out, hf_out, version = run_sweep(pairs, "sweep beside marks")
        order = expected_differences("hf_order_differences.txt")
        total_bad += sweep_verdict(
            "sweep beside combining marks, every code point in the vocabulary (%d listed in "
            "hf_order_differences.txt)" % len(order), cps, c_out, hf_out,
            expected | case | order, order)
        # the hostile lines (the combining marks' order among them) where every
        # character has an id of its own
        lines, c_out, hf_out, version = run_both(hostile, 0, vocab=every)
        total_bad += compare("hostile, every code point in the vocabulary", lines, c_out,
                             hf_out, 5)

        modes = (("001", "cased (bert-base-cased: no lowercase, accents kept)"),
                 ("101", "lowercase, accents kept"),
                 ("011", "accents stripped, case kept"),
                 ("110", "CJK ideographs inside words"))
        for mode, what in modes:
            for name, path, voc in (("kjv", kjv, vocab), ("hostile", hostile, vocab),
                                    ("hostile, every code point in the vocabulary", hostile,
                                     every)):
                lines, c_out, hf_out, version = run_both(path, 0, vocab=voc, mode=mode)
                total_bad += compare("%s: %s" % (what, name), lines, c_out, hf_out, 5)
            lines, c_out, hf_out, version = run_both(sweep, 0, vocab=every, mode=mode)
            if len(c_out) != len(cps) or len(hf_out) != len(cps):
                fail("%s: sweep: %d code points, %d lines from tokenize_dump, %d from Hugging "
                     "Face" % (what, len(cps), len(c_out), len(hf_out)))
            differ = {cps[i]: i for i in range(len(cps)) if c_out[i] != hf_out[i]}
            unexpected = sorted(set(differ) - expected - case)
            print("%s: sweep with every code point in the vocabulary: %d differ, all listed "
                  "but %d" % (what, len(differ), len(unexpected)), flush=True)
            for c in unexpected[:8]:
                print("  U+%04X unlisted: C %s, HF %s" % (c, c_out[differ[c]], hf_out[differ[c]]),
                      flush=True)
            if unexpected:
                print("  all unlisted: " + ranges(unexpected), flush=True)
            total_bad += len(unexpected)
    print("tokenizers %s, %.1f s" % (version, time.time() - t0))
    if total_bad:
        fail("%d lines differ from Hugging Face" % total_bad)
    print("tokenize_parity: OK")


if __name__ == "__main__":
    main()
