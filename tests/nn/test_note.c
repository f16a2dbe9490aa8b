/*
 * test_note.c: pt_note (nn/nn.h), the note of where the code is that a
 * signal handler prints.
 *
 *  - basics: each note goes to the buffer not published last and is
 *    published in the slot (none with a NULL slot); is_published tells the
 *    note's strings from others; a note longer than a buffer is cut and
 *    ends in a 0;
 *  - whole under signals: a thread rewrites a note as fast as it can,
 *    each note a line that checks itself (its number at both ends, a run
 *    of one letter between, of a length that changes with the number),
 *    while another thread interrupts it with a signal thousands of times;
 *    the handler reads the slot and checks the line. A note written in
 *    place (one buffer) is read half written at some of those moments;
 *    pt_note's never.
 */
#include "nn/nn.h"
#include "tests/common/cunit_main.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void basics(void)
{
    pt_note n;
    memset(&n, 0, sizeof n);
    const char *volatile slot = "before";
    const char *a = pt_note_printf(&n, &slot, "first %d", 1);
    CU_ASSERT_STRING_EQUAL(a, "first 1");
    CU_ASSERT_PTR_EQUAL(slot, a);
    CU_ASSERT_TRUE(pt_note_is_published(&n, &slot));
    const char *b = pt_note_printf(&n, &slot, "second %s", "note");
    CU_ASSERT_PTR_NOT_EQUAL(a, b); /* the other buffer */
    CU_ASSERT_PTR_EQUAL(slot, b);
    CU_ASSERT_STRING_EQUAL(a, "first 1"); /* the one published before is untouched */
    const char *c = pt_note_printf(&n, &slot, "third");
    CU_ASSERT_PTR_EQUAL(c, a); /* and back */
    CU_ASSERT_STRING_EQUAL(b, "second note");
    /* no slot: written, not published */
    const char *d = pt_note_printf(&n, NULL, "fourth");
    CU_ASSERT_STRING_EQUAL(d, "fourth");
    CU_ASSERT_PTR_EQUAL(slot, c);
    CU_ASSERT_FALSE(pt_note_is_published(&n, NULL));
    /* another string in the slot */
    pt_note_publish(&slot, "elsewhere");
    CU_ASSERT_STRING_EQUAL(slot, "elsewhere");
    CU_ASSERT_FALSE(pt_note_is_published(&n, &slot));
    pt_note_publish(NULL, "nowhere"); /* no slot: nothing to do */
    /* too long: cut, the buffer's last byte still 0 */
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *e = pt_note_printf(&n, &slot, "%s", big);
    CU_ASSERT_EQUAL(strlen(e), sizeof n.buf[0] - 2);
    CU_ASSERT_EQUAL(e[sizeof n.buf[0] - 1], 0);
}

/* ------------------------------------------------------ under signals */

static pt_note shared_note;
static const char *volatile shared_slot;
static atomic_long reads, torn, writes;
static atomic_int writing_done;
static pthread_t writer;

/* Whether s is a whole line of write_line's form: "N:" then a run of one
 * letter of length N % 200, then ":N". No library call that is not
 * async-signal-safe. */
static int line_whole(const char *s)
{
    long n1 = 0, n2 = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        n1 = n1 * 10 + (*p++ - '0');
    if (*p++ != ':')
        return 0;
    const char letter = (char)('a' + n1 % 26);
    long run = 0;
    while (*p == letter)
        p++, run++;
    if (run != n1 % 200 || *p++ != ':')
        return 0;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        n2 = n2 * 10 + (*p++ - '0');
    return *p == 0 && n1 == n2;
}

static void on_signal(int sig)
{
    (void)sig;
    const char *s = __atomic_load_n(&shared_slot, __ATOMIC_ACQUIRE);
    if (!s)
        return;
    atomic_fetch_add(&reads, 1);
    if (!line_whole(s))
        atomic_fetch_add(&torn, 1);
}

static void *write_notes(void *arg)
{
    const double seconds = *(const double *)arg;
    char run[256];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long n = 1;; n++) {
        const int len = (int)(n % 200);
        memset(run, 'a' + (int)(n % 26), (size_t)len);
        run[len] = 0;
        pt_note_printf(&shared_note, &shared_slot, "%ld:%s:%ld", n, run, n);
        atomic_fetch_add(&writes, 1);
        if (n % 1024 == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > seconds)
                break;
        }
    }
    atomic_store(&writing_done, 1);
    return NULL;
}

static void whole_under_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CU_ASSERT_FATAL(sigaction(SIGUSR2, &sa, NULL) == 0);
    double seconds = 1.0;
    CU_ASSERT_FATAL(pthread_create(&writer, NULL, write_notes, &seconds) == 0);
    long sent = 0;
    const struct timespec pause = {0, 2000}; /* 2 us */
    while (!atomic_load(&writing_done)) {
        pthread_kill(writer, SIGUSR2);
        sent++;
        nanosleep(&pause, NULL);
    }
    pthread_join(writer, NULL);
    printf(" (%ld notes, %ld signals, %ld read, %ld torn) ", (long)atomic_load(&writes), sent,
           (long)atomic_load(&reads), (long)atomic_load(&torn));
    CU_ASSERT(atomic_load(&reads) >= 1000); /* enough moments to have met a write */
    CU_ASSERT_EQUAL(atomic_load(&torn), 0);
}

static const pt_test tests[] = {{"basics", basics},
                                {"whole_under_signals", whole_under_signals},
                                {NULL, NULL}};
static const pt_test_suite suites[] = {{"note", tests}, {NULL, NULL}};
