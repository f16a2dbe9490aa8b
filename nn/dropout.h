/*
 * dropout.h (internal to nn/): the dropout mask as a pure function, shared by
 * the CPU backends and the CUDA kernels (and the tests).
 *
 * Whether element e of example `id` is kept at one dropout site is decided
 * by a counter-based hash, with no state and no draw order:
 *
 *   key  = pt_dropout_key(seed, step, unit, site)   one per site and step
 *   row  = pt_dropout_row(key, id)                  one per example
 *   bits = pt_dropout_bits(row, e)                  32 bits per element
 *   kept = bits >= pt_dropout_threshold(p)
 *
 * so a mask bit depends on (run.seed, the optimizer step, the example's
 * identity in the data set, the unit, the site in the unit, the element's
 * index in that example's tensor) and on nothing else: not on the
 * micro-batch the example travels in, its position there, the replica, the
 * stage, the thread count or the backend. That is what keeps pipelines,
 * replicas, the activation cache and resumed runs equal to one process.
 *
 * The mixer is the finaliser of splitmix64 (a bijection of 64-bit words
 * whose every output bit depends on every input bit); inputs are chained
 * through it, each added with an odd multiple of the golden-ratio increment
 * first, so distinct (key, id) and (row, e) give distinct words. A kept
 * element is scaled by 1 / (1 - p) (inverted dropout, as PyTorch), so the
 * expectation is unchanged and evaluation needs no rescaling.
 */
#ifndef PT_NN_DROPOUT_H
#define PT_NN_DROPOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define PT_DROPOUT_FN static inline __host__ __device__
#else
#define PT_DROPOUT_FN static inline
#endif

#define PT_DROPOUT_GAMMA 0x9e3779b97f4a7c15ULL

PT_DROPOUT_FN uint64_t pt_dropout_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* One site of one unit at one optimizer step (step counts from 0). */
PT_DROPOUT_FN uint64_t pt_dropout_key(uint64_t seed, int64_t step, int unit, int site)
{
    uint64_t h = pt_dropout_mix(seed ^ 0x6a09e667f3bcc909ULL); /* not the init streams' words */
    h = pt_dropout_mix(h + PT_DROPOUT_GAMMA * ((uint64_t)step + 1));
    return pt_dropout_mix(h + PT_DROPOUT_GAMMA * ((uint64_t)unit * 16 + (uint64_t)site + 1));
}

/* One example (its index in the data set) at one site. */
PT_DROPOUT_FN uint64_t pt_dropout_row(uint64_t key, int64_t id)
{
    return pt_dropout_mix(key + PT_DROPOUT_GAMMA * ((uint64_t)id + 1));
}

/* The 32 random bits of element e of that example's tensor. */
PT_DROPOUT_FN uint32_t pt_dropout_bits(uint64_t row, uint64_t e)
{
    return (uint32_t)(pt_dropout_mix(row + PT_DROPOUT_GAMMA * (e + 1)) >> 32);
}

/* Elements whose bits are below this are dropped: floor(p 2^32), so the
 * probability of a drop is p to within 2^-32 (0 for p = 0). p in [0, 1). */
PT_DROPOUT_FN uint32_t pt_dropout_threshold(double p)
{
    const double t = p * 4294967296.0;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}

#endif
