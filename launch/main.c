/*
 * main.c: the pipetrain command line. Parses the subcommand and its
 * arguments and turns every failure into one "pipetrain: error: ..." line and
 * an exit status: 0 success, 2 bad input (command line, config, data,
 * checkpoint), 1 anything else, 130 stopped by a signal after saving.
 *
 * Under mpirun every rank runs this. Failures every rank sees alike (a bad
 * config) are printed once, by rank 0, and the ranks exit together; a failure
 * of one rank during training is printed by that rank with where it was, and
 * the job is aborted so no rank waits forever for it.
 */
#include "cache/cache.h"
#include "checkpoint/checkpoint.h"
#include "interop/interop.h"
#include "launch/inspect.h"
#include "outputs/outputs.h"
#include "launch/report.h"
#include "launch/session.h"
#include "signals/signals.h"
#include "formats/formats.h"

#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>


static const char usage[] =
    "usage: pipetrain COMMAND [ARGUMENTS]\n"
    "\n"
    "  train CONFIG.yaml [--set KEY=VALUE ...]\n"
    "        train; resume an interrupted run with --set train.resume=auto\n"
    "  eval CONFIG.yaml [--checkpoint DIR | --init] [--logits OUT.safetensors]\n"
    "       [--hidden OUT.safetensors] [--report OUT.json] [--set KEY=VALUE ...]\n"
    "        test loss and accuracy of a checkpoint (default: the newest in run.dir;\n"
    "        --init: no checkpoint, the initial weights, model.init_from or seeded),\n"
    "        and for a classifier each class's precision, recall and F1;\n"
    "        --logits also writes every test row's logits [rows, classes], --hidden\n"
    "        every test example's final hidden states [examples, T, d] (what enters\n"
    "        the head), --report the figures by class and the confusion matrix (JSON)\n"
    "  plan CONFIG.yaml [--set KEY=VALUE ...]\n"
    "        print the topology, the pipeline layout, predicted time and memory, and exit\n"
    "  export CHECKPOINT_DIR OUT\n"
    "        the checkpoint's weights as safetensors (OUT), with PyTorch names and\n"
    "        shapes; model.kind bert: OUT is a directory that gets a Hugging Face\n"
    "        BERT (model.safetensors with transformers' names, config.json, and the\n"
    "        run's vocab.txt with a tokenizer_config.json)\n"
    "  inspect DIR [--config]\n"
    "        verify a checkpoint (DIR, or a run directory's newest) and print what\n"
    "        it holds as JSON: step, epoch, model, frozen blocks, learning rate,\n"
    "        labels, data digests; --config: the configuration it was saved with\n"
    "        (YAML that train reads back)\n"
    "  keys  every configuration key, its default and what it allows (Markdown)\n"
    "\n"
    "An option's value may also follow it after '=' (--set=KEY=VALUE, --checkpoint=DIR).\n"
    "train, eval and plan run under mpirun for several ranks, e.g.\n"
    "  mpirun -np 4 pipetrain train CONFIG.yaml --set pipeline.stages=4\n"
    "Configuration keys are documented in README.md and by `pipetrain keys`.\n";

static int exit_code(int rc)
{
    switch (rc) {
    case PT_OK:
        return 0;
    case PT_EINPUT:
        return 2;
    case PT_ESTOPPED:
        return 130;
    default:
        return 1;
    }
}

/* msg on one line of stderr after head, whatever it quotes: a newline, tab
 * or carriage return in it (a path or value holding one) is written as C
 * writes it in a string (\n, \t, \r), and every other control character
 * (an escape sequence, C1's CSI), bidirectional control or byte that is not
 * UTF-8 as \xNN (pt_utf8_printable), so the line stays one line and the
 * terminal prints what was given. */
