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

/* The convention is torch.optim.lr_scheduler's, as a PyTorch user builds it:
 *   warm-up  LinearLR(start_factor=1/w, end_factor=1, total_iters=w)
 *   then     ConstantLR(factor=1) | CosineAnnealingLR(T_max=n-w, eta_min=min_lr)
 *            | LinearLR(start_factor=1, end_factor=min_lr/lr, total_iters=n-w)
 *   chained  SequentialLR(milestones=[w]), stepped once after every update.
 * So update s (0-based) uses lr (1/w + (1 - 1/w) s/w) during warm-up, which
 * rises from lr/w and never reaches lr; the peak is used once, by update w,
 * the first of the decay; the decay reaches min_lr at step n, one past the
 * last update (as torch's schedulers do with T_max = n - w). These are the
 * closed forms of what torch computes recursively. */
double pt_lr_at(const pt_lr_schedule *s, int64_t step)
{
    if (step < s->warmup) {
        const double w = (double)s->warmup, start = 1.0 / w;
        return s->base * (start + (1.0 - start) * (double)step / w);
    }
    if (s->kind == PT_LR_CONSTANT)
        return s->base;
    const int64_t span = s->total - s->warmup, t = step - s->warmup;
    if (span <= 0 || t >= span)
        return s->min_lr;
    const double progress = (double)t / (double)span;
    if (s->kind == PT_LR_COSINE)
        return s->min_lr + 0.5 * (s->base - s->min_lr) * (1.0 + cos(M_PI * progress));
    return s->base + (s->min_lr - s->base) * progress;
}
