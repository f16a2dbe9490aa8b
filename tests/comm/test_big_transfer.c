/*
 * test_big_transfer.c (under mpirun, 2 ranks): transfers past MPI's int
 * count. A unit of a large model moved at a re-plan, or a large stage's
 * micro-batch, can exceed 2 GiB; pt_isend / pt_irecv and pt_bcast must
 * carry it whole. 2 GiB + 4099 bytes (whole GiB blocks and a rest that is
 * no multiple of anything) go from rank 0 to rank 1 by send and receive,
 * then back by broadcast from rank 1, and every byte is checked; then one
 * transfer of exactly INT_MAX bytes + 1 (one block over the limit) and one
 * small one, so the types made for each size are exercised.
 */
#include "comm/comm.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* byte i of message `seed`: no period that a misplaced block would match */
static unsigned char byte_at(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    return (unsigned char)(x >> 56 ^ x >> 29);
}

static void fill(unsigned char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = byte_at(i, seed);
}

/* the first wrong byte, or n */
static size_t first_wrong(const unsigned char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != byte_at(i, seed))
            return i;
    return n;
}

/* one message of n bytes from rank 0 to 1 (send and receive), then back to
 * rank 0 by a broadcast from rank 1; 0 when both arrive whole */
static int round_trip(pt_group *world, int me, unsigned char *buf, size_t n, unsigned seed)
{
    pt_err err = {0};
    pt_req r = {0};
    int rc = 0;
    if (me == 0) {
        fill(buf, n, seed);
        rc = pt_isend(world, buf, n, 1, 7, &r, &err);
    } else {
        memset(buf, 0, n);
        rc = pt_irecv(world, buf, n, 0, 7, &r, &err);
    }
    if (rc == 0)
        rc = pt_wait(world, &r, "the big message", &err);
    if (rc) {
        fprintf(stderr, "rank %d, %zu bytes: %s\n", me, n, err.msg);
        return 1;
    }
    int bad = 0;
    size_t at;
    if (me == 1 && (at = first_wrong(buf, n, seed)) != n) {
        fprintf(stderr, "send/receive of %zu bytes: byte %zu wrong\n", n, at);
        bad = 1;
    }
    /* back by broadcast, from the receiver, with another pattern */
    if (me == 1)
        fill(buf, n, seed + 1);
    else
        memset(buf, 0, n);
    if (pt_bcast(world, buf, n, 1, &err)) {
        fprintf(stderr, "rank %d, broadcast of %zu bytes: %s\n", me, n, err.msg);
        return 1;
    }
    if (me == 0 && (at = first_wrong(buf, n, seed + 1)) != n) {
        fprintf(stderr, "broadcast of %zu bytes: byte %zu wrong\n", n, at);
        bad = 1;
    }
    return bad;
}

int main(int argc, char **argv)
{
    pt_comm *comm;
    pt_err err;
    if (pt_comm_open(&comm, &argc, &argv, 600, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    pt_group *world = pt_comm_world(comm);
    const int me = pt_comm_rank(comm);
    if (pt_comm_size(comm) != 2) {
        if (me == 0)
            fprintf(stderr, "run on 2 ranks\n");
        pt_comm_close(comm, 0);
        return 1;
    }
    const size_t sizes[] = {((size_t)2 << 30) + 4099, (size_t)INT_MAX + 1, 1000};
    const size_t most = sizes[0];
    unsigned char *buf = malloc(most);
    int64_t failed = buf ? 0 : 1;
    for (int k = 0; buf && k < 3; k++)
        failed += round_trip(world, me, buf, sizes[k], 11u * (unsigned)k + 3);
    free(buf);
    pt_allreduce_sum(world, &failed, 1, PT_DT_I64, &err);
    if (me == 0)
        printf("transfers of %zu, %zu and %zu bytes: %lld failed\n", sizes[0], sizes[1], sizes[2],
               (long long)failed);
    pt_comm_close(comm, 0);
    return failed ? 1 : 0;
}