static void error_line(const char *head, const char *msg, size_t cap)
{
    char line[4 * sizeof ((pt_err *)0)->msg + 1];
    size_t n = 0, i = 0;
    const size_t end = strnlen(msg, cap);
    while (i < end && n + 3 < sizeof line) {
        const char c = msg[i];
        if (c == '\n' || c == '\t' || c == '\r') {
            line[n++] = '\\';
            line[n++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            i++;
            continue;
        }
        size_t j = i;
        while (j < end && msg[j] != '\n' && msg[j] != '\t' && msg[j] != '\r')
            j++;
        pt_utf8_printable(msg + i, j - i, line + n, sizeof line - n);
        n += strlen(line + n);
        i = j;
    }
    line[n] = '\0';
    fprintf(stderr, "%s%s\n", head, line);
}

/* Prints err (prefixed with the rank when there are several) and returns the exit status. */
static int report(const pt_comm *comm, int rc, const pt_err *err)
{
    char head[64] = "pipetrain: error: ";
    if (comm && pt_comm_size(comm) > 1)
        snprintf(head, sizeof head, "pipetrain: rank %d: error: ", pt_comm_rank(comm));
    error_line(head, err->msg, sizeof err->msg);
    return exit_code(rc);
}

static int usage_error(const char *fmt, const char *arg)
{
    char msg[sizeof ((pt_err *)0)->msg];
    snprintf(msg, sizeof msg, fmt, arg);
    error_line("pipetrain: error: ", msg, sizeof msg);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

/* A umask that takes the owner's own permissions off (0222, 0277): the
 * directories train makes (run.dir, checkpoints/, each step's) would refuse
 * the files that go into them, and the files could not be read back, to a
 * user who is not root (root passes permissions). Refused at the start,
 * naming it, rather than failing at the first save. (export's one file
 * such a umask makes read-only, as asked.) */
static int umask_ok(pt_err *err)
{
    /* read, not set and set back: MPI's threads are running, and a file one
     * of them made in between would get mode 0666 */
    unsigned mask = 0;
    char line[128];
    int found = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "Umask: %o", &mask) == 1;
    if (f)
        fclose(f);
    if (!found || !(mask & S_IRWXU) || geteuid() == 0)
        return 0;
    return pt_fail(err, PT_EINPUT, "the umask is %04o: it takes the owner's permissions off the "
                   "directories and files pipetrain makes, which this user could then not write "
                   "into or read back; set one that leaves the owner rwx (umask 022 or 077)",
                   (unsigned)mask);
}

typedef struct cli {
    const char *command; /* train, eval or plan */
    pt_config cfg;
    const char *checkpoint, *logits, *hidden, *report;
    int init; /* eval --init */
} cli;

/* eval's options that take a path, as `--name PATH` or `--name=PATH`.
 * Returns 1 when argv[*i] is one of them (its value stored and *i moved past
 * it), 0 when it is not, or an error (PT_EINPUT, negated) for a missing or
 * repeated value. */
static int path_option(int argc, char **argv, int *i, cli *a, pt_err *err)
{
    const char *names[] = {"--checkpoint", "--logits", "--hidden", "--report"};
    const char **fields[] = {&a->checkpoint, &a->logits, &a->hidden, &a->report};
    for (int k = 0; k < 4; k++) {
        const size_t len = strlen(names[k]);
        const int joined = strncmp(argv[*i], names[k], len) == 0 && argv[*i][len] == '=';
        if (!joined && strcmp(argv[*i], names[k]) != 0)
            continue;
        const char *what = k == 0   ? "a checkpoint directory"
                           : k == 3 ? "an output file (OUT.json)"
                                    : "an output file (OUT.safetensors)";
        /* `--name=PATH` says where its value is: only an empty one is missing */
        const char *next = joined ? argv[*i] + len + 1 : *i + 1 < argc ? argv[*i + 1] : NULL;
        if (!next || !*next || (!joined && strncmp(next, "--", 2) == 0))
            return -pt_fail(err, PT_EINPUT, "%s needs %s%s%s%s (see pipetrain --help)", names[k], what,
                            next && !joined ? ", got '" : "", next && !joined ? next : "",
                            next && !joined ? "'" : "");
        if (*fields[k])
            return -pt_fail(err, PT_EINPUT, "%s given twice ('%s' and '%s')", names[k], *fields[k], next);
        if (pt_cli_path_ok(names[k], next, err))
            return -PT_EINPUT;
        *fields[k] = next;
        if (!joined)
            ++*i;
        return 1;
    }
    return 0;
}

/* Reads CONFIG.yaml, the --set overrides and --checkpoint / --logits /
 * --hidden / --report (where allowed) from argv[2..]; validates. */
static int read_config(int argc, char **argv, cli *a, int eval_options, pt_err *err)
{
    pt_config_defaults(&a->cfg);
    a->checkpoint = a->logits = a->hidden = a->report = NULL;
    a->init = 0;
    /* `train --set k=v CONFIG`: the config comes first (./-name is a file) */
    int rc = strncmp(argv[2], "--", 2) == 0
                 ? pt_fail(err, PT_EINPUT, "the config file comes first, before '%s' (%s CONFIG.yaml "
                           "[--set KEY=VALUE ...]%s; see pipetrain --help)", argv[2], argv[1],
                           eval_options ? " [--checkpoint DIR | --init] [--logits "
                                          "OUT.safetensors] [--hidden OUT.safetensors] "
                                          "[--report OUT.json]" : "")
                 : pt_config_load(&a->cfg, argv[2], err);
    for (int i = 3; rc == 0 && i < argc; i++) {
        int got = 0;
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc)
            rc = pt_config_set(&a->cfg, argv[++i], err);
        else if (strncmp(argv[i], "--set=", 6) == 0)
            rc = pt_config_set(&a->cfg, argv[i] + 6, err);
        else if (strcmp(argv[i], "--set") == 0) /* the last argument */
            rc = pt_fail(err, PT_EINPUT, "--set needs KEY=VALUE after it (see pipetrain --help)");
        else if (eval_options && (got = path_option(argc, argv, &i, a, err)) != 0)
            rc = got < 0 ? -got : 0;
        else if (eval_options && strcmp(argv[i], "--init") == 0 && a->init)
            rc = pt_fail(err, PT_EINPUT, "--init given twice");
        else if (eval_options && strcmp(argv[i], "--init") == 0)
            a->init = 1;
        else if (eval_options && strncmp(argv[i], "--init=", 7) == 0)
            rc = pt_fail(err, PT_EINPUT, "--init takes no value, got '%s' (it starts from "
                         "model.init_from's weights, or the config's seed)", argv[i]);
        else
            rc = pt_fail(err, PT_EINPUT, "unexpected argument '%s' (see pipetrain --help)", argv[i]);
    }
    if (rc == 0 && a->init && a->checkpoint)
        rc = pt_fail(err, PT_EINPUT, "--init and --checkpoint '%s' both choose the weights; give one",
                     a->checkpoint);
    const char *opt[3] = {"--logits", "--hidden", "--report"}, *out[3] = {a->logits, a->hidden, a->report};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; rc == 0 && j < 3; j++)
            if (out[i] && out[j] && pt_output_same(out[i], out[j]))
                rc = pt_fail(err, PT_EINPUT, "%s and %s name the same file ('%s', '%s')", opt[i],
                             opt[j], out[i], out[j]);
    /* an eval of a checkpoint reads none of model.init_from's files (the
     * checkpoint holds the weights; dropout is off): one not there, or
     * changed since, is no reason to refuse it */
    char unread[sizeof a->cfg.model.init_from] = "";
    if (eval_options && !a->init) {
        memcpy(unread, a->cfg.model.init_from, sizeof unread);
        a->cfg.model.init_from[0] = '\0';
    }
    if (rc == 0)
        rc = pt_config_validate(&a->cfg, err);
    /* eval opens no cache: an evaluation on a machine without the
     * training's disk tier directory is not refused for it */
    if (rc == 0 && !eval_options)
        rc = pt_config_check_disk_tier(&a->cfg, err);
    if (*unread) /* kept: an output must not replace its files either */
        memcpy(a->cfg.model.init_from, unread, sizeof unread);
    if (rc == 0 && a->report) {
        pt_arch arch;
        pt_config_arch(&a->cfg, &arch);
        if (!pt_eval_by_class(&arch))
            rc = pt_fail(err, PT_EINPUT,
                         arch.kind == PT_MODEL_GPT
                             ? "--report '%s': a report by class is for classifiers (model.kind "
                               "vit or bert); a gpt predicts tokens"
                             : "--report '%s': a report by class is made for at most %d classes, "
                               "and model.classes is %d",
                         a->report, PT_EVAL_MAX_CLASSES, arch.classes);
    }
    return rc;
}

/* Collective over the world after setup: returns 0 when every rank is
 * ready, else the exit status for this rank. When every rank failed on its
 * own (a bad config fails everywhere) only rank 0 speaks; otherwise each
 * rank that failed on its own reports its error, and the others (those
 * that only learned of it, err->relayed) say nothing more. */
static int setup_failed(pt_comm *comm, int rc, const pt_err *err)
{
    const int own = rc != 0 && !err->relayed;
    int64_t v[2] = {rc != 0, own};
    pt_err ignore, agree;
    if (pt_allreduce_sum(pt_comm_world(comm), v, 2, PT_DT_I64, &agree)) {
        /* cannot even agree (a rank stopped answering): each rank speaks
         * for itself, of its own failure or of this one */
        return report(comm, own ? rc : agree.code, own ? err : &agree);
    }
    if (v[0] == 0)
        return 0;
    const int size = pt_comm_size(comm);
    if (v[1] == size || v[1] == 0) { /* everywhere alike, or nobody's own */
        if (pt_comm_rank(comm) == 0)
            report(v[1] == size ? NULL : comm, rc ? rc : PT_EPEER,
                   rc ? err : &(pt_err){.code = PT_EPEER, .relayed = 1, .msg = "another rank failed"});
    } else if (own) {
        report(comm, rc, err);
    }
    /* every rank exits as the ranks that failed on their own do (bad input:
     * 2), whichever of them mpirun reports */
    int64_t code = own ? exit_code(rc) : 0;
    if (pt_allreduce_max_i64(pt_comm_world(comm), &code, &ignore) || code == 0)
        code = rc ? exit_code(rc) : exit_code(PT_EPEER);
    return (int)code;
}

/* The first line where two YAML texts differ, as "section.key: value"
 * (its top-level section before it), into out; 0 when they are equal. */
static int first_difference(const char *mine, const char *theirs, char *out, size_t n)
{
    char section[128] = "";
    for (;;) {
        const char *me = strchr(mine, '\n'), *te = strchr(theirs, '\n');
        const size_t ml = me ? (size_t)(me - mine) : strlen(mine);
        const size_t tl = te ? (size_t)(te - theirs) : strlen(theirs);
        if (ml != tl || memcmp(mine, theirs, ml) != 0) {
            const char *key = mine;
            size_t kl = ml;
            while (kl > 0 && *key == ' ')
                key++, kl--;
            snprintf(out, n, "%s%s%.*s", key != mine ? section : "", key != mine ? "." : "",
                     (int)(kl < 200 ? kl : 200), key);
            return 1;
        }
        if (!me || !te)
            return 0;
        if (ml > 0 && mine[0] != ' ' && mine[ml - 1] == ':')
            snprintf(section, sizeof section, "%.*s", (int)(ml - 1 < 127 ? ml - 1 : 127), mine);
        mine = me + 1;
        theirs = te + 1;
    }
}

/* Every rank reads CONFIG and --set itself, and they must agree: a config
 * through a pipe reaches rank 0 alone, and ranks that plan or step
 * differently wait for each other forever or exchange buffers of other
 * sizes. Rank 0's resolved configuration goes to every rank; one whose own
 * differs refuses to start, naming the first key. */
