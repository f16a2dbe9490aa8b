"""Shared helpers for the command-line tests of pipetrain (test_*.py here).

Each test script takes the pipetrain binary as its only argument, runs its
tests (functions named test_*) in a small thread pool -- every invocation of
the binary is a subprocess, and most of a short invocation's wall time is
MPI start-up, so running a few at once keeps the suite fast -- and exits 1 if
any failed. Every test gets its own temporary directory under one root that
is removed at the end; nothing is written into the repository or depends on
the current directory.

Every invocation goes through Harness.run, which fails the test if stderr
carries a sanitizer report (the ASan build runs these same scripts; the
leaks of Open MPI, hwloc and OpenBLAS are suppressed, see
lsan_third_party.supp). A test passes by returning; it may return a note
such as "skipped: ..." that is printed after its name.

Only the Python standard library is used.
"""
import concurrent.futures
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "AddressSanitizer:DEADLYSIGNAL")
ERROR_PREFIX = "pipetrain: error: "
LSAN_SUPPRESSIONS = os.path.join(REPO, "tests", "lsan_third_party.supp")


def sanitizer_env():
    """The environment for the binary: LeakSanitizer is told about the
    third-party libraries' leaks (see lsan_third_party.supp) unless the
    caller already chose suppressions. Harmless for a build without ASan."""
    env = dict(os.environ)
    lsan = env.get("LSAN_OPTIONS", "")
    if "suppressions=" not in lsan:
        extra = "suppressions=%s:fast_unwind_on_malloc=0:print_suppressions=0" % LSAN_SUPPRESSIONS
        env["LSAN_OPTIONS"] = lsan + ":" + extra if lsan else extra
    return env


class Failure(Exception):
    pass


def check(cond, msg, *args):
    if not cond:
        raise Failure(msg % args if args else msg)


class Result:
    def __init__(self, args, rc, out, err):
        self.args, self.rc, self.out, self.err = args, rc, out, err

    def describe(self):
        return "command: %s\nexit status: %s\n--- stdout ---\n%s--- stderr ---\n%s" % (
            " ".join(self.args), self.rc, tail(self.out), tail(self.err))

    def error_lines(self):
        return [l for l in self.err.splitlines() if l.startswith(ERROR_PREFIX)]

    def expect(self, rc, what=""):
        check(self.rc == rc, "expected exit status %s%s, got %s\n%s", rc,
              " (" + what + ")" if what else "", self.rc, self.describe())
        return self

    def one_error(self, *needles, strict=True):
        """Exactly one 'pipetrain: error: ' line, containing every needle;
        with strict, stderr holds nothing else. Returns the line."""
        lines = self.error_lines()
        check(len(lines) == 1, "expected exactly one '%s' line on stderr, got %d\n%s",
              ERROR_PREFIX, len(lines), self.describe())
        if strict:
            other = [l for l in self.err.splitlines() if l.strip() and l != lines[0]]
            check(not other, "expected stderr to hold only the error line; it also has %r\n%s",
                  other[:3], self.describe())
        for n in needles:
            check(n in lines[0], "error line does not mention %r:\n  %s\n%s", n, lines[0],
                  self.describe())
        return lines[0]


def tail(text, n=4000):
    text = text or ""
    return text if len(text) <= n else "...\n" + text[-n:]


