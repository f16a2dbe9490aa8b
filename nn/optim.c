/*
 * optim.c: the host-side arithmetic of an optimizer step that does not belong
 * to one segment: the clipping coefficient and the learning-rate schedules.
 * The elementwise AdamW update itself runs per segment (segment.c, through
 * the backend).
 */
#include "nn/nn.h"

#include <math.h>

double pt_clip_coef(double total_norm, double max_norm)
{
    if (max_norm <= 0.0)
        return 1.0;
    double coef = max_norm / (total_norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}

double pt_lr_at(const pt_lr_schedule *s, int64_t step)
{
    if (step < s->warmup)
        return s->base * (double)(step + 1) / (double)s->warmup;
    if (s->kind == PT_LR_CONSTANT)
        return s->base;
    int64_t span = s->total - s->warmup;
    double progress = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
    if (progress >= 1.0)
        return s->min_lr;
    if (s->kind == PT_LR_COSINE)
        return s->min_lr + 0.5 * (s->base - s->min_lr) * (1.0 + cos(M_PI * progress));
    return s->base + (s->min_lr - s->base) * progress;
}