static int same_config(pt_comm *comm, const cli *a, pt_err *err)
{
    const pt_config *cfg = &a->cfg;
    if (pt_comm_size(comm) == 1)
        return 0;
    char *mine = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mine, &len);
    if (!f) { /* the others go into the broadcasts: this rank cannot stay out */
        fprintf(stderr, "pipetrain: error: out of memory comparing the ranks' configs\n");
        pt_comm_abort(comm, 1);
    }
    pt_config_write_yaml(cfg, f);
    /* the command and eval's options too: ranks that run other commands, or
     * load other weights, would wait forever on each other or report a mix
     * of two checkpoints */
    fprintf(f, "command: %s\n", a->command);
    fprintf(f, "eval:\n  checkpoint: \"%s\"\n  init: %d\n  logits: \"%s\"\n  hidden: \"%s\"\n"
               "  report: \"%s\"\n",
            a->checkpoint ? a->checkpoint : "", a->init, a->logits ? a->logits : "",
            a->hidden ? a->hidden : "", a->report ? a->report : "");
    fclose(f);
    pt_group *world = pt_comm_world(comm);
    const int rank = pt_comm_rank(comm);
    int64_t n0 = (int64_t)len;
    int rc = pt_bcast(world, &n0, sizeof n0, 0, err);
    char *theirs = rc == 0 ? calloc((size_t)n0 + 1, 1) : NULL;
    if (rc == 0 && !theirs) { /* the others are already in the broadcast */
        fprintf(stderr, "pipetrain: error: out of memory comparing the ranks' configs\n");
        pt_comm_abort(comm, 1);
    }
    if (rc == 0 && rank == 0)
        memcpy(theirs, mine, (size_t)n0);
    if (rc == 0)
        rc = pt_bcast(world, theirs, (size_t)n0, 0, err);
    char diff[256];
    int64_t differ = rc == 0 && first_difference(mine, theirs, diff, sizeof diff), any = differ;
    /* every rank, whether it differs or not, learns whether any does */
    if (rc == 0)
        rc = pt_allreduce_sum(world, &any, 1, PT_DT_I64, err);
    if (differ && strncmp(diff, "command: ", 9) == 0)
        rc = pt_fail(err, PT_EINPUT, "rank %d runs 'pipetrain %s', rank 0 another command: every "
                     "rank of a job runs the same one", rank, a->command);
    else if (differ)
        rc = pt_fail(err, PT_EINPUT,
                     "config '%s': rank %d reads another configuration than rank 0 (its '%s' is not "
                     "rank 0's): every rank reads CONFIG and --set itself, so give each the same file "
                     "and options (a config through a pipe reaches rank 0 alone)",
                     cfg->source, rank, diff);
    /* the ranks that agree with rank 0 stop as bad input too, silently: the
     * job's exit status is 2 whichever rank mpirun reports */
    else if (rc == 0 && any > 0) {
        rc = pt_fail(err, PT_EINPUT, "another rank reads another configuration");
        err->relayed = 1;
    }
    free(theirs);
    free(mine);
    return rc;
}

/* A note when the newest checkpoint was taken over a newer step directory
 * that is not a complete checkpoint. */
static void passed_over(const char *run_dir, const char *latest)
{
    const int64_t step = pt_checkpoint_passed_over(run_dir, latest);
    if (step < 0)
        return;
    char newer[PT_CKPT_PATH];
    pt_step_dir(run_dir, step, newer, sizeof newer);
    fprintf(stderr, "pipetrain: note: %s is newer than %s but not a complete checkpoint (a "
            "save still being written, a save that did not finish, or a damaged manifest): %s "
            "is used\n", newer, latest, latest);
}

/* eval of run.dir's newest while RUN_DIR/resuming names another
 * directory's checkpoint: the newest is of the history that resume left. */
static void note_resuming(const char *run_dir, const char *latest)
{
    char said[3 * PT_CKPT_PATH + 256];
    if (pt_rundir_resuming_note(run_dir, latest, said, sizeof said))
        error_line("pipetrain: note: ", said, sizeof said);
}

/* A note on stderr for each key the config set that the run never reads
 * (a model.patch for a gpt, a cache.* with the cache off): a setting that
 * changes nothing is often one meant for another key or another config. */
static void note_unused_key(const char *key, const char *why, void *arg)
{
    const pt_config *c = arg;
    char at[PT_PATH_MAX + 32];
    pt_config_where(c, key, at, sizeof at);
    fprintf(stderr, "pipetrain: note: %s%s is not used: %s\n", at, key, why);
}

/* Keys --set gave more than once: the last value is used (as a shell's or
 * argparse's last option wins), said once. */
static void note_set_twice(pt_comm *comm, const pt_config *c)
{
    if (pt_comm_rank(comm) == 0 && (c->set_twice[0] || c->set_twice_more)) {
        char said[sizeof c->set_twice + 128]; /* the values' bytes escaped */
        snprintf(said, sizeof said, "--set gave a key more than once, and its last value is used: "
                 "%s%s%.0d%s", c->set_twice, c->set_twice_more ? ", and " : "",
                 c->set_twice_more, c->set_twice_more ? " more" : "");
        error_line("pipetrain: note: ", said, sizeof said);
    }
}

static void note_unused_keys(pt_comm *comm, const pt_config *c, int resuming)
{
    note_set_twice(comm, c);
    if (pt_comm_rank(comm) == 0)
        pt_config_unused(c, resuming, note_unused_key, (void *)c);
}

/* The checkpoint a start of this config would resume, read before the run's
 * lock settles it (train.resume=auto: what pt_rundir_auto_resume_peek finds;
 * a path: that path; empty for a fresh start), so the session plans from it. */
static void resume_planned(const pt_config *cfg, char *out, size_t n)
{
    if (strcmp(cfg->train.resume, "auto") == 0)
        pt_rundir_auto_resume_peek(cfg->run.dir, out, n);
    else
        snprintf(out, n, "%s", cfg->train.resume);
}