class Harness:
    def __init__(self, binary, root, name):
        self.binary = os.path.abspath(binary)
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.runs = 0

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def run(self, args, cwd=None, timeout=240, env=None):
        """Runs the binary with args; fails on a sanitizer report or a timeout.
        env: variables to set, or to remove where the value is None."""
        cmd = [self.binary] + [str(a) for a in args]
        full_env = sanitizer_env()
        for k, v in (env or {}).items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
        self.runs += 1
        try:
            p = subprocess.run(cmd, cwd=cwd or self.dir, capture_output=True, text=True,
                               errors="replace", timeout=timeout, env=full_env,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise Failure("timed out after %ss: %s\n%s" % (timeout, " ".join(cmd),
                                                          tail(str(e.stderr or ""))))
        r = Result(cmd, p.returncode, p.stdout, p.stderr)
        no_sanitizer(r)
        check(r.rc >= 0, "killed by signal %d\n%s", -r.rc, r.describe())
        return r

    def run_read_only(self, ro, args, timeout=120):
        """Runs the binary with args in a mount namespace of its own where
        directory ro is mounted read-only (root writes through a directory's
        permissions, so a mount is the way to make one it cannot write).
        The Result, or None where no mount namespace can be made (not root,
        no unshare)."""
        script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; '
                  'shift; exec "$@"')
        cmd = ["unshare", "-m", "sh", "-c", script, "sh", ro, self.binary] + [str(a) for a in args]
        self.runs += 1
        try:
            p = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True, errors="replace",
                               timeout=timeout, env=sanitizer_env(), stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            return None
        if p.returncode == 99 or (p.returncode != 2 and "unshare" in p.stderr):
            return None
        r = Result(cmd, p.returncode, p.stdout, p.stderr)
        no_sanitizer(r)
        return r

    def popen(self, args, cwd=None):
        cmd = [self.binary] + [str(a) for a in args]
        self.runs += 1
        return subprocess.Popen(cmd, cwd=cwd or self.dir, env=sanitizer_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                stdin=subprocess.DEVNULL)


def no_sanitizer(r):
    for m in SANITIZER_MARKERS:
        check(m not in r.err, "sanitizer report (%r) on stderr\n%s", m, r.describe())


# ------------------------------------------------------------------ configs

def tiny(kind, run_dir, **keys):
    """A tiny model on synthetic data as {section.key: text}; keys override
    (dots in names: pass a dict through **{'a.b': v})."""
    c = {
        "run.dir": run_dir, "run.seed": "3", "run.threads": "1",
        "model.dim": "16", "model.layers": "2", "model.heads": "2",
        "data.synthetic_examples": "40",
        "train.batch": "8", "train.epochs": "3", "train.eval_examples": "8",
        "train.log_every": "1", "train.warmup_steps": "2", "train.min_lr": "0.0001",
        "train.lr": "0.003",
    }
    if kind == "vit":
        c.update({"model.kind": "vit", "model.patch": "4", "model.classes": "4",
                  "data.kind": "synthetic_images", "data.image_size": "8"})
    else:
        c.update({"model.kind": "gpt", "model.context": "16", "data.kind": "synthetic_text",
                  "sample.length": "8"})
    c.update(keys)
    return c


WORDS = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "was",
         "without", "form", "void", "darkness", "upon", "face", "of", "deep", "spirit"]


