/*
 * rng.c: xoshiro256** with splitmix64 seeding. A generator is seeded from a
 * (seed, stream) pair so that independent consumers (each unit's
 * initialisation, each epoch's permutation) never share or depend on the
 * order of draws of one another.
 */
#include "nn/nn.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void pt_rng_seed(pt_rng *rng, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ splitmix64(&(uint64_t){stream * 0xd1b54a32d192ed03ULL + 1});
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

uint64_t pt_rng_next(pt_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double pt_rng_uniform(pt_rng *rng) { return (double)(pt_rng_next(rng) >> 11) * 0x1.0p-53; }

double pt_rng_normal(pt_rng *rng)
{
    /* Box-Muller with u1 in (0, 1] so log() is finite; one value per call keeps
     * the stream position a simple function of the number of draws. */
    double u1 = 1.0 - pt_rng_uniform(rng);
    double u2 = pt_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t pt_rng_below(pt_rng *rng, uint64_t n)
{
    /* Rejection on the top of the range keeps every value equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = pt_rng_next(rng);
    while (x >= limit);
    return x % n;
}
