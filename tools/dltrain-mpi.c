/* dltrain-mpi.c — dltrain's MPI glue: joining the job mpirun started, the
 * trainer's collectives (gradient all-reduce, tensor parallelism's, ZeRO's,
 * the ranks' check) as MPI calls, and leaving the job. Built without MPI it
 * is empty: every caller is under DLRT_HAVE_MPI too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "config.h" /* DLRT_HAVE_MPI */
#include "dltrain.h"
#ifdef DLRT_HAVE_MPI
#include <mpi.h>
#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h> /* Open MPI: MPIX_Query_cuda_support */
#endif

/* Started by mpirun (Open MPI, MPICH or a PMIx launcher)? Only then does
 * dltrain join an MPI job: a plain run stays a plain process. */
int dltrain_mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

struct mpi_job {
  int rank;
  double timeout_s; /* DLRT_MPI_TIMEOUT, default 120 */
  /* The ranks this one sums gradients with (its data-parallel group) and
   * those it holds one model with (its tensor-parallel group): both
   * MPI_COMM_WORLD, unless --tensor-parallel N splits the N x R ranks
   * into R replicas of N shards (sub-communicators). */
  MPI_Comm data, tensor;
};

/* One job a process: MPI_Init may be called once. */
static mpi_job the_job;

mpi_job *dltrain_mpi_start(int *argc, char ***argv, int *rank, int *world) {
  mpi_job *job = &the_job;
  *job = (mpi_job){0, 120, MPI_COMM_NULL, MPI_COMM_NULL};
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, world);
  job->rank = *rank;
  job->data = job->tensor = MPI_COMM_WORLD;
  const char *timeout = getenv("DLRT_MPI_TIMEOUT");
  if (timeout && atof(timeout) > 0) job->timeout_s = atof(timeout);
  return job;
}

void dltrain_mpi_split(mpi_job *job, int rank, int tp_ranks) {
  MPI_Comm_split(MPI_COMM_WORLD, rank / tp_ranks, rank, &job->tensor);
  MPI_Comm_split(MPI_COMM_WORLD, rank % tp_ranks, rank, &job->data);
}

void dltrain_mpi_end(mpi_job *job, int status, int world, int ranks_agree_to_stop) {
  /* The others stop too (unless all stop on the same verdict). */
  if (status != 0 && world > 1 && !ranks_agree_to_stop) MPI_Abort(MPI_COMM_WORLD, status);
  if (job->data != MPI_COMM_WORLD) MPI_Comm_free(&job->data);
  if (job->tensor != MPI_COMM_WORLD) MPI_Comm_free(&job->tensor);
  MPI_Finalize();
}

/* The gradient all-reduce, bucket by bucket while the backward pass goes on
 * (dlrt_trainer_set_allreduce_async): each bucket starts an MPI_Iallreduce,
 * and the waits are polled, so that a rank that died (or hangs) stops the
 * others with a message instead of a hang. */
int dltrain_mpi_allreduce_start(void *user, float *values, int64_t count, void **request) {
  mpi_job *job = user;
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req) {
    fprintf(stderr, "dltrain: rank %d: out of host memory\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_FLOAT, MPI_SUM, job->data,
                     req) != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_Iallreduce failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  *request = req;
  return 0;
}

int dltrain_mpi_allreduce_wait(void *user, void *request) {
  mpi_job *job = user;
  MPI_Request *req = request;
  double deadline = tool_now_s() + job->timeout_s;
  for (int done = 0;;) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) {
      free(req);
      return 0;
    }
    if (tool_now_s() > deadline) {
      fprintf(stderr, "dltrain: rank %d: the other ranks did not join the gradient all-reduce "
              "within %.0f s (did one stop? see its messages; DLRT_MPI_TIMEOUT sets the "
              "wait); stopping the job\n", job->rank, job->timeout_s);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct timespec pause = {0, 50000}; /* 50 us */
    nanosleep(&pause, NULL);
  }
}

/* Tensor parallelism's collective across the ranks (one shard each): the
 * sum or maximum of `count` floats, in place, polled as the gradient
 * all-reduce's waits are (a rank that stopped ends the job with a message). */
int dltrain_mpi_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                           int64_t tag) {
  mpi_job *job = user;
  (void)tag; /* MPI orders the collectives itself */
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req || MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_FLOAT,
                             op == DLRT_COLLECTIVE_MAX ? MPI_MAX : MPI_SUM, job->tensor,
                             req) != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: the tensor-parallel all-reduce failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return dltrain_mpi_allreduce_wait(user, req);
}

/* ZeRO's collectives (dlrt_zero_collectives): a sum to one rank, in place
 * there (MPI_Ireduce), and one rank's values to all (MPI_Ibcast), completed
 * by dltrain_mpi_allreduce_wait. */
static int mpi_rooted_start(void *user, float *values, int64_t count, int root, void **request,
                            int reduce) {
  mpi_job *job = user;
  MPI_Request *req = malloc(sizeof *req); /* freed by the wait */
  if (!req) {
    fprintf(stderr, "dltrain: rank %d: out of host memory\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Over the data-parallel ranks (all of them, or those holding the same
   * tensor-parallel shard); root is a rank among them. */
  int me;
  MPI_Comm_rank(job->data, &me);
  int ok = reduce ? MPI_Ireduce(me == root ? MPI_IN_PLACE : values, values, (int)count,
                                MPI_FLOAT, MPI_SUM, root, job->data, req)
                  : MPI_Ibcast(values, (int)count, MPI_FLOAT, root, job->data, req);
  if (ok != MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_I%s failed\n", job->rank, reduce ? "reduce" : "bcast");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  *request = req;
  return DLRT_OK;
}

int dltrain_mpi_reduce_start(void *user, float *values, int64_t count, int root,
                             void **request) {
  return mpi_rooted_start(user, values, count, root, request, 1);
}

int dltrain_mpi_broadcast_start(void *user, float *values, int64_t count, int root,
                                void **request) {
  return mpi_rooted_start(user, values, count, root, request, 0);
}

/* The all-gather of dlrt_trainer_check_ranks. */
int dltrain_mpi_allgather(void *user, const void *mine, void *all, size_t bytes) {
  mpi_job *job = user;
  if (MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, job->data) !=
      MPI_SUCCESS) {
    fprintf(stderr, "dltrain: rank %d: MPI_Allgather failed\n", job->rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}

/* Whether this MPI reads device memory (a CUDA-aware Open MPI says so at
 * run time). */
int dltrain_mpi_cuda_aware(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support();
#else
  return 0;
#endif
}
#endif
