/*
 * schema.c: the table of every configuration key: where it lives in
 * pt_config, its type, what values it allows, its default and its one-line
 * documentation. config.c reads YAML and overrides through this table only;
 * `pipetrain keys` prints it as the README's key reference.
 */
#include "config/schema.h"

#include "balance/balance.h"

#include <stddef.h>

#define PT_WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define AT(field) offsetof(pt_config, field), sizeof(((pt_config *)0)->field)

/* Where Debian's dataset-fashion-mnist package installs the data set. */
#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

const pt_key_spec pt_config_keys[] = {
    /* run */
    {"run.dir", PT_K_STR, AT(run.dir), 0, 0, NULL, PT_F_DIR, "runs/default",
     "directory for checkpoints and metrics (created if missing)"},
    {"run.seed", PT_K_I64, AT(run.seed), 0, 9.2e18, NULL, 0, "1",
     "seed for initialisation, data order and sampling"},
    {"run.threads", PT_K_INT, AT(run.threads), 0, 1024, NULL, 0, "0",
     "CPU threads per rank; 0 = the node's cores divided among its ranks"},
    {"run.device", PT_K_ENUM, AT(run.device), 0, 0, PT_WORDS("auto", "cpu", "cuda"), 0, "auto",
     "compute device; auto takes a GPU when the driver reports one"},
    {"run.precision", PT_K_ENUM, AT(run.precision), 0, 0, PT_WORDS("fp32", "bf16"), 0, "fp32",
     "fp32; bf16: bf16 matrix operands and activations, fp32 weights, moments and sums (GPU only)"},
    {"run.metrics", PT_K_BOOL, AT(run.metrics), 0, 0, NULL, 0, "true",
     "write metrics as JSON lines to RUN_DIR/metrics.jsonl"},
    {"run.rank_metrics", PT_K_BOOL, AT(run.rank_metrics), 0, 0, NULL, 0, "false",
     "every rank also writes its per-step compute and transfer times to RUN_DIR/metrics-rank<R>.jsonl"},
    {"run.timeout_s", PT_K_FLOAT, AT(run.timeout_s), 0, 1e6, NULL, PT_F_MIN_EXCL, "600",
     "a rank that waits this long for another is treated as failed, and the job stops"},
    {"run.check_replicas", PT_K_I64, AT(run.check_replicas), 0, 1e9, NULL, 0, "0",
     "debug: every this many steps compare a hash of every replica's weights and stop on a "
     "mismatch; 0 = off"},
    {"run.log_samples", PT_K_BOOL, AT(run.log_samples), 0, 0, NULL, 0, "false",
     "every replica's first stage writes the sample ids of each step to "
     "RUN_DIR/samples-rank<R>.jsonl (every rank opens one: a re-plan can make any rank a "
     "first stage)"},
    {"run.profile_ops", PT_K_BOOL, AT(run.profile_ops), 0, 0, NULL, 0, "false",
     "time every CPU backend op of the training steps after the run's first 3 (of 2 or 3 steps: "
     "all but the first; of one: that one); at the end print a table "
     "per op and shape (ms per step, GFLOP/s, % of the measured FMA peak) and write it to "
     "RUN_DIR/op_profile-rank<R>.json"},

    /* model */
    {"model.kind", PT_K_ENUM, AT(model.kind), 0, 0, PT_WORDS("vit", "gpt", "bert"), 0, "vit",
     "vit: image classifier on the CLS token; gpt: causal byte-level language model; bert: "
     "post-LN encoder (Hugging Face's BERT) with a classifier on the mean of the real tokens"},
    {"model.dim", PT_K_INT, AT(model.dim), 1, 65536, NULL, 0, "64", "model width d_model"},
    {"model.layers", PT_K_INT, AT(model.layers), 1, 1024, NULL, 0, "6", "transformer blocks"},
    {"model.heads", PT_K_INT, AT(model.heads), 1, 4096, NULL, 0, "4",
     "attention heads (must divide model.dim)"},
    {"model.mlp_hidden", PT_K_INT, AT(model.mlp_hidden), 0, 262144, NULL, 0, "0",
     "MLP hidden width; 0 = 4 * model.dim"},
    {"model.patch", PT_K_INT, AT(model.patch), 1, 4096, NULL, 0, "7",
     "ViT patch size in pixels (must divide the image size)"},
    {"model.classes", PT_K_INT, AT(model.classes), 2, 1 << 20, NULL, 0, "10",
     "output classes: ViT labels must be below this; BERT: at least the labels of "
     "data.train_file"},
    {"model.context", PT_K_INT, AT(model.context), 2, 65536, NULL, 0, "128",
     "GPT: context length in bytes; BERT: tokens per example ([CLS] text [SEP], truncated or "
     "padded to this; at least 3)"},
    {"model.vocab", PT_K_INT, AT(model.vocab), 2, 1 << 24, NULL, 0, "30522",
     "BERT: rows of the token embedding: the lines of data.vocab, or more (a padded checkpoint)"},
    {"model.positions", PT_K_INT, AT(model.positions), 2, 1 << 20, NULL, 0, "512",
     "BERT: rows of the position table (at least model.context)"},
    {"model.type_vocab", PT_K_INT, AT(model.type_vocab), 1, 1024, NULL, 0, "2",
     "BERT: rows of the token-type table (every token has type 0)"},
    {"model.ln_eps", PT_K_FLOAT, AT(model.ln_eps), 0, 1, NULL, PT_F_MAX_EXCL, "0",
     "LayerNorm epsilon, 1e-38 or more; 0 = 1e-5 for vit and gpt, 1e-12 for bert"},
    {"model.dropout", PT_K_FLOAT, AT(model.hidden_dropout), 0, 1, NULL, PT_F_MAX_EXCL | PT_F_AUTO,
     "auto",
     "bert: dropout probability of the hidden states while training (the embeddings' output, the "
     "attention and MLP outputs before their residual adds, the pooled vector before the "
     "classifier; Hugging Face's hidden_dropout_prob); auto = model.init_from's config.json "
     "(0.1 where it says none), else 0; vit and gpt: 0 (auto)"},
    {"model.attention_dropout", PT_K_FLOAT, AT(model.attn_dropout), 0, 1, NULL,
     PT_F_MAX_EXCL | PT_F_AUTO, "auto",
     "bert: dropout probability of the attention probabilities while training (Hugging Face's "
     "attention_probs_dropout_prob); auto as model.dropout"},
    /* below 10: nn's pt_arch_check refuses 10 itself */
    {"model.init_std", PT_K_FLOAT, AT(model.init_std), 1e-38, 10, NULL, PT_F_MAX_EXCL,
     "0.02", "standard deviation of the normal initialisation of weights (at least about float32's "
     "smallest normal number)"},
    {"model.init_from", PT_K_STR, AT(model.init_from), 0, 0, NULL, PT_F_FILE, "",
     "start from these weights (safetensors, names as `pipetrain export` writes; vit and gpt: "
     "refused when the `model.heads` or `model.ln_eps` the export recorded differs; bert: a "
     "Hugging Face BERT directory with config.json and model.safetensors, or its "
     "model.safetensors)"},

    /* data */
    {"data.kind", PT_K_ENUM, AT(data.kind), 0, 0,
     PT_WORDS("fashion_mnist", "idx", "text", "kjv", "synthetic_images", "synthetic_text",
              "text_classification"),
     0, "fashion_mnist",
     "fashion_mnist: Debian's dataset-fashion-mnist; idx: the four data.*_images/labels files; "
     "text: data.text; kjv: the KJV text written by scripts/setup.sh; synthetic_*: generated; "
     "text_classification: the labelled texts (TSV or JSON lines) of data.train_file, for model.kind "
     "bert"},
    {"data.train_images", PT_K_STR, AT(data.train_images), 0, 0, NULL, PT_F_FILE,
     FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", "IDX image file (gzip or plain) for training"},
    {"data.train_labels", PT_K_STR, AT(data.train_labels), 0, 0, NULL, PT_F_FILE,
     FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz", "IDX label file for training"},
    {"data.test_images", PT_K_STR, AT(data.test_images), 0, 0, NULL, PT_F_FILE,
     FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", "IDX image file for evaluation"},
    {"data.test_labels", PT_K_STR, AT(data.test_labels), 0, 0, NULL, PT_F_FILE,
     FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz", "IDX label file for evaluation"},
    {"data.text", PT_K_STR, AT(data.text), 0, 0, NULL, PT_F_FILE, "datasets/kjv.txt",
     "text file for data.kind text or kjv (bytes are tokens; a file that starts as gzip data "
     "does, with 1f 8b, is read unpacked)"},
    {"data.train_file", PT_K_STR, AT(data.train_file), 0, 0, NULL, PT_F_FILE,
     "datasets/kjv_books.tsv",
     "text_classification: labelled texts, NAME.tsv (lines LABEL<TAB>TEXT) or NAME.jsonl (lines "
     "{\"text\": string, \"label\": string or integer}); the classes are its labels in byte order"},
    {"data.test_file", PT_K_STR, AT(data.test_file), 0, 0, NULL, PT_F_FILE, "",
     "text_classification: labelled texts for evaluation, as data.train_file ('' = "
     "data.test_fraction of data.train_file)"},
    {"data.vocab", PT_K_STR, AT(data.vocab), 0, 0, NULL, PT_F_FILE, "datasets/minilm/vocab.txt",
     "text_classification: the WordPiece vocab.txt the texts are tokenized with"},
    {"data.lowercase", PT_K_BOOL, AT(data.lowercase), 0, 0, NULL, PT_F_AUTO, "auto",
     "text_classification: lowercase the texts before WordPiece (transformers' do_lower_case); "
     "auto = the tokenizer_config.json beside data.vocab, true where it has none"},
    {"data.strip_accents", PT_K_BOOL, AT(data.strip_accents), 0, 0, NULL, PT_F_AUTO, "auto",
     "text_classification: decompose the texts (NFD) and drop their accents (Mn) before "
     "WordPiece; auto = the strip_accents of the tokenizer_config.json beside data.vocab, "
     "data.lowercase where it names none (as transformers)"},
    {"data.split_cjk", PT_K_BOOL, AT(data.split_cjk), 0, 0, NULL, PT_F_AUTO, "auto",
     "text_classification: every CJK ideograph is a word of its own (transformers' "
     "tokenize_chinese_chars); auto = the tokenizer_config.json beside data.vocab, true where "
     "it has none"},
    {"data.test_fraction", PT_K_FLOAT, AT(data.test_fraction), 0, 0.9, NULL, PT_F_MIN_EXCL,
     "0.1",
     "text: the last fraction of the file is the test split; text_classification without "
     "data.test_file: this fraction of data.train_file's examples, the same ones whatever "
     "run.seed"},
    {"data.mean", PT_K_FLOAT, AT(data.mean), -1e3, 1e3, NULL, 0, "0.2860",
     "IDX images (fashion_mnist, idx): pixels become (p/255 - mean) / std"},
    {"data.std", PT_K_FLOAT, AT(data.std), 1e-6, 1e3, NULL, 0, "0.3530",
     "IDX images: see data.mean"},
    {"data.shuffle", PT_K_BOOL, AT(data.shuffle), 0, 0, NULL, 0, "true",
     "a new order every epoch from (run.seed, epoch); false = file order"},
    {"data.hflip", PT_K_BOOL, AT(data.hflip), 0, 0, NULL, 0, "false",
     "augmentation: random left-right flips of training images"},
    {"data.crop_pad", PT_K_INT, AT(data.crop_pad), 0, 64, NULL, 0, "0",
     "augmentation: pad training images by this many pixels and crop back randomly"},
    {"data.synthetic_examples", PT_K_I64, AT(data.synthetic_examples), 16, 1e8, NULL, 0, "2048",
     "synthetic_*: training examples (the test split has a quarter as many)"},
    {"data.image_size", PT_K_INT, AT(data.image_size), 1, 4096, NULL, 0, "28",
     "synthetic_images: height and width"},

    /* train */
    {"train.batch", PT_K_I64, AT(train.batch), 1, 1 << 24, NULL, 0, "128",
     "global batch: examples per optimizer step, over all replicas and micro-batches"},
    {"train.epochs", PT_K_INT, AT(train.epochs), 1, 1000000, NULL, 0, "10",
     "passes over the data; an epoch is floor(training examples / train.batch) steps, and the "
     "examples left over at the end of an epoch's order (fewer than a batch; with data.shuffle, "
     "different ones each epoch) are not used in it"},
    {"train.max_steps", PT_K_I64, AT(train.max_steps), 0, 1e15, NULL, 0, "0",
     "stop after this many optimizer steps in all, if train.epochs has more; the learning-rate "
     "schedule (warm-up and decay) then spans these steps; 0 = no limit"},
    {"train.lr", PT_K_FLOAT, AT(train.lr), 1e-38, 10, NULL, 0, "0.001",
     "peak learning rate (at least about float32's smallest normal number)"},
    {"train.min_lr", PT_K_FLOAT, AT(train.min_lr), 0, 10, NULL, 0, "0",
     "learning rate at the end of the cosine or linear decay: 0, or 1e-38 up to train.lr"},
    {"train.schedule", PT_K_ENUM, AT(train.schedule), 0, 0, PT_WORDS("constant", "cosine", "linear"), 0, "cosine",
     "learning-rate decay after warm-up, over all steps of the run"},
    {"train.warmup_steps", PT_K_I64, AT(train.warmup_steps), 0, 1e15, NULL, 0, "0",
     "linear warm-up from lr/warmup_steps to lr"},
    {"train.weight_decay", PT_K_FLOAT, AT(train.weight_decay), 0, 10, NULL, 0, "0.05",
     "AdamW decoupled weight decay, on linear weights and the token embedding (not on biases, "
     "LayerNorm, position embeddings or CLS)"},
    {"train.beta1", PT_K_FLOAT, AT(train.beta1), 0, 1, NULL, PT_F_MAX_EXCL, "0.9", "AdamW beta1"},
    {"train.beta2", PT_K_FLOAT, AT(train.beta2), 0, 1, NULL, PT_F_MAX_EXCL, "0.999", "AdamW beta2"},
    {"train.eps", PT_K_FLOAT, AT(train.eps), 1e-38, 1, NULL, 0, "1e-8",
     "AdamW epsilon (at least about float32's smallest normal number)"},
    {"train.grad_clip", PT_K_FLOAT, AT(train.grad_clip), 0, 1e6, NULL, 0, "1.0",
     "clip the global gradient norm to this; 0 = off"},
    {"train.log_every", PT_K_I64, AT(train.log_every), 1, 1e9, NULL, 0, "50",
     "steps between progress lines when stderr is not a terminal"},
    {"train.eval_every", PT_K_INT, AT(train.eval_every), 0, 1000000, NULL, 0, "1",
     "epochs between test-split evaluations; 0 = only at the end"},
    {"train.eval_every_steps", PT_K_I64, AT(train.eval_every_steps), 0, 1e15, NULL, 0, "0",
     "also evaluate every this many steps (counted from the run's start); 0 = by epochs only"},
    {"train.eval_examples", PT_K_I64, AT(train.eval_examples), 0, 1e12, NULL, 0, "0",
     "evaluate on this many test examples; 0 = all"},
    {"train.checkpoint_every", PT_K_I64, AT(train.checkpoint_every), 0, 1e15, NULL, 0, "0",
     "steps between checkpoints; 0 = at the end of every epoch (always at the end of the run)"},
    {"train.keep_checkpoints", PT_K_INT, AT(train.keep_checkpoints), 1, 1000000, NULL, 0, "3",
     "newest checkpoints kept in RUN_DIR/checkpoints; older ones are deleted"},
    {"train.resume", PT_K_STR, AT(train.resume), 0, 0, NULL, 0, "",
     "'' = start fresh; auto = newest checkpoint in RUN_DIR if any; or a checkpoint directory"},

    /* sample (gpt) */
    /* at most 4096: the sampler writes no more (train.c, main.c) */
    {"sample.length", PT_K_INT, AT(sample.length), 0, 4096, NULL, 0, "200",
     "GPT: bytes generated after each evaluation (drawn with seed run.seed + step; eval's "
     "with run.seed); 0 = none"},
    {"sample.temperature", PT_K_FLOAT, AT(sample.temperature), 0, 100, NULL, PT_F_MIN_EXCL, "0.8",
     "GPT: softmax temperature for sampling"},
    /* at most the vocabulary: a token is a byte */
    {"sample.top_k", PT_K_INT, AT(sample.top_k), 0, 256, NULL, 0, "40",
     "GPT: sample among the k most likely bytes; 0 = all"},
    {"sample.prompt", PT_K_STR, AT(sample.prompt), 0, 0, NULL, 0, "And God said",
     "GPT: text the sample continues"},

    /* pipeline */
    /* at most the planner's limit: it finds no layout for more */
    {"pipeline.stages", PT_K_INT, AT(pipeline.stages), 1, PT_MAX_STAGES, NULL, PT_F_AUTO, "auto",
     "pipeline stages K (ranks per pipeline), or auto: the planner's choice"},
    {"pipeline.replicas", PT_K_INT, AT(pipeline.replicas), 1, 1 << 20, NULL, PT_F_AUTO, "auto",
     "pipeline replicas D (data parallel), or auto: the planner's choice"},
    {"pipeline.microbatches", PT_K_INT, AT(pipeline.microbatches), 1, 1 << 20, NULL, PT_F_AUTO,
     "auto", "micro-batches M per replica and step, or auto"},
    {"pipeline.schedule", PT_K_ENUM, AT(pipeline.schedule), 0, 0, PT_WORDS("gpipe", "1f1b"), 0, "1f1b",
     "gpipe: all forwards then all backwards; 1f1b: interleaved, fewer activations in flight"},
    {"pipeline.recompute", PT_K_BOOL, AT(pipeline.recompute), 0, 0, NULL, 0, "false",
     "keep only each stage's input per micro-batch and recompute the rest in backward"},
    {"pipeline.memory_gib", PT_K_FLOAT, AT(pipeline.memory_gib), 0, 1e6, NULL, 0, "0",
     "memory per device a pipeline stage may use, in GiB; 0 = the device's (CPU: RAM / ranks on the "
     "node, less the data set each rank holds; GPU: its memory less 1 GiB and a tenth of it, for the "
     "CUDA context, libraries and scratch); eval plans for the whole model frozen when training does not fit (no gradients, "
     "moments or saved activations but the head's)"},
    {"pipeline.cores", PT_K_INT, AT(pipeline.cores), 0, 1 << 20, NULL, 0, "0",
     "cores per node the planner assumes the ranks of a node share; 0 = what hwloc counts"},
    {"pipeline.elastic", PT_K_BOOL, AT(pipeline.elastic), 0, 0, NULL, 0, "true",
     "at freeze decisions plan again whatever of stages, replicas and micro-batches is auto "
     "(the layout predicted fastest for the smaller active model, usually fewer stages and more "
     "replicas); false: keep the first layout, re-partition only"},
    {"pipeline.overlap", PT_K_BOOL, AT(pipeline.overlap), 0, 0, NULL, 0, "true",
     "start each bucket's gradient all-reduce during the last backward; false: after it"},
    {"pipeline.bucket_mib", PT_K_FLOAT, AT(pipeline.bucket_mib), 0, 1024, NULL, PT_F_MIN_EXCL, "4",
     "gradient all-reduce bucket size in MiB (whole units per bucket)"},
    {"pipeline.profile", PT_K_STR, AT(pipeline.profile), 0, 0, NULL, 0, "",
     "plan from the unit costs and links measured by an earlier run (its RUN_DIR/profile.json) "
     "instead of measuring: the same layouts, run after run ('' = measure)"},

    /* freeze */
    {"freeze.policy", PT_K_ENUM, AT(freeze.policy), 0, 0, PT_WORDS("none", "schedule", "auto"), 0,
     "none",
     "none; schedule: after decision t, ceil(L (1 - (1 - alpha)^t)) blocks frozen; auto: the "
     "prefix of blocks whose gradient norms stopped changing, at most the schedule's count"},
    {"freeze.alpha", PT_K_FLOAT, AT(freeze.alpha), 0, 1, NULL, PT_F_MIN_EXCL | PT_F_MAX_EXCL, "0.33",
     "freeze ratio of the progressive bound"},
    {"freeze.every", PT_K_INT, AT(freeze.every), 1, 1000000000, NULL, 0, "1",
     "a freeze decision every this many epochs (or steps, see freeze.unit)"},
    {"freeze.unit", PT_K_ENUM, AT(freeze.unit), 0, 0, PT_WORDS("epoch", "step"), 0, "epoch",
     "what freeze.every and freeze.start count"},
    {"freeze.start", PT_K_INT, AT(freeze.start), 0, 1000000000, NULL, 0, "1",
     "the first decision comes after this many epochs (or steps); 0: one before training too"},
    {"freeze.max_depth", PT_K_INT, AT(freeze.max_depth), 0, 1024, NULL, 0, "0",
     "never freeze more than this many blocks (at most model.layers); 0 = all of them (the head "
     "always trains)"},

    /* cache */
    {"cache.enabled", PT_K_BOOL, AT(cache.enabled), 0, 0, NULL, 0, "false",
     "serve the frozen blocks' output from a per-node shared-memory cache instead of recomputing it"},
    {"cache.memory_gib", PT_K_FLOAT, AT(cache.memory_gib), 0, 1e6, NULL, 0, "1",
     "shared memory per node for cached activations, in GiB"},
    {"cache.disk_dir", PT_K_STR, AT(cache.disk_dir), 0, 0, NULL, PT_F_DIR, "",
     "directory for a disk tier of the cache ('' = none)"},
    {"cache.disk_gib", PT_K_FLOAT, AT(cache.disk_gib), 0, 1e9, NULL, 0, "0",
     "size of the disk tier, in GiB"},
    {"cache.min_depth", PT_K_INT, AT(cache.min_depth), 1, 1024, NULL, 0, "1",
     "cache only once at least this many blocks are frozen"},
};

const int pt_config_key_count = (int)(sizeof pt_config_keys / sizeof pt_config_keys[0]);