static int cmd_train(pt_comm *comm, const cli *a)
{
    pt_err err = {0};
    pt_session *s = calloc(1, sizeof *s);
    if (!s)
        return setup_failed(comm, pt_fail(&err, PT_ENOMEM, "out of memory"), &err);
    const pt_config *cfg = &a->cfg;
    char resume[PT_PATH_MAX + 64] = "";
    /* One job per run directory: rank 0 holds its lock until the job ends.
     * It is taken once the session is built, which validates every input
     * first, so bad input never creates run.dir; checkpoints are looked at
     * only under it. */
    pt_rundir_lock lock = {.fd = -1};
    pt_rundir_logs logs_there = {.unknown = 1};
    /* RUN_DIR/resuming as it was before this start named the checkpoint it
     * resumes, for a refusal to put back */
    pt_rundir_resuming_was resuming_was = {0};
    /* the checkpoint a resume would take, looked at (read only) so the run
     * plans from its profile; which one is resumed is settled under the lock */
    char planned[PT_PATH_MAX + 64];
    resume_planned(cfg, planned, sizeof planned);
    /* (before the session, which makes run.dir) */
    int rc = pt_output_run_placement(cfg, pt_comm_rank(comm) == 0, &err);
    if ((rc = setup_failed(comm, rc, &err)))
        goto done;
    rc = pt_session_open(s, comm, cfg, PT_RUN_TRAIN, planned, &err);
    /* the directories of run.dir's path the session made (rank 0's; a
     * session refused takes back those it made itself) */
    const size_t run_dir_made = rc == 0 ? s->run_dir_made : 0;
    if (rc == 0 && pt_comm_rank(comm) == 0 &&
        (rc = pt_rundir_lock_take(&lock, cfg->run.dir, &err)) == PT_EINPUT)
        pt_config_key_prefix(cfg, &err, "run.dir");
    /* the logs run.dir holds before any rank opens its own, under the lock */
    if (rc == 0 && pt_comm_rank(comm) == 0)
        pt_rundir_logs_note(cfg->run.dir, &logs_there);
    if ((rc = setup_failed(comm, rc, &err)))
        goto refused;
    s->lock = &lock;
    /* one run.dir for the job: every rank must see the lock rank 0 took
     * (a relative run.dir from other working directories, a node that does
     * not share the file system, would write checkpoints elsewhere or over
     * another run's) */
    char lock_here[512], lock_root[512];
    rc = pt_rundir_lock_text(cfg->run.dir, lock_here, sizeof lock_here, &err);
    memcpy(lock_root, lock_here, sizeof lock_root);
    int64_t root_rc = rc; /* whether rank 0 read its own lock */
    int got = pt_bcast(pt_comm_world(comm), &root_rc, sizeof root_rc, 0, &err);
    if (!got)
        got = pt_bcast(pt_comm_world(comm), lock_root, sizeof lock_root, 0, &err);
    if (rc == 0 && got)
        rc = got;
    /* rank 0 could not read its lock: it says why, and there is nothing
     * to compare; a refusal names this rank's host, whose view of run.dir
     * differs */
    const char *host = pt_comm_host(comm);
    if (rc == 0 && root_rc == 0 && strcmp(lock_here, lock_root) != 0)
        rc = pt_config_key_fail(cfg, &err, "run.dir",
                                "'%s' is not the directory rank 0 locked for this job (its lock "
                                "says '%.200s' here, on host '%.100s', '%.200s' on rank 0); every "
                                "rank must see one run.dir, on a file system the nodes share",
                                cfg->run.dir, lock_here, host, lock_root);
    else if (rc == PT_EINPUT && !got) {
        if (pt_comm_rank(comm) != 0) { /* rank 0's lock, unseen here */
            char why[sizeof err.msg];
            snprintf(why, sizeof why, "%s", err.msg);
            pt_fail(&err, PT_EINPUT, "%.900s on host '%.100s' (rank 0 locked it: every rank must "
                    "see one run.dir, on a file system the nodes share)", why, host);
        }
        pt_config_key_prefix(cfg, &err, "run.dir");
    }
    /* and may write there: a node that mounts it read-only would fail at the
     * first checkpoint of a unit it holds, steps or hours in (or only after
     * a re-plan moves a unit of the first replica there) */
    if (rc == 0 && (rc = pt_rundir_check_writable(cfg->run.dir, &err)) == PT_EINPUT)
        pt_config_key_prefix(cfg, &err, "run.dir");
    /* every rank's logs, under the lock: a job refused before it or for it
     * never opens the logs of the job that holds it, so a refusal's undo of
     * the empty logs it made cannot take that job's */
    if (rc == 0)
        rc = pt_session_open_logs(s, &err);
    if ((rc = setup_failed(comm, rc, &err)))
        goto refused;
    /* (the test hook: a test changes run.dir's checkpoints here) */
    if ((rc = pt_test_fault("settling", pt_comm_rank(comm), 0, &err)) == 0)
        rc = pt_session_cut_logs(s, &err); /* under the lock */
    if (rc == 0 && pt_comm_rank(comm) == 0) {
        /* a start killed while it wrote RUN_DIR/resuming left its temporary */
        char marker[PT_PATH_MAX + 16];
        snprintf(marker, sizeof marker, "%s/resuming", cfg->run.dir);
        pt_output_sweep(marker);
        pt_rundir_sweep_abandoned(cfg->run.dir);
    }
    if (rc != 0 || pt_comm_rank(comm) != 0) {
        /* a failure is reported below, after the others learn of it; the
         * checkpoint to resume is rank 0's to find (a node whose view of
         * run.dir lags would otherwise enter the load's collectives alone) */
    } else if (strcmp(cfg->train.resume, "auto") == 0) {
        pt_err none;
        if ((rc = pt_rundir_resuming_get(cfg->run.dir, resume, sizeof resume, &err))) {
            pt_config_key_prefix(cfg, &err, "train.resume");
        } else if (*resume) {
            char said[2 * sizeof resume + PT_PATH_MAX + 256];
            if (pt_rundir_resuming_own(cfg->run.dir, resume))
                snprintf(said, sizeof said, "an earlier start in %s went back to its %s and stopped "
                         "before all later checkpoints moved to its abandoned/ (%s/resuming names "
                         "it): going back to it again", cfg->run.dir, resume, cfg->run.dir);
            else
                snprintf(said, sizeof said, "an earlier start in %s resumed from %s and stopped "
                         "before saving it there (%s/resuming names it; any checkpoints of that "
                         "run.dir's own that it left are in its abandoned/): resuming from it "
                         "again",
                         cfg->run.dir, resume, cfg->run.dir);
            error_line("pipetrain: note: ", said, sizeof said);
        } else if ((rc = pt_checkpoint_readable(cfg->run.dir, &err))) {
            pt_config_key_prefix(cfg, &err, "run.dir"); /* not a fresh start over it */
        } else if (pt_checkpoint_latest(cfg->run.dir, resume, sizeof resume, &none) != 0) {
            const int64_t step = pt_checkpoint_passed_over(cfg->run.dir, NULL);
            char unfinished[PT_PATH_MAX + 160] = "";
            if (step >= 0)
                snprintf(unfinished, sizeof unfinished, " (%s/checkpoints/step_%010lld is not a "
                         "complete checkpoint: a save that did not finish, or a damaged manifest)",
                         cfg->run.dir, (long long)step);
            char said[sizeof unfinished + PT_PATH_MAX + 64];
            snprintf(said, sizeof said, "no checkpoint in %s yet%s; starting fresh", cfg->run.dir,
                     unfinished);
            error_line("pipetrain: ", said, sizeof said); /* run.dir's bytes escaped */
        } else
            passed_over(cfg->run.dir, resume);
    } else if (*cfg->train.resume) {
        snprintf(resume, sizeof resume, "%s", cfg->train.resume);
        /* named before its load, which can take minutes: a start killed in
         * it leaves `auto` this checkpoint, not an empty run.dir */
        pt_rundir_resuming_early(cfg->run.dir, resume, &resuming_was);
    } else if (pt_checkpoint_latest(cfg->run.dir, resume, sizeof resume, &err) == 0) {
        rc = pt_fail(&err, PT_EINPUT,
                     "run.dir '%s' already holds checkpoints (newest: %s); resume with "
                     "--set train.resume=auto or choose another run.dir",
                     cfg->run.dir, resume);
    }
    /* every rank learns whether all went well, and which checkpoint rank 0
     * chose; the load is collective over the world */
    if ((rc = pt_run_agree(&s->run, rc, &err)) == 0)
        rc = pt_bcast(pt_comm_world(comm), resume, sizeof resume, 0, &err);
    /* the tokenizer was set up from `planned`: another checkpoint came since.
     * `planned` is each rank's own reading of run.dir (one whose view lags,
     * or that looked just before a save landed, found another), so whether
     * it differs is this rank's alone: every rank enters the agreement */
    if (rc == 0)
        rc = pt_run_agree(&s->run,
                          strcmp(resume, planned) != 0 ? pt_session_check_normalize(s, resume, &err) : 0,
                          &err);
    /* and the layout was planned from it too (its frozen blocks) */
    if (rc == 0 && (rc = pt_run_check_start(&s->run, *resume != 0, &err)))
        pt_err_prefix(&err, "run.dir '%s'", cfg->run.dir);
    if (rc == 0 && !*resume)
        rc = pt_session_load_pending_init(s, &err);
    if (rc == 0 && *resume) {
        pt_comm_phase("starting up: reading the checkpoint to resume");
        const pt_ckpt_run c = pt_session_ckpt(s);
        /* held against another run's pruning while it is read (that run
         * may still train: a resume of its step) */
        pt_ckpt_hold hold;
        const int held = pt_checkpoint_hold(&hold, resume);
        /* (the test hook: a start killed while it loads) */
        if ((rc = pt_test_fault("loading", pt_comm_rank(comm), 0, &err)) == 0)
            rc = pt_checkpoint_load(&c, resume, &err);
        if (held)
            pt_checkpoint_release(&hold);
        pt_comm_phase("starting up");
    }
    /* only a run that trains writes into run.dir (a refused resume leaves it as it was) */
    if (rc == 0 && (rc = pt_session_write_profile(s, &err)) == PT_EINPUT)
        pt_config_key_prefix(cfg, &err, "run.dir"); /* a link or hard link at its profile.json */
    /* last: a run refused before this leaves run.dir's checkpoints as they were */
    if (rc == 0 && *resume && pt_comm_rank(comm) == 0) {
        char moved[PT_CKPT_PATH] = "";
        int count = 0, foreign = 0;
        /* until another directory's checkpoint is saved here (the loop's
         * first save), run.dir's newest would be of the history it leaves:
         * RUN_DIR/resuming names it for a later auto resume */
        rc = pt_rundir_resume_from(cfg->run.dir, resume, s->run.step, &foreign, moved, sizeof moved,
                                   &count, &err);
        if (rc == 0) /* the file now says what this start did */
            pt_rundir_resuming_keep(&resuming_was);
        if (rc == 0 && count)
            snprintf(s->abandoned_to, sizeof s->abandoned_to, "%s", moved);
        int64_t branch;
        if (rc == 0 && count && foreign &&
            pt_rundir_abandoned_branch(cfg->run.dir, resume, &branch) && branch < s->run.step)
            fprintf(stderr, "pipetrain: note: resuming step %lld of a history this run.dir left "
                    "after its step %lld (in its abandoned/), where it holds %d checkpoint%s after "
                    "step %lld (the history that replaced it, or copies of that history's own "
                    "steps from an earlier resume of it: this run leaves them): moved to %s\n",
                    (long long)s->run.step, (long long)branch, count, count == 1 ? "" : "s",
                    (long long)branch, moved);
        else if (rc == 0 && count && foreign)
            fprintf(stderr, "pipetrain: note: resuming step %lld from another directory's "
                    "checkpoint in a run.dir that holds %d checkpoint%s of its own (a history "
                    "this run leaves, not the one it resumes): moved to %s\n",
                    (long long)s->run.step, count, count == 1 ? "" : "s", moved);
        else if (rc == 0 && count)
            fprintf(stderr, "pipetrain: note: resuming step %lld of a run.dir that holds %d later "
                    "checkpoint%s (a history this run leaves): moved to %s\n",
                    (long long)s->run.step, count, count == 1 ? "" : "s", moved);
    } else if (rc == 0 && pt_comm_rank(comm) == 0) {
        /* a fresh start's history is its own: a file left would take a
         * later `auto` to the checkpoint it names */
        rc = pt_rundir_resuming_clear(cfg->run.dir, &err);
    }
    if ((rc = setup_failed(comm, rc, &err)))
        goto refused;
    pt_rundir_resuming_keep(&resuming_was); /* (nothing left: a resume of run.dir's own) */
    note_unused_keys(comm, cfg, *resume != '\0');
    if (!*resume && s->rank == 0) /* a resume's weights are the checkpoint's */
        pt_init_from_notes(&s->cfg, 1);
    snprintf(s->resumed_from, sizeof s->resumed_from, "%s", resume);
    rc = pt_session_train(s, &err);
    pt_comm_phase("finishing the run");
    if (rc && rc != PT_ESTOPPED && err.relayed) {
        rc = exit_code(rc); /* the failed rank reports, and ends the job */
        goto done;
    }
    if (rc && rc != PT_ESTOPPED) {
        int code = report(comm, rc, &err);
        /* a failure the ranks agreed on (a checkpoint some ranks could not
         * write) ends every rank here without an abort: several ranks
         * aborting at once could crash mpirun itself */
        if (pt_comm_size(comm) > 1 && !err.agreed) {
            /* the abort ends every rank without closing anything: the
             * node's cache goes once the last of them is gone */
            pt_cache_release_names();
            pt_comm_abort(comm, code); /* the others may be waiting for this rank */
        }
        rc = code;
        goto done;
    }
    rc = exit_code(rc);
    goto done;
refused:
    /* a refused start leaves run.dir as it found it: with every rank's
     * files closed (or its rank no longer answering), rank 0 takes back the
     * empty logs that were not there when it took the lock (under the lock,
     * so this job's), what taking the lock made or changed, and the
     * directories of run.dir's path this start made, now empty (a job that
     * made its lock in them since keeps them; one about to makes them
     * again). Where the lock was not taken (another job holds it, or the
     * lock file could not be made), only those directories: a start makes
     * nothing in run.dir before its lock */
    /* (by their names: only while run.dir is still the directory locked,
     * not one put in its place, moved or made anew, where another job's
     * files may be) */
    pt_err ignored = {0};
    const int still_locked = lock.fd >= 0 && pt_rundir_lock_check(&lock, cfg->run.dir, &ignored) == 0;
    if (still_locked)
        pt_rundir_resuming_undo(cfg->run.dir, &resuming_was);
    else
        pt_rundir_resuming_keep(&resuming_was); /* (what it kept, freed) */
    pt_session_close(s);
    pt_barrier(pt_comm_world(comm), &ignored);
    if (pt_comm_rank(comm) == 0) {
        if (still_locked)
            pt_rundir_logs_undo(cfg->run.dir, &logs_there);
        pt_rundir_lock_undo(&lock, cfg->run.dir);
        /* the highest level this start made: by the session, or by the
         * lock's taking when run.dir went in between */
        pt_rmdir_made(cfg->run.dir, pt_made_either(run_dir_made, lock.made));
    }
done:
    pt_session_close(s);
    free(s);
    pt_rundir_logs_free(&logs_there);
    pt_rundir_lock_release(&lock);
    return rc;
}