def bert_files(h, examples, seed):
    """Keys for a bert run on files of its own: a vocabulary of whole words
    and labelled texts (3 labels) of 1 to 30 words, so that with 17 tokens
    most examples are padded (by different amounts) and some are cut."""
    import random
    rnd = random.Random(seed)
    vocab = write(h.path("vocab.txt"), "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS) + "\n")
    lines = ["%s\t%s" % (rnd.choice("abc"), " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 30))))
             for _ in range(examples + 16)]
    train = write(h.path("train.tsv"), "\n".join(lines[:examples]) + "\n")
    test = write(h.path("test.tsv"), "\n".join(lines[examples:]) + "\n")
    return {"data.vocab": vocab, "data.train_file": train, "data.test_file": test,
            "model.vocab": str(4 + len(WORDS))}


def render(keys):
    """{section.key: text} -> YAML text, sections in first-seen order; a
    value of None leaves the key out."""
    sections = {}
    for k, v in keys.items():
        if v is None:
            continue
        sec, name = k.split(".", 1)
        sections.setdefault(sec, []).append((name, v))
    out = []
    for sec, items in sections.items():
        out.append("%s:" % sec)
        for name, v in items:
            out.append("  %s: %s" % (name, v))
    return "\n".join(out) + "\n"


def line_of(text, key):
    """1-based line of `  name:` under `section:` in YAML written by render."""
    sec, name = key.split(".", 1)
    cur = None
    for i, line in enumerate(text.splitlines(), 1):
        if line and not line.startswith(" "):
            cur = line.split(":")[0]
        elif cur == sec and line.strip().startswith(name + ":"):
            return i
    raise AssertionError("key %s not in\n%s" % (key, text))


def exchange(a, b):
    """Swap the names a and b in one step (renameat2 RENAME_EXCHANGE), so a
    process watching either name never finds it missing."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


def write_config(h, name, keys):
    return write(h.path(name), render(keys))


# ----------------------------------------------------------- files on disk

def snapshot(root):
    """{relative path: sha256} of every file under root ({} if it is missing).
    A run directory's `lock` is left out: it is the job lock, which every
    train command takes (and writes its pid into) before it reads anything."""
    out = {}
    if not os.path.exists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        if rel != "." and not filenames and not dirnames:
            out[rel + "/"] = "dir"
        for fn in sorted(filenames):
            if fn == "lock":
                continue
            p = os.path.join(dirpath, fn)
            if os.path.islink(p):  # the link itself (it may point nowhere)
                out[os.path.relpath(p, root)] = "link to " + os.readlink(p)
                continue
            if not stat.S_ISREG(os.lstat(p).st_mode):  # a FIFO: opening it would wait
                out[os.path.relpath(p, root)] = "special file"
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def same_snapshot(before, after, what):
    if before == after:
        return
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    raise Failure("%s changed: removed %s, added %s, modified %s" % (what, gone, new, changed))


def checkpoints(run_dir):
    """Sorted names of step_* entries under RUN_DIR/checkpoints."""
    d = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(d):
        return []
    return sorted(n for n in os.listdir(d) if n.startswith("step_"))


def ckpt(run_dir, step):
    return os.path.join(run_dir, "checkpoints", "step_%010d" % step)


def unit_files(ckpt_dir):
    """The unit files of a checkpoint (every file but the manifest)."""
    names = sorted(n for n in os.listdir(ckpt_dir) if n != "manifest")
    check(names, "checkpoint %s has no unit file", ckpt_dir)
    return [os.path.join(ckpt_dir, n) for n in names]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def starts(run_dir):
    """The start lines of RUN_DIR/metrics.jsonl, parsed."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("event") == "start"]


def metrics(run_dir):
    """(step lines, eval lines) of RUN_DIR/metrics.jsonl, parsed."""
    steps, evals = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "eval":
                evals.append(rec)
            elif rec.get("event") == "step":
                steps.append(rec)
    return steps, evals


# -------------------------------------------------------------- safetensors

def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)}, metadata. Checks the layout: header
    length, JSON, offsets inside the data area, contiguous and in bounds."""
    data = read_bytes(path)
    check(len(data) >= 8, "%s: shorter than 8 bytes", path)
    (n,) = struct.unpack("<Q", data[:8])
    check(8 + n <= len(data), "%s: header length %d runs past the file", path, n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors, spans = {}, []
    for name, e in header.items():
        begin, end = e["data_offsets"]
        check(0 <= begin <= end <= len(body), "%s: %s offsets %r outside the data", path, name,
              e["data_offsets"])
        numel = 1
        for s in e["shape"]:
            numel *= s
        size = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2}[e["dtype"]]
        check(end - begin == numel * size, "%s: %s holds %d bytes for shape %r", path, name,
              end - begin, e["shape"])
        tensors[name] = (e["dtype"], list(e["shape"]), body[begin:end])
        spans.append((begin, end))
    spans.sort()
    pos = 0
    for b, e in spans:
        check(b == pos, "%s: tensor data not contiguous at byte %d", path, b)
        pos = e
    check(pos == len(body), "%s: %d bytes after the last tensor", path, len(body) - pos)
    return tensors, meta


def floats(raw):
    return struct.unpack("<%df" % (len(raw) // 4), raw)


# ------------------------------------------------------------------ recfile

REC_END = b"PTRECEND"


def read_recfile(path):
    """(magic, version, [(tag, payload)]) of a recfile (format in
    formats/formats.h); checks the CRC."""
    data = read_bytes(path)
    check(len(data) >= 40, "%s: too short for a recfile", path)
    magic, version, reserved = data[:8], *struct.unpack("<II", data[8:16])
    check(data[-8:] == REC_END, "%s: no end marker", path)
    (crc,) = struct.unpack("<I", data[-12:-8])
    check(zlib.crc32(data[:-12]) & 0xFFFFFFFF == crc, "%s: CRC mismatch", path)
    pos, recs = 16, []
    end = len(data) - 24
    while pos < end:
        (tl,) = struct.unpack("<I", data[pos:pos + 4])
        tag = data[pos + 4:pos + 4 + tl].decode()
        (pl,) = struct.unpack("<Q", data[pos + 4 + tl:pos + 12 + tl])
        recs.append((tag, data[pos + 12 + tl:pos + 12 + tl + pl]))
        pos += 12 + tl + pl
    (marker,) = struct.unpack("<I", data[end:end + 4])
    (count,) = struct.unpack("<Q", data[end + 4:end + 12])
    check(marker == 0xFFFFFFFF and count == len(recs), "%s: bad trailer", path)
    return magic, version, recs


def unit_records(path):
    """A unit file's records but its own "checkpoint" record, which names the
    checkpoint's random id: what two runs that trained alike share."""
    return [(t, p) for t, p in read_recfile(path)[2] if t != "checkpoint"]


