/*
 * comm_group.h (internal to comm/): a group as comm.c (MPI) and nccl.c (NCCL)
 * both see it.
 */
#ifndef PT_COMM_GROUP_H
#define PT_COMM_GROUP_H

#include "comm/comm.h"

#include <mpi.h>

struct pt_nccl; /* nccl.c */

struct pt_group {
    MPI_Comm mpi;
    int rank, size;
    double timeout;
    int owned;             /* MPI_Comm_free on release */
    struct pt_nccl *nccl;  /* NULL until pt_group_nccl_open */
    int solo;              /* a group of one without MPI (comm.c, solo_open) */
};


#endif