static int cmd_eval(pt_comm *comm, const cli *a)
{
    pt_err err = {0};
    pt_session *s = calloc(1, sizeof *s);
    if (!s)
        return setup_failed(comm, pt_fail(&err, PT_ENOMEM, "out of memory"), &err);
    const pt_config *cfg = &a->cfg;
    char latest[PT_PATH_MAX + 64];
    const char *checkpoint = a->checkpoint;
    float *logits = NULL, *hidden = NULL;
    int rc = 0;
    /* while this reads the checkpoint, a run training in its run.dir does not
     * prune it */
    pt_ckpt_hold hold = {-1};
    if (!checkpoint && !a->init) {
        /* rank 0's newest checkpoint, for every rank (a node whose view of
         * run.dir lags must not read another, or none); again if a run
         * training there pruned it before it was held */
        if (pt_comm_rank(comm) == 0) {
            for (int tries = 0; tries < 50; tries++) {
                rc = pt_checkpoint_latest(cfg->run.dir, latest, sizeof latest, &err);
                if (rc == 0 && pt_checkpoint_hold(&hold, latest))
                    break;
                /* a scan that met a save and a pruning halfway finds none:
                 * look again while a run trains there */
                if (rc && (!pt_rundir_in_use(cfg->run.dir) || tries == 49))
                    break;
                nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
            }
            char said[3 * PT_CKPT_PATH + 256];
            if (rc == 0) {
                passed_over(cfg->run.dir, latest);
                note_resuming(cfg->run.dir, latest);
            } else if (rc == PT_EINPUT && pt_rundir_resuming_instead(cfg->run.dir, latest,
                                                                     sizeof latest, said,
                                                                     sizeof said)) {
                /* none of its own (they moved to abandoned/), and the
                 * checkpoint a start resumed not saved yet: as auto takes it */
                rc = 0;
                fprintf(stderr, "pipetrain: note: %s\n", said);
                pt_checkpoint_hold(&hold, latest);
            } else if (rc == PT_EINPUT) /* where eval looked: the config's run.dir */
                pt_config_key_prefix(cfg, &err, "run.dir");
        }
        if ((rc = setup_failed(comm, rc, &err)) ||
            (rc = setup_failed(comm, pt_bcast(pt_comm_world(comm), latest, sizeof latest, 0, &err),
                               &err)))
            goto done;
        checkpoint = latest;
    }
    if (checkpoint && hold.fd < 0)
        pt_checkpoint_hold(&hold, checkpoint); /* no manifest: the read says so */
    /* of a checkpoint: without model.init_from, which it does not read
     * (read_config); large, so not on the stack (one eval a process) */
    static pt_config opened;
    opened = *cfg;
    if (checkpoint)
        opened.model.init_from[0] = '\0';
    rc = pt_session_open(s, comm, &opened, PT_RUN_EVAL, checkpoint, &err);
    if (rc == 0 && checkpoint) {
        const pt_ckpt_run c = pt_session_ckpt(s);
        rc = pt_checkpoint_load_weights(&c, checkpoint, &err);
    }
    if (rc == 0 && !checkpoint && s->rank == 0)
        pt_init_from_notes(&s->cfg, 0);
    if (!checkpoint) /* --init: what pt_session_open set up */
        checkpoint = *cfg->model.init_from ? "none (the initial weights, model.init_from)"
                                           : "none (the initial weights, seeded)";
    if ((rc = setup_failed(comm, rc, &err)))
        goto done;
    note_set_twice(comm, cfg);
    pt_run *run = &s->run;
    pt_eval_result ev = {0};
    const int64_t rows = s->test.count * pt_arch_rows_per_example(&run->arch);
    const int classes = pt_arch_out_classes(&run->arch);
    const int64_t T = pt_arch_tokens(&run->arch), d = run->arch.dim;
    /* replica 0's last stage keeps the outputs and writes them: it finds
     * out now, not after the evaluation, whether it can */
    const int writes = pt_run_last_stage(run) && run->replica == 0;
    char init_weights[PT_PATH_MAX + 32], init_config[PT_PATH_MAX + 32], init_vocab[PT_PATH_MAX + 32];
    char tokenizer_config[PT_PATH_MAX + 32], init_tokenizer[PT_PATH_MAX + 32];
    pt_init_from_files(cfg, init_weights, init_config, init_vocab, init_tokenizer);
    pt_tokenizer_config_path(cfg, tokenizer_config);
    const char *inputs[] = {cfg->source, cfg->model.init_from, init_weights, init_config,
                            init_vocab, init_tokenizer, tokenizer_config, cfg->data.train_images,
                            cfg->data.train_labels, cfg->data.test_images, cfg->data.test_labels,
                            cfg->data.text, cfg->data.train_file, cfg->data.test_file,
                            cfg->data.vocab, cfg->pipeline.profile};
    const int n_inputs = (int)(sizeof inputs / sizeof inputs[0]);
    const char *read_ckpt = a->init ? NULL : checkpoint;
    char ckpt_run[2 * PT_PATH_MAX] = "";
    if (read_ckpt)
        pt_output_run_of_checkpoint(read_ckpt, ckpt_run, sizeof ckpt_run);
    const char *opts[3] = {"--logits", "--hidden", "--report"}, *outs[3] = {a->logits, a->hidden, a->report};
    for (int k = 0; k < 3; k++)
        if (writes && outs[k] && rc == 0 &&
            (rc = pt_output_not_input(opts[k], outs[k], read_ckpt, inputs, n_inputs, &err)) == 0 &&
            (rc = pt_output_not_in_run(opts[k], outs[k], cfg->run.dir, &err)) == 0)
            rc = pt_output_not_in_run(opts[k], outs[k], ckpt_run, &err);
    if (writes && a->logits && rc == 0)
        rc = pt_output_probe("--logits", a->logits, PT_OUTPUT_SAFETENSORS, &err);
    if (writes && a->hidden && rc == 0)
        rc = pt_output_probe("--hidden", a->hidden, PT_OUTPUT_SAFETENSORS, &err);
    if (writes && a->report && rc == 0)
        rc = pt_output_probe("--report", a->report, PT_OUTPUT_JSON, &err);
    if (writes && a->logits && rc == 0 && !(logits = malloc((size_t)rows * classes * sizeof *logits)))
        rc = pt_fail(&err, PT_ENOMEM, "out of memory for %lld rows of logits", (long long)rows);
    if (writes && a->hidden && rc == 0 &&
        !(hidden = malloc((size_t)s->test.count * T * d * sizeof *hidden)))
        rc = pt_fail(&err, PT_ENOMEM, "out of memory for the hidden states of %lld test examples (%.0f MiB)",
                     (long long)s->test.count, (double)s->test.count * T * d * 4 / (1 << 20));
    pt_comm_phase("evaluating the test split");
    if ((rc = pt_run_agree(run, rc, &err)) == 0)
        rc = pt_evaluate(run, 0, a->logits || a->hidden, logits, hidden, &ev, &err);
    if (rc && pt_comm_size(comm) > 1 && !err.agreed) {
        /* this rank's own failure in a round of the evaluation, which it
         * returned from at once: the others wait in that round (for its
         * transfers, or its agreement), and an agreement here would pair
         * with theirs and leave them waiting in the next until
         * run.timeout_s. It reports and ends the job, as train's step does. */
        const int code = report(comm, rc, &err);
        pt_comm_abort(comm, code);
        rc = code;
        goto done;
    }
    pt_comm_phase("finishing");
    /* weights that are finite but overflow float32 on the way (a tampered
     * or diverged model) give NaN or Inf logits: no accuracy is made up
     * from them and nothing is written (the loss is every rank's) */
    if (rc == 0 && !isfinite(ev.loss))
        rc = pt_fail(&err, PT_EINPUT,
                     "the test loss is %g: the model's outputs are not finite (weights of checkpoint "
                     "%s too large for float32 arithmetic); no accuracy is reported and no output "
                     "written", ev.loss, checkpoint);
    if (rc == 0 && logits) {
        const int64_t shape[2] = {rows, classes};
        const pt_st_tensor t = {"logits", 2, shape, logits};
        rc = pt_st_write(a->logits, &t, 1, NULL, &err);
    }
    if (rc == 0 && hidden) {
        const int64_t shape[3] = {s->test.count, T, d};
        const pt_st_tensor t = {"hidden", 3, shape, hidden};
        rc = pt_st_write(a->hidden, &t, 1, NULL, &err);
    }
    if (rc == 0 && writes && a->report)
        rc = pt_report_write(a->report, s, checkpoint, &ev, &err);
    if ((rc = pt_run_agree(run, rc, &err)) == 0 && pt_comm_rank(comm) == 0) {
        printf("checkpoint %s\ntest loss %.4f\ntest accuracy %.2f%%\nexamples %lld\n", checkpoint,
               ev.loss, 100.0 * ev.accuracy, (long long)ev.examples);
        if (ev.confusion)
            pt_report_print(s, &ev);
    }
    if (rc == 0 && run->arch.kind == PT_MODEL_GPT && cfg->sample.length > 0) {
        char text[4097];
        int len = cfg->sample.length < 4096 ? cfg->sample.length : 4096;
        if ((rc = pt_sample_text(run, cfg->sample.prompt, len, cfg->sample.temperature,
                                 cfg->sample.top_k, (uint64_t)cfg->run.seed, text, &err)) == 0 &&
            pt_comm_rank(comm) == 0) {
            char shown[4 * (sizeof cfg->sample.prompt + sizeof text) + 1];
            pt_session_show_sample(cfg->sample.prompt, text, (size_t)len, shown, sizeof shown);
            printf("sample: %s\n", shown);
        }
    }
    if (rc && err.relayed) {
        rc = exit_code(rc); /* the failed rank reports, and ends the job */
    } else if (rc) {
        int code = report(comm, rc, &err);
        if (pt_comm_size(comm) > 1 && !err.agreed) /* as train's */
            pt_comm_abort(comm, code);
        rc = code;
    }
    pt_eval_result_free(&ev);
done:
    pt_checkpoint_release(&hold);
    free(logits);
    free(hidden);
    pt_session_close(s);
    free(s);
    return rc;
}