def write_recfile(path, magic, version, recs):
    """Writes a recfile with a correct CRC (for crafting checkpoints that
    are well-formed files with bad content)."""
    out = bytearray(magic + struct.pack("<II", version, 0))
    for tag, payload in recs:
        t = tag.encode()
        out += struct.pack("<I", len(t)) + t + struct.pack("<Q", len(payload)) + payload
    out += struct.pack("<IQ", 0xFFFFFFFF, len(recs))
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF) + REC_END
    with open(path, "wb") as f:
        f.write(out)


# ------------------------------------------------------------------ runner

def main(tests, argv, workers=4):
    if len(argv) != 2 or not os.path.isfile(argv[1]):
        sys.stderr.write("usage: %s PIPETRAIN_BINARY\n" % argv[0])
        return 2
    binary = argv[1]
    only = os.environ.get("PT_TEST_ONLY")  # a substring: run the matching tests only
    if only:
        tests = [t for t in tests if only in t.__name__]
    root = tempfile.mkdtemp(prefix="pt-cli-")
    start = time.time()
    failed = []

    def one(t):
        h = Harness(binary, root, t.__name__)
        t0 = time.time()
        try:
            note = t(h)
            return t.__name__, note, time.time() - t0
        except Failure as e:
            return t.__name__, Failure(str(e)), time.time() - t0
        except Exception:  # a bug in the test itself: report it the same way
            return t.__name__, Failure(traceback.format_exc()), time.time() - t0

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for name, note, secs in pool.map(one, tests):
                if isinstance(note, Failure):
                    failed.append(name)
                    print("FAIL  %-48s %5.1fs\n%s\n" % (name, secs, str(note).rstrip()), flush=True)
                else:
                    print("ok    %-48s %5.1fs%s" % (name, secs, "  " + note if note else ""),
                          flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("%d tests, %d failed (%s) in %.1fs" % (len(tests), len(failed),
                                                 ", ".join(failed) or "none", time.time() - start))
    return 1 if failed else 0