static int cmd_plan(pt_comm *comm, const cli *a)
{
    pt_err err = {0};
    pt_session *s = calloc(1, sizeof *s);
    if (!s)
        return setup_failed(comm, pt_fail(&err, PT_ENOMEM, "out of memory"), &err);
    /* a config that train would resume is planned as that resume: for the
     * checkpoint's frozen blocks, from the measurements it carries */
    char planned[PT_PATH_MAX + 64];
    resume_planned(&a->cfg, planned, sizeof planned);
    /* a RUN_DIR/resuming that train.resume=auto refuses (damaged, empty, a
     * FIFO, naming a checkpoint gone since): train would stop there, so
     * plan says so, as eval and inspect do, and plans from run.dir's newest */
    char why[PT_PATH_MAX + 64];
    pt_err quiet = {0};
    if (pt_comm_rank(comm) == 0 && strcmp(a->cfg.train.resume, "auto") == 0 &&
        pt_rundir_resuming_get(a->cfg.run.dir, why, sizeof why, &quiet) != 0)
        fprintf(stderr, "pipetrain: note: train.resume=auto refuses this run.dir: %s; planned %s%s\n",
                quiet.msg, *planned ? "as a resume of run.dir's newest, " : "as a fresh start",
                planned);
    /* where the run's files would go, as train checks it (not whether run.dir
     * can be made, which only making it tells) */
    int rc = setup_failed(comm, pt_output_run_placement(&a->cfg, pt_comm_rank(comm) == 0, &err), &err);
    if (rc == 0)
        rc = setup_failed(comm, pt_session_open(s, comm, &a->cfg, PT_RUN_PLAN, planned, &err), &err);
    if (rc == 0) {
        /* the notes train would give (a resume reads other keys, and takes
         * its weights from the checkpoint, not model.init_from) */
        note_unused_keys(comm, &a->cfg, *planned != '\0');
        if (!*planned && s->rank == 0)
            pt_init_from_notes(&s->cfg, 1);
        /* every rank's binding, in rank order */
        const int ranks = pt_comm_size(comm);
        char(*all)[sizeof s->binding] = calloc((size_t)ranks, sizeof *all);
        rc = setup_failed(comm, all ? 0 : pt_fail(&err, PT_ENOMEM, "out of memory"), &err);
        if (rc == 0 && (rc = pt_allgather(pt_comm_world(comm), s->binding, all, sizeof s->binding, &err)))
            rc = report(comm, rc, &err);
        if (rc == 0 && pt_comm_rank(comm) == 0) {
            for (int k = 0; k < ranks; k++)
                printf("rank %d: %.*s\n", k, (int)sizeof *all, all[k]);
            pt_layout_print(&s->run, stdout);
        }
        free(all);
    }
    pt_session_close(s);
    free(s);
    return rc;
}

static int cmd_inspect(int argc, char **argv)
{
    int config = 0;
    const char *dir = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && !config)
            config = 1;
        else if (strcmp(argv[i], "--config") == 0)
            return usage_error("inspect: --config given twice%s", "");
        else if (argv[i][0] == '-' && argv[i][1])
            return usage_error("inspect: unknown option '%s'", argv[i]);
        else if (dir)
            return usage_error("inspect takes one checkpoint or run directory, got also '%s'",
                               argv[i]);
        else
            dir = argv[i];
    }
    if (!dir)
        return usage_error("inspect takes a checkpoint directory or a run directory%s", "");
    pt_err err = {0};
    int rc = pt_cli_path_ok("inspect: DIR", dir, &err);
    if (rc == 0)
        rc = pt_inspect(dir, config, &err);
    return rc ? report(NULL, rc, &err) : 0;
}

static int cmd_export(int argc, char **argv)
{
    /* an option among them named (--set, say: export reads no config) */
    for (int i = 2; argc != 4 && i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1])
            return usage_error("export takes a checkpoint directory and an output file, and no "
                               "options: got '%s'", argv[i]);
    if (argc != 4)
        return usage_error("export takes a checkpoint directory and an output file%s", "");
    /* `export CK --help` wrote a file named --help: an option is no path
     * here (./-name is one, for whoever means it) */
    for (int i = 2; i < 4; i++)
        if (argv[i][0] == '-' && argv[i][1])
            return usage_error("export takes no options, got '%s' (a path that starts with '-': "
                               "write it as ./-name)", argv[i]);
    pt_err err = {0};
    int rc = pt_cli_path_ok("export: CHECKPOINT_DIR", argv[2], &err);
    if (rc == 0)
        rc = pt_cli_path_ok("export: OUT", argv[3], &err);
    if (rc == 0)
        rc = pt_export(argv[2], argv[3], PT_VERSION, &err);
    return rc ? report(NULL, rc, &err) : 0;
}

/* A stop signal can come as soon as the process exists (mpirun forwards
 * one the moment it gets it), and before main the libraries' constructors
 * run for some milliseconds: a SIGUSR1 or SIGTERM then would end `train`
 * by the default action, not with a checkpoint and 130. The executable's preinit functions run before any
 * library's constructor, and glibc passes them main's arguments; the
 * handler touches only its own static variables, set up by then. */
static void catch_stop_signals_early(int argc, char **argv, char **envp)
{
    /* a standard descriptor the parent closed (`2>&-`) would be the number
     * the next open gets: train's progress lines went into metrics.jsonl or
     * over the run's lock. Each closed one is /dev/null: stdin and stdout
     * read-only (a result printed to a closed stdout still fails, and is
     * reported), stderr write-only (messages to nowhere, as asked). */
    for (int fd = 0; fd <= 2; fd++) /* open gives the lowest free number: fd (those below are open) */
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
            open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY) < 0)
            break;
    if (argc > 2 && argv && argv[1] && strcmp(argv[1], "train") == 0)
        pt_catch_stop_signals();
    /* A rank's parent is its launcher's daemon (mpirun on its own node,
     * orted, slurmstepd, a Hydra proxy). When that is SIGKILLed the ranks
     * go on as orphans until Open MPI's progress thread ends them with
     * _exit, which skips every cleanup: the node's cache segment and its
     * disk file stayed until the next start's sweep. SIGTERM when the parent
     * dies takes the names off at once (a train also stops after the step,
     * saving, while the ranks still reach each other). Only under a
     * launcher: a run started by hand may outlive its shell (nohup). */
    if (pt_comm_launched_in(envp)) {
        const pid_t parent = getppid();
        pt_stop_signals_launcher(parent);
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent)
            raise(SIGTERM); /* it died before the request */
    }
}
__attribute__((used, section(".preinit_array"))) static void (*const early_stop_signals)(
    int, char **, char **) = catch_stop_signals_early;

static int run_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    const int help = strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0;
    if ((help || strcmp(cmd, "--version") == 0) && argc > 2)
        return usage_error(help ? "--help takes no arguments, got '%s'"
                                : "--version takes no arguments, got '%s'", argv[2]);
    if (help) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("pipetrain %s\n", PT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "keys") == 0) {
        if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            fputs(usage, stdout); /* as for the other commands */
            return 0;
        }
        if (argc > 2)
            return usage_error("keys takes no arguments, got '%s'", argv[2]);
        pt_config_print_keys(stdout);
        return 0;
    }
    if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0) &&
        (strcmp(cmd, "train") == 0 || strcmp(cmd, "eval") == 0 || strcmp(cmd, "plan") == 0 ||
         strcmp(cmd, "export") == 0 || strcmp(cmd, "inspect") == 0)) {
        fputs(usage, stdout); /* `pipetrain train --help`: the usage, not a config named --help */
        return 0;
    }
    if (strcmp(cmd, "export") == 0) {
        pt_catch_end_signals();
        return cmd_export(argc, argv);
    }
    if (strcmp(cmd, "inspect") == 0)
        return cmd_inspect(argc, argv);
    int (*run_cmd)(pt_comm *, const cli *) = strcmp(cmd, "train") == 0  ? cmd_train
                                            : strcmp(cmd, "eval") == 0 ? cmd_eval
                                            : strcmp(cmd, "plan") == 0 ? cmd_plan
                                                                       : NULL;
    if (!run_cmd)
        return usage_error("unknown command '%s'", cmd);
    if (argc < 3)
        return usage_error("%s needs a config file", cmd);
    /* before MPI starts: mpirun forwards a stop signal as soon as it gets it */
    if (run_cmd == cmd_train)
        pt_catch_stop_signals();
    pt_err err = {0};
    cli *a = calloc(1, sizeof *a); /* large: keep it off the stack */
    if (!a) {
        pt_fail(&err, PT_ENOMEM, "out of memory reading the config");
        return report(NULL, err.code, &err);
    }
    a->command = cmd;
    /* The config is read before MPI starts: its run.timeout_s bounds the
     * start. One process started by hand refuses a config that does not
     * read at once (MPI's start is most of such a run's time), with the
     * message rank 0 would give after it. Under a launcher every rank
     * reports after the start, so that all of them end alike. */
    int rc = read_config(argc, argv, a, run_cmd == cmd_eval, &err);
    if (!pt_comm_launched() && (rc || (rc = pt_config_has_settings(&a->cfg, &err)))) {
        free(a);
        return report(NULL, rc, &err);
    }
    pt_comm *comm;
    pt_err open_err = {0};
    const int open_rc = pt_comm_open(&comm, &argc, &argv, a->cfg.run.timeout_s, &open_err);
    if (open_rc) {
        free(a);
        return report(NULL, open_rc, &open_err);
    }
    pt_comm_phase("starting up");
    if (run_cmd != cmd_train) /* after MPI's start, whose handlers these replace */
        pt_catch_end_signals();
    if (pt_comm_local_rank(comm) == 0) /* dead jobs' cache segments, at every start */
        pt_cache_sweep(NULL);
    int code = setup_failed(comm, rc, &err);
    if (code == 0)
        code = setup_failed(comm, same_config(comm, a, &err), &err);
    if (code == 0) /* every rank read the same: an empty one everywhere */
        code = setup_failed(comm, pt_config_has_settings(&a->cfg, &err), &err);
    if (code == 0 && run_cmd == cmd_train)
        code = setup_failed(comm, umask_ok(&err), &err);
    if (code == 0) {
        /* from here every wait, the start-up's included, is run.timeout_s long */
        pt_group_set_timeout(pt_comm_world(comm), a->cfg.run.timeout_s);
        pt_group_set_timeout(pt_comm_node_group(comm), a->cfg.run.timeout_s);
        code = setup_failed(comm, pt_test_fault("start-up", pt_comm_rank(comm), 0, &err), &err);
    }
    if (code == 0) {
        code = run_cmd(comm, a);
    }
    free(a);
    /* the job ends within run.timeout_s of its last rank's work: a rank
     * that stopped answering after the last collective (past the last
     * evaluation and checkpoint) is named a failure, not waited for */
    pt_comm_phase("ending the job (every rank done)");
    pt_err end = {0};
    const int ended = pt_comm_finish(comm, &end);
    if (ended) {
        const int failed = report(comm, ended, &end);
        pt_comm_abort(comm, code ? code : failed);
    }
    (void)pt_test_fault("ended", pt_comm_rank(comm), 0, &end); /* a hang there, for the tests */
    pt_comm_close(comm, code);
    return code;
}

/* The main thread's stack grows up to RLIMIT_STACK as it is used (the
 * kernel checks the limit then), and some paths (a resume cutting its logs,
 * parsing) need more than a very small `ulimit -s` gives: raise the soft
 * limit to MIN_STACK where the hard one allows, else refuse to start with a
 * message rather than die of a segmentation fault later. The pool's workers
 * have stacks of their own size (nn/cpu_pool.c). */
enum { MIN_STACK = 128 << 10 };
static int enough_stack(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= MIN_STACK)
        return 1;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= MIN_STACK) {
        rl.rlim_cur = MIN_STACK;
        if (setrlimit(RLIMIT_STACK, &rl) == 0)
            return 1;
    }
    /* Said with write(2), not fprintf: stdio prints to the unbuffered stderr
     * through an 8 KiB buffer on the stack, more than a stack of 16-22 KiB
     * has left (with the environment on it, at a random offset), which made
     * this refusal a segmentation fault in about half of the starts. */
    char kib[24], *k = kib + sizeof kib;
    unsigned long long v = (unsigned long long)(rl.rlim_cur >> 10);
    *--k = '\0';
    do
        *--k = (char)('0' + v % 10);
    while ((v /= 10) && k > kib);
    const char *parts[] = {"pipetrain: error: the stack size limit (ulimit -s) is ", k,
                           " KiB and cannot be raised to the 128 KiB pipetrain needs; raise it\n"};
    _Static_assert(MIN_STACK == 128 << 10, "the message names MIN_STACK");
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        for (size_t at = 0, n = strlen(parts[i]); at < n;) {
            const ssize_t w = write(STDERR_FILENO, parts[i] + at, n - at);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            at += (size_t)w;
        }
    return 0;
}

int main(int argc, char **argv)
{
    if (!enough_stack())
        return 1;
#ifdef __GLIBC__
    /* large blocks mapped on their own and unmapped when freed, always:
     * glibc's threshold otherwise rises to the largest block freed, and the
     * units' timing before planning (blocks of every unit at two sizes,
     * made and freed in turn) left the heap holding freed memory under the
     * layout's buffers, 6 MiB past pipeline.memory_gib on a 512-wide ViT */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    /* a file-size limit (ulimit -f): a write past it fails with EFBIG, which
     * every writer reports naming its file (a checkpoint, a log, an export)
     * and cleans up after, rather than SIGXFSZ ending the process with
     * nothing said; a handler someone installed stays */
    struct sigaction xfsz;
    if (sigaction(SIGXFSZ, NULL, &xfsz) == 0 && !(xfsz.sa_flags & SA_SIGINFO) &&
        xfsz.sa_handler == SIG_DFL)
        signal(SIGXFSZ, SIG_IGN);
    /* (train's own handlers, with its message, are in place before main) */
    if (!(argc > 2 && strcmp(argv[1], "train") == 0))
        pt_catch_bus_error();
    int code = run_main(argc, argv);
    /* what was printed must reach stdout where it is the result: eval's
     * figures or plan's layout lost to a full disk are a failure, not a
     * success (train's and export's results are files; their stdout may be
     * closed) */
    const int result_on_stdout =
        !(argc > 1 && (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "export") == 0));
    const int e = fflush(stdout) != 0 ? errno : 0;
    if ((e || ferror(stdout)) && code == 0 && result_on_stdout) {
        fprintf(stderr, "pipetrain: error: cannot write to stdout%s%s\n", e ? ": " : "",
                e ? strerror(e) : "");
        code = 1;
    }
    return code;
}
